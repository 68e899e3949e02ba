"""The leader Lease as data and as a port: what `controller.leadership` (the election algorithm)
needs from a Lease store, and what `adapters.kubernetes_lease` implements on the API server.
Pure: both sides import it from here, so the adapter never imports the controller."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class LeaseRecord:
    holder: str | None
    duration_seconds: int
    transitions: int = 0
    renew_time: datetime | None = None
    acquire_time: datetime | None = None
    resource_version: str = ""


class LeaseStore(Protocol):
    """Blocking access to one Lease object (adapters/kubernetes_lease.py)."""

    def get(self) -> LeaseRecord | None: ...

    def create(self, record: LeaseRecord) -> LeaseRecord | None:
        """None when it already exists (someone else created it first)."""
        ...

    def update(self, record: LeaseRecord) -> LeaseRecord | None:
        """Compare-and-swap on `resource_version`; None on conflict."""
        ...
