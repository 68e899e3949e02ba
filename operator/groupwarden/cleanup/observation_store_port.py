"""The port of the operator's observation store: where the first-observed times of a cluster
outlive the process (records and rules: `core/observation_store_records.py`; the Kafka implementation:
`adapters/kafka_observation_store.py`)."""

from __future__ import annotations

from typing import Protocol

from groupwarden.core.observation_store_records import ObservationBatch, StoredObservations


class ObservationStoreError(Exception):
    """The store could not be opened or written (the message never holds a secret). `missing`
    names the grant that was refused, when the broker said so (e.g. "Write on Topic T")."""

    def __init__(self, message: str, missing: str | None = None) -> None:
        super().__init__(message)
        self.missing = missing


class ObservationStoreFenced(ObservationStoreError):
    """A newer writer opened the store (another replica took over): this one must not write."""


class ObservationStoreMissing(ObservationStoreError):
    """`open(create=False)` found no store: nothing was kept for this cluster (nothing created)."""


class ObservationStore(Protocol):
    """One cluster's stored observations, for one writer at a time. Blocking."""

    def open(self, create: bool = True) -> StoredObservations:
        """Fences every writer that opened the store before (their later writes fail), then reads
        what the store holds for the cluster. `create=False` only opens a store that exists
        (ObservationStoreMissing otherwise): a process's first look at a cluster that may not
        need one. Raises ObservationStoreError."""
        ...

    def write(self, batch: ObservationBatch) -> None:
        """Stores `batch` atomically (all its records or none). Raises ObservationStoreFenced when
        a newer writer opened the store since this one did, ObservationStoreError otherwise."""
        ...

    def close(self) -> None: ...
