"""The observation store as a compacted Kafka topic on the cleaned cluster itself (the records:
`core/observation_store_records.py`). The operator can always write there: it already talks to that
cluster, and a Kubernetes object is bounded in size (1.5 MiB) where 100k groups' clocks are not.

- `cleanup.policy=compact`: the topic keeps the latest record per (cluster, group) and drops
  tombstones after `delete.retention.ms`, so it stays as big as the groups being watched.
  Created on first use when the principal may (CreateTopics); an existing topic is used as is.
- Fencing: a transactional producer with one fixed `transactional.id` per topic. A replica's
  `open` calls `init_transactions`, which makes the broker bump the id's producer epoch and abort
  whatever transaction an earlier holder left open: from then on that earlier producer's writes
  fail with a fenced error. Why this and not only the Lease: a deposed leader checks the Lease
  before a batch, but a pause (GC, a slow API server, a partition) between its check and its
  write could land the write after the new leader loaded the store; the broker-side epoch closes
  that window, the Lease check only saves the round trip.
- `open` fences first and reads after, with read_committed: it sees everything the earlier
  holder committed, and nothing it can still add.
- Each `write` is one transaction. A pass's changes come as pieces of at most `PIECE_GROUPS`
  groups, the pass record in the last one (why pieces are safe: `core/observation_store_records.py`),
  and the producer's queue is bounded, so what a write holds is a piece, not the pass.
- Needs Create (unless pre-created), Write and Read on the topic and Write on the TransactionalId
  `groupwarden-observations:<topic>` (Describe is implied by both; nothing on groups or the
  cluster, except IdempotentWrite on brokers older than 3.0): found on a real broker, one
  operation removed at a time (docs/operator.md, "RBAC").
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Final

from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from groupwarden.adapters.client_config import confluent_config
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.gateway import KafkaUnavailable, OffsetsLogUnavailable
from groupwarden.cleanup.observation_store_port import (
    ObservationStoreError,
    ObservationStoreFenced,
    ObservationStoreMissing,
)
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.core.observation_store_records import (
    PIECE_GROUPS,
    ObservationBatch,
    StoredObservations,
    fold,
    iter_batch_records,
)

log = logging.getLogger(__name__)

DEFAULT_TOPIC: Final = "groupwarden-observations"
# Compaction settings of a created topic: segments roll every 6 h so compaction can reclaim the
# pass records and superseded entries within a day; tombstones stay 1 day (a reader started
# before their compaction still sees them).
TOPIC_CONFIG: Final = {
    "cleanup.policy": "compact",
    "segment.ms": str(6 * 3600 * 1000),
    "delete.retention.ms": str(24 * 3600 * 1000),
    "min.compaction.lag.ms": "0",
}
# The producer's queue (messages, KiB): twice a piece of records with 6 offset clocks each.
QUEUE_MESSAGES: Final = 2 * PIECE_GROUPS + 1
QUEUE_KBYTES: Final = 10 * 1024
# Refusals of the authorizer, and the grant each one says is missing (docs/operator.md, "RBAC").
_DENIED: Final = {
    CKError.TOPIC_AUTHORIZATION_FAILED: "Topic",
    CKError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId",
    CKError.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
}
# Errors that say another producer with our transactional.id took over.
_FENCED: Final = frozenset(
    {
        CKError._FENCED,
        CKError.PRODUCER_FENCED,
        CKError.INVALID_PRODUCER_EPOCH,
        CKError.INVALID_PRODUCER_ID_MAPPING,
    }
)


def transactional_id(topic: str) -> str:
    """The same for every replica of one install (one topic), so each `open` fences the others."""
    return f"groupwarden-observations:{topic}"


class KafkaObservationStore:
    """`ObservationStore` on a compacted topic. One producer per opened store; not thread-safe
    (a cluster runs one pass at a time)."""

    def __init__(
        self,
        settings: ConnectionSettings,
        cluster_id: str,
        topic: str = DEFAULT_TOPIC,
        *,
        create: bool = True,
        timeout_ms: int | None = None,
    ) -> None:
        self.settings = settings
        self.cluster_id = cluster_id
        self.topic = topic
        self._create = create
        self._timeout_s = (settings.api_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        self._producer: Producer | None = None

    def open(self, create: bool = True) -> StoredObservations:
        try:
            return self._open(create)
        except ObservationStoreError:
            raise
        except Exception as error:  # a client error we did not expect: the store only, never the pass
            self._producer = None
            raise ObservationStoreError(f"{self.topic}: opening: {type(error).__name__}") from None

    def _open(self, create: bool) -> StoredObservations:
        if not create and not self._topic_exists():
            raise ObservationStoreMissing(f"{self.topic} does not exist")
        created = create and self._create and self._create_topic()
        producer = Producer(
            {
                **confluent_config(self.settings),
                "transactional.id": transactional_id(self.topic),
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                # Bounded: librdkafka's default queue (100k messages, 1 GiB) held a first write of
                # 100k groups whole. A piece (`PIECE_GROUPS`) fits; a bigger batch waits for
                # deliveries in `_produce` (records are sent during the transaction, not at its
                # commit).
                "queue.buffering.max.messages": QUEUE_MESSAGES,
                "queue.buffering.max.kbytes": QUEUE_KBYTES,
                # An abandoned transaction (a leader killed mid-batch) blocks read_committed
                # readers until it times out or the next holder's init aborts it. librdkafka wants
                # message.timeout.ms <= transaction.timeout.ms.
                "transaction.timeout.ms": max(60_000, int(self._timeout_s * 1000)),
                "message.timeout.ms": int(self._timeout_s * 1000),
                "allow.auto.create.topics": False,
            }
        )
        try:
            producer.init_transactions(self._timeout_s)
        except KafkaException as error:
            raise self._error("fencing earlier writers", error, "Write") from None
        self._producer = producer
        if created:
            return StoredObservations()  # just created: nothing to read (its partitions may not lead yet)
        try:
            reader = OffsetsLogReader(self.settings, topic=self.topic)
            stored = fold(self.cluster_id, ((r.key, r.value) for r in reader.read({})))
        except (OffsetsLogUnavailable, KafkaUnavailable) as error:
            self._producer = None
            text = self.settings.redact(str(error))
            missing = None
            if "AUTHORIZATION_FAILED" in text:
                missing = f"Read on Topic {self.topic}"
            elif "UNKNOWN_TOPIC" in text:  # not created (no Create, or creation off) and not there
                missing = f"Create on Topic {self.topic} (or the topic created beforehand, compacted)"
            raise ObservationStoreError(f"reading {self.topic}: {text}", missing) from None
        return stored

    def _topic_exists(self) -> bool:
        admin = AdminClient(confluent_config(self.settings))
        try:
            metadata = admin.list_topics(self.topic, timeout=self._timeout_s)
        except KafkaException as error:
            raise self._error("looking the topic up", error, "Describe") from None
        found = metadata.topics.get(self.topic)
        return found is not None and found.error is None

    def _create_topic(self) -> bool:
        """True when this call created the topic."""
        admin = AdminClient(confluent_config(self.settings))
        new = NewTopic(self.topic, num_partitions=-1, replication_factor=-1, config=dict(TOPIC_CONFIG))
        future = admin.create_topics([new], request_timeout=self._timeout_s)[self.topic]
        try:
            future.result()
        except Exception as error:
            kafka_error = error.args[0] if error.args and isinstance(error.args[0], CKError) else None
            if kafka_error is None or kafka_error.code() != CKError.TOPIC_ALREADY_EXISTS:
                name = kafka_error.name() if kafka_error is not None else type(error).__name__
                # Every open tries again: the keeper reports a store that then fails, once.
                log.debug("observation topic %s not created (%s): using it as it is", self.topic, name)
            return False
        log.info("created the observation topic %s", self.topic)
        return True

    def write(self, batch: ObservationBatch) -> None:
        try:
            self._write(batch)
        except ObservationStoreError:
            raise
        except Exception as error:
            raise ObservationStoreError(f"{self.topic}: writing: {type(error).__name__}") from None

    def _write(self, batch: ObservationBatch) -> None:
        """One transaction: the batch (a piece of a pass's changes, `BatchPieces`) is stored whole
        or not at all. Its records are made as they are produced, never all at once."""
        producer = self._producer
        if producer is None:
            raise ObservationStoreError("the observation store is not open")
        try:
            producer.begin_transaction()
            for key, value in iter_batch_records(batch):
                self._produce(producer, key, value)
            producer.commit_transaction(self._timeout_s)
        except KafkaException as error:
            kafka_error = error.args[0] if error.args and isinstance(error.args[0], CKError) else None
            if kafka_error is not None and kafka_error.txn_requires_abort():
                with contextlib.suppress(KafkaException):  # the error below says what failed
                    producer.abort_transaction(self._timeout_s)
            raise self._error(f"writing {batch.size} changes", error, "Write") from None

    def _produce(self, producer: Producer, key: bytes, value: bytes | None) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            try:
                producer.produce(self.topic, key=key, value=value)
                return
            except BufferError:  # the local queue is full (QUEUE_MESSAGES, QUEUE_KBYTES)
                if time.monotonic() > deadline:
                    raise ObservationStoreError(f"{self.topic}: producer queue full") from None
                producer.poll(0.1)

    def _error(self, doing: str, error: KafkaException, operation: str) -> ObservationStoreError:
        kafka_error = error.args[0] if error.args and isinstance(error.args[0], CKError) else None
        if kafka_error is None:
            return ObservationStoreError(f"{self.topic}: {doing}: {type(error).__name__}")
        text = f"{self.topic}: {doing}: {kafka_error.name()}: {self.settings.redact(kafka_error.str())}"
        if kafka_error.code() in _FENCED:
            self._producer = None
            return ObservationStoreFenced(text)
        if kafka_error.fatal():
            self._producer = None  # a fatal producer never works again: open a new one
        return ObservationStoreError(text, self._missing(kafka_error.code(), operation))

    def _missing(self, code: int, operation: str) -> str | None:
        resource = _DENIED.get(code)
        if resource == "Topic":
            return f"{operation} on Topic {self.topic}"
        if resource == "TransactionalId":
            return f"Write on TransactionalId {transactional_id(self.topic)}"
        if resource == "Cluster":
            return "IdempotentWrite on Cluster (brokers older than 3.0)"
        return None

    def close(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            # A producer left fatal by a refused batch (no Write on the topic) raises here; it
            # has nothing to flush, and closing must not fail the caller.
            with contextlib.suppress(KafkaException):
                producer.flush(0)
