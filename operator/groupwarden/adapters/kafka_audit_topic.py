"""The audit trail as a Kafka topic: a write-ahead sink for the operator, a reader for `restore`.

Kubernetes Events expire after an hour and pod logs rotate; a topic on the cluster being cleaned
keeps the trail as long as its retention says, next to the data it describes, and `groupwarden
restore --audit-topic` reads it back with the same credentials.

- Records are the lines of `deletion_trail` (signed envelopes), keyed by group id: one group's
  intents and outcomes land in one partition, in order. The value is the line's exact bytes.
- `write` returns only when the broker acknowledged the record (acks=all, idempotent producer);
  otherwise it raises and the recorder blocks the deletion (write-ahead rule). Through a failover
  the producer re-sends to the partition's new leader by itself; a write gives up after the
  settings' API timeout (`default.api.timeout.ms`, the deadline of every Kafka request path),
  or at once when the process is stopping (connectivity/stopping.py).
- The topic is created on first use when the principal may (CreateTopics); when it may not, an
  existing topic is used as is, and a missing one makes every write fail (nothing is deleted).
- A write raises only `AuditTopicError`, whatever the client raised (the tree:
  adapters/client_errors.py); reading raises the offsets-log reader's port exceptions.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final

from confluent_kafka import KafkaError as CKError
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupwarden.adapters.client_config import confluent_config
from groupwarden.adapters.client_errors import CLIENT_EXCEPTIONS, confluent_error, exception_text
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.connectivity.stopping import stopping
from groupwarden.deletion_trail import TrailEntry

log = logging.getLogger(__name__)

# Created topics keep the trail for 90 days unless the platform team pre-creates the topic with
# its own settings (an existing topic is never reconfigured).
DEFAULT_RETENTION_MS: Final = 90 * 24 * 3600 * 1000


class AuditTopicError(Exception):
    """A record could not be stored in the audit topic (the message never holds a secret).
    `entry`: the record of a batch that was not stored (None: unknown)."""

    def __init__(self, message: str, entry: TrailEntry | None = None) -> None:
        super().__init__(message)
        self.entry = entry


def _appending_to(delivered: list[CKError | None]) -> Callable[[CKError | None, object], None]:
    """A delivery callback that keeps the record's error (None: acknowledged)."""

    def on_delivery(error: CKError | None, _message: object) -> None:
        delivered.append(error)

    return on_delivery


def _first(
    outcomes: Sequence[tuple[TrailEntry, list[CKError | None]]], entries: Sequence[TrailEntry]
) -> TrailEntry | None:
    """The first entry of a batch whose write failed: not produced, or produced and not delivered."""
    for entry, delivered in outcomes:
        if not delivered or delivered[0] is not None:
            return entry
    return entries[len(outcomes)] if len(outcomes) < len(entries) else None


# A flush waits in slices this long, so a stopping process gives up within one.
FLUSH_SLICE_S: Final = 0.5


def _flush(producer: Producer, timeout_s: float) -> int:
    """`producer.flush(timeout_s)`, given up when the process is stopping (connectivity/stopping.py):
    the records not acknowledged by then are not stored (an intent's deletion is not sent)."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = int(producer.flush(min(FLUSH_SLICE_S, max(0.0, deadline - time.monotonic()))))
        if not remaining or stopping() or time.monotonic() >= deadline:
            return remaining


class KafkaTopicSink:
    """`AuditSink` writing to a Kafka topic. Thread-safe; one producer per sink."""

    def __init__(
        self,
        settings: ConnectionSettings,
        topic: str,
        *,
        create: bool = True,
        retention_ms: int = DEFAULT_RETENTION_MS,
        timeout_ms: int | None = None,
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.path = f"Kafka topic {topic}"  # how AuditWriteError names the sink
        self._create = create
        self._retention_ms = retention_ms
        self._timeout_ms = settings.api_timeout_ms if timeout_ms is None else timeout_ms
        self._lock = threading.Lock()
        self._producer: Producer | None = None
        self._errors: list[str] = []

    def _ensure(self) -> Producer:
        if self._producer is None:
            if self._create:
                self._create_topic()
            config: dict[str, Any] = {
                **confluent_config(self.settings),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": self._timeout_ms,
                # A missing topic must fail the write, never be auto-created with broker defaults.
                "allow.auto.create.topics": False,
                "error_cb": lambda error: self._errors.append(error.name()),
            }
            self._producer = Producer(config)
        return self._producer

    def _create_topic(self) -> None:
        admin = AdminClient(confluent_config(self.settings))
        topic = NewTopic(
            self.topic,
            num_partitions=-1,  # the broker's defaults (num.partitions, default.replication.factor)
            replication_factor=-1,
            config={"cleanup.policy": "delete", "retention.ms": str(self._retention_ms)},
        )
        future = admin.create_topics([topic], request_timeout=self._timeout_ms / 1000)[self.topic]
        try:
            future.result()
            log.info("created the audit topic %s", self.topic)
        except Exception as error:
            kafka_error = error.args[0] if error.args and isinstance(error.args[0], CKError) else None
            if kafka_error is not None and kafka_error.code() == CKError.TOPIC_ALREADY_EXISTS:
                return
            # Not allowed (or another failure): use the topic if it exists; writes say if it does not.
            name = kafka_error.name() if kafka_error is not None else type(error).__name__
            log.info("audit topic %s not created (%s): using it as it is", self.topic, name)

    def write(self, entry: TrailEntry) -> None:
        self.write_many([entry])

    def write_many(self, entries: Sequence[TrailEntry]) -> None:
        """Every entry produced, then one flush: returns only when the broker acknowledged each
        (a batch of intents costs one round of acks, not one per group); otherwise raises
        AuditTopicError naming (`entry`) the first entry not stored."""
        outcomes: list[tuple[TrailEntry, list[CKError | None]]] = []
        try:
            with self._lock:
                producer = self._ensure()
                for entry in entries:
                    delivered: list[CKError | None] = []
                    producer.produce(
                        self.topic,
                        value=entry.line.encode("utf-8"),
                        key=str(entry.record.get("group", "")).encode(),
                        on_delivery=_appending_to(delivered),
                    )
                    outcomes.append((entry, delivered))
                remaining = _flush(producer, self._timeout_ms / 1000 + 5)
        except (*CLIENT_EXCEPTIONS, BufferError) as exc:  # BufferError: the producer's queue is full
            self._discard()
            raise AuditTopicError(
                f"{self.path}: {self._client_error(exc)}", _first(outcomes, entries)
            ) from None
        for entry, delivered in outcomes:
            if remaining or not delivered:
                self._discard()
                raise AuditTopicError(f"no acknowledgement from {self.path} in {self._timeout_ms} ms", entry)
            error = delivered[0]
            if error is not None:
                self._discard()
                raise AuditTopicError(
                    f"{self.path}: {error.name()}: {self.settings.redact(error.str())}", entry
                )

    def _client_error(self, exc: BaseException) -> str:
        error = confluent_error(exc)
        text = f"{error.name()}: {error.str()}" if error is not None else exception_text(exc)
        return self.settings.redact(text)

    def _discard(self) -> None:
        """After a failed write the next one starts with a new producer (an idempotent producer can
        be left in a fatal state) and tries to create the topic again (it may exist by now)."""
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            # A producer in a fatal state may refuse even this: it is dropped either way.
            with contextlib.suppress(*CLIENT_EXCEPTIONS):
                producer.purge()
                producer.flush(0)

    def close(self) -> None:
        try:
            with self._lock:
                if self._producer is not None:
                    self._producer.flush(5)
                    self._producer = None
        except CLIENT_EXCEPTIONS as exc:
            raise AuditTopicError(f"{self.path}: {self._client_error(exc)}") from None


def read_audit_topic(settings: ConnectionSettings, topic: str) -> Iterator[tuple[str, str]]:
    """The topic's records as (position `TOPIC/PARTITION@OFFSET`, text) up to its end at the time of
    the call, partition by partition. Bytes that are not UTF-8 are replaced (such a record then
    fails its signature).

    Raises OffsetsLogUnavailable when the topic cannot be read (missing, not authorized)."""
    reader = OffsetsLogReader(settings, topic=topic)
    for record in reader.read({}):
        if record.value is not None:
            position = f"{topic}/{record.partition}@{record.offset}"
            yield position, record.value.decode("utf-8", errors="replace")
