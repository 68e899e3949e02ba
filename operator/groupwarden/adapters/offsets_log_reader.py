"""`OffsetsLogReader`: reads `__consumer_offsets` with confluent-kafka (librdkafka), as the ledger
needs it.

- Every partition, manually assigned from the caller's next offset (or the log start) up to the end
  offsets captured when the read starts: a bounded read that always finishes.
- `isolation.level=read_committed`: offsets committed inside a transaction (KIP-98,
  TxnOffsetCommit) only count once the transaction commits; aborted ones are never delivered.
  With read_committed the broker stops at the last stable offset, and librdkafka's
  partition-EOF event tells us we are there, so an open transaction never stalls a read. An EOF
  below the end taken at the start means the partition's leader changed mid-read (`_reached_end`).
- No group membership and no commits: librdkafka insists on a `group.id`, but a consumer that only
  uses `assign()` with explicit offsets and `enable.auto.commit=false` never joins or commits, so
  the group never exists on the broker.
- A partition whose log start moved past the caller's position (retention or DeleteRecords removed
  records we never saw) raises `OffsetsLogGap`: the caller must rebuild its ledger from scratch.
- No Read permission on the topic (or a managed service hiding it) raises `OffsetsLogUnavailable`,
  so callers fall back to first-observed times. Every confluent-kafka exception leaves as one of the
  port's (`_failure`; the tree: adapters/client_errors.py), also when records are read lazily.

confluent-kafka was chosen by measurement (docs/kafka-gateway.md): several times the throughput
of kafka-python's KafkaConsumer on the same broker.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Final

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition
from confluent_kafka import KafkaError as CKError

from groupwarden.adapters.client_config import confluent_config
from groupwarden.adapters.client_errors import CONFLUENT_AUTHENTICATION, client_errors_translated, tls_failure
from groupwarden.adapters.client_logs import REPEATED
from groupwarden.adapters.oauth_token import explain_refused_token
from groupwarden.cleanup.gateway import (
    KafkaAuthenticationFailed,
    KafkaUnavailable,
    OffsetsLogGap,
    OffsetsLogUnavailable,
)
from groupwarden.connectivity.process_memory import release_freed_memory
from groupwarden.connectivity.retry import RetryDeadline, RetryNotice, RetryObserver, RetryPolicy
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.connectivity.stopping import pause, stopping
from groupwarden.offsets_log.ledger import OffsetsLogRecord

log = logging.getLogger(__name__)
new_record = tuple.__new__


OFFSETS_TOPIC: Final = "__consumer_offsets"
# Never joined and never committed (see the module docstring); named so an operator can tell.
READER_GROUP_ID: Final = "groupwarden-offsets-log-reader"

_AUTHORIZATION: Final = frozenset(
    {
        CKError.TOPIC_AUTHORIZATION_FAILED,
        CKError.CLUSTER_AUTHORIZATION_FAILED,
        CKError.GROUP_AUTHORIZATION_FAILED,
    }
)
_AUTHENTICATION: Final = CONFLUENT_AUTHENTICATION
# A partition's leader changed or its node went away (a failover): librdkafka finds the new
# leader itself; asked again (a watermark query) or waited out (a fetch) until the API timeout.
_LEADER_CHANGE: Final = frozenset(
    {
        CKError.NOT_LEADER_FOR_PARTITION,
        CKError.LEADER_NOT_AVAILABLE,
        CKError._TRANSPORT,
        CKError._ALL_BROKERS_DOWN,
        CKError._WAIT_COORD,
        CKError.REQUEST_TIMED_OUT,
        # A leader just elected answers ListOffsets with this until its high watermark caught up
        # (KIP-207): the end offset is asked again, as the Java clients do.
        CKError.OFFSET_NOT_AVAILABLE,
    }
)


class OffsetsLogReader:
    """Bounded reads of `__consumer_offsets`; one librdkafka consumer per `read`."""

    def __init__(
        self, settings: ConnectionSettings, *, topic: str = OFFSETS_TOPIC, batch_size: int = 20_000
    ) -> None:
        self.settings = settings
        self.topic = topic
        self.batch_size = batch_size
        self._errors: list[CKError] = []
        # Told before each pause of a retried watermark query (a partition's leader changing).
        self.on_retry: RetryObserver | None = None

    def close(self) -> None:
        """Nothing to release between reads (each read closes its consumer)."""

    def diagnose(self, timeout_s: float = 5.0) -> Exception | None:
        """Why the cluster cannot be used, as librdkafka sees it: KafkaAuthenticationFailed when
        SASL or TLS fails (librdkafka reports that reliably; kafka-python may only see a closed
        socket), KafkaUnavailable when unreachable, None when metadata can be read."""
        self._errors.clear()
        try:
            with self._translated():
                consumer = self._consumer()
                try:
                    self._partitions(consumer, timeout_s)
                finally:
                    consumer.close()
        except (KafkaUnavailable, OffsetsLogUnavailable) as exc:
            return exc if isinstance(exc, KafkaUnavailable) else None
        return None

    def _translated(self) -> contextlib.AbstractContextManager[None]:
        """A client call's confluent-kafka exception as the port's (`_failure`)."""
        return client_errors_translated(self.settings, f"reading {self.topic} from", self._failure)

    def _consumer(self) -> Consumer:
        config: dict[str, Any] = {
            **confluent_config(self.settings),
            "group.id": READER_GROUP_ID,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",  # never silently skip: a gap is reported, not jumped
            # Fetch sizes measured on a 1.39M-record log (docs/benchmarks.md, "The offsets-log
            # reader's buffers"): what made big fetches look fast was librdkafka's 1 s
            # fetch.queue.backoff.ms, the pause before it fetches again once its queue is full.
            # Asked again after 2 ms, 4 MiB fetches keep the queue ahead of our decoding (the
            # read is CPU-bound) and the read's peak falls by ~135 MiB (a fetch's records are
            # parsed into librdkafka's message structs at once: ~3x the fetch's bytes).
            "fetch.max.bytes": 4 * 1024 * 1024,
            "max.partition.fetch.bytes": 2 * 1024 * 1024,
            "queued.max.messages.kbytes": 2 * 1024,
            "fetch.queue.backoff.ms": 2,
            "error_cb": self._errors.append,
        }
        return Consumer(config)

    def read(
        self,
        start_positions: Mapping[int, int],
        *,
        partitions: Collection[int] | None = None,
        until: Mapping[int, int] | None = None,
    ) -> Iterator[OffsetsLogRecord]:
        """Records from `start_positions[partition]` (next offset; absent = from the log start)
        up to the end offsets at the start of the call, in per-partition log order; only
        `partitions` when given, and below `until[partition]` when given (several readers sharing
        one read, `export-offsets-log --parallel`).

        Problems found before reading (unreadable topic, a gap, failed authentication) raise
        here, at the call, like the fake; records then come lazily. Iterate to the end (or close
        the iterator) to release the consumer."""
        self._errors.clear()
        with self._translated():
            consumer = self._consumer()
            try:
                timeout = self.settings.api_timeout_ms / 1000
                begins, ends = self._bounds(consumer, start_positions, timeout, partitions)
                for partition, end in (until or {}).items():
                    if partition in ends and end < ends[partition]:
                        ends[partition] = end
                        if begins[partition] >= end:
                            del begins[partition], ends[partition]
            except BaseException:
                consumer.close()
                raise
            if not ends:
                consumer.close()
                return iter(())
        return self._records(consumer, begins, ends, timeout)

    def _records(
        self, consumer: Consumer, begins: dict[int, int], ends: dict[int, int], timeout: float
    ) -> Iterator[OffsetsLogRecord]:
        try:
            with self._translated():  # around the loop, nothing added per record
                consumer.assign([TopicPartition(self.topic, p, begin) for p, begin in begins.items()])
                stalled_at = time.monotonic() + timeout
                batch_size = self.batch_size
                while ends:
                    messages = consumer.consume(batch_size, 0.5)
                    if stopping():  # a read may be abandoned: the next leader reads it again
                        raise KafkaUnavailable(f"reading {self.topic} stopped: the operator is stopping")
                    if not messages:
                        self._raise_client_errors()
                        if time.monotonic() > stalled_at:
                            raise KafkaUnavailable(
                                f"reading {self.topic} made no progress for {timeout:.0f}s "
                                f"({len(ends)} partitions left)"
                            )
                        continue
                    stalled_at = time.monotonic() + timeout
                    # The hot loop of a log read (10^6 records): names bound locally, and records made
                    # with tuple.__new__ (the NamedTuple's own __new__ is a Python-level call).
                    for message in messages:
                        error = message.error()
                        if error is not None:
                            self._on_event(consumer, message, ends, begins, timeout)
                            continue
                        partition: int = message.partition()  # type: ignore[assignment]  # set for records
                        offset: int = message.offset()  # type: ignore[assignment]
                        end = ends.get(partition)
                        if end is None:
                            continue  # this partition already reached its captured end
                        if offset >= end:
                            ends.pop(partition)
                            continue
                        yield new_record(
                            OffsetsLogRecord,
                            (message.key(), message.value(), message.timestamp()[1], partition, offset),
                        )
                        if offset + 1 >= end:
                            ends.pop(partition)
        finally:
            consumer.close()
            release_freed_memory()

    def _on_event(
        self,
        consumer: Consumer,
        event: Message,
        ends: dict[int, int],
        begins: dict[int, int],
        timeout: float,
    ) -> None:
        error: CKError = event.error()  # type: ignore[assignment]  # an event always has one
        partition = event.partition()
        if error.code() == CKError._PARTITION_EOF:
            if partition is not None and self._reached_end(
                consumer, partition, event.offset(), ends, timeout
            ):
                ends.pop(partition, None)
            return
        if error.code() == CKError._AUTO_OFFSET_RESET and partition is not None:
            # The log start passed our position between the watermark query and the fetch
            # (auto.offset.reset=error): the same gap, found a moment later.
            raise OffsetsLogGap(partition, begins.get(partition, -1), -1)
        if error.code() == CKError.GROUP_AUTHORIZATION_FAILED:
            # librdkafka looks up the coordinator of the reader's group.id although the reader
            # never joins or commits (see the module docstring): a principal without Describe on
            # that group may still read the topic, and a refused topic fails on its own.
            log.debug("%s: %s for the unused group %s (ignored)", self.topic, error.name(), READER_GROUP_ID)
            return
        if error.code() in _LEADER_CHANGE:
            # librdkafka fetches from the new leader once it knows it; a read that stops making
            # progress still ends at the API timeout (`_records`).
            log.info(
                "%s partition %s: %s (waiting for its leader)",
                self.topic,
                partition,
                error.name(),
                extra=REPEATED,
            )
            return
        raise self._failure(error)

    def _reached_end(
        self, consumer: Consumer, partition: int, eof_at: int | None, ends: dict[int, int], timeout: float
    ) -> bool:
        """Whether a partition-EOF event ends the partition's read.

        Normally it is the end captured at the start (read_committed: the last stable offset, the
        end offsets are asked for with the same isolation level). Below it, the partition's leader
        changed mid-read: a node just elected serves records only up to its own high watermark,
        which catches up with the old leader's a fetch round later (KIP-207), and the records in
        between (the latest commits and Empty transitions, the ones a plan turns on) would be
        missed. Then the end is asked again (the new leader answers once caught up) and the read
        goes on while records are still to come; an end that stays at the EOF (a log truncated
        by an unclean election) ends it there."""
        end = ends.get(partition)
        if end is None or eof_at is None or eof_at < 0 or eof_at >= end:
            return True
        deadline = RetryPolicy(timeout_s=timeout).start(time.monotonic())
        _, now_end = self._watermarks(consumer, partition, deadline)
        if now_end > eof_at:
            log.info(
                "%s partition %s: end of the log at %s below its end %s (a new leader catching up); "
                "reading on",
                self.topic,
                partition,
                eof_at,
                min(end, now_end),
            )
            return False
        log.warning(
            "%s partition %s: the log ends at %s, below the %s seen when the read started (truncated)",
            self.topic,
            partition,
            eof_at,
            end,
        )
        return True

    def ranges(self) -> dict[int, tuple[int, int]]:
        """Each partition's log start and end now, for the partitions with records: how a read
        from the log start would be shared out."""
        self._errors.clear()
        with self._translated():
            consumer = self._consumer()
            try:
                begins, ends = self._bounds(consumer, {}, self.settings.api_timeout_ms / 1000)
            finally:
                consumer.close()
        return {p: (begins[p], ends[p]) for p in begins}

    def _bounds(
        self,
        consumer: Consumer,
        start_positions: Mapping[int, int],
        timeout: float,
        only: Collection[int] | None = None,
    ) -> tuple[dict[int, int], dict[int, int]]:
        """Where each partition's read begins and ends (the end offset now); only partitions
        with something to read (of `only`, when given). Raises OffsetsLogGap when a position is
        below the log start."""
        begins: dict[int, int] = {}
        ends: dict[int, int] = {}
        deadline = RetryPolicy(timeout_s=timeout).start(time.monotonic())
        for partition in self._partitions(consumer, timeout):
            if only is not None and partition not in only:
                continue
            low, high = self._watermarks(consumer, partition, deadline)
            start = start_positions.get(partition)
            if start is not None and start < low:
                raise OffsetsLogGap(partition, start, low)
            begin = low if start is None else start
            if begin < high:
                begins[partition], ends[partition] = begin, high
        return begins, ends

    def _watermarks(self, consumer: Consumer, partition: int, deadline: RetryDeadline) -> tuple[int, int]:
        """The partition's log start and end, asked again through a leader change (the one retry
        policy, connectivity/retry.py) until the deadline."""
        while True:
            remaining = max(0.1, deadline.remaining(time.monotonic()))
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=remaining, cached=False
                )
                return int(low), int(high)
            except KafkaException as exc:
                error: CKError = exc.args[0]
                now = time.monotonic()
                delay = deadline.next_delay(now) if error.code() in _LEADER_CHANGE else None
                if delay is None:
                    raise self._failure(error) from None
                log.info(
                    "%s partition %s: %s; asking again", self.topic, partition, error.name(), extra=REPEATED
                )
                if self.on_retry is not None:
                    what = f"the end offsets of {self.topic} partition {partition}"
                    self.on_retry(
                        RetryNotice(what, error.name(), deadline.waited(now), deadline.remaining(now))
                    )
                if not pause(delay):
                    raise self._failure(error) from None

    def _partitions(self, consumer: Consumer, timeout: float) -> list[int]:
        deadline = time.monotonic() + timeout
        while True:
            # Short metadata attempts, so a failed authentication (only reported through
            # error_cb, which poll() serves) ends the wait at once instead of at the timeout.
            try:
                metadata = consumer.list_topics(self.topic, timeout=min(1.0, timeout))
                break
            except KafkaException as exc:
                consumer.poll(0)
                self._raise_client_errors()
                if time.monotonic() >= deadline or stopping():
                    raise self._failure(exc.args[0]) from None
        found = metadata.topics.get(self.topic)
        if found is None:
            raise OffsetsLogUnavailable(f"{self.topic} is not visible to this client")
        if found.error is not None:
            raise self._failure(found.error)
        if not found.partitions:
            raise OffsetsLogUnavailable(f"{self.topic} has no partitions visible to this client")
        return sorted(found.partitions)

    def _raise_client_errors(self) -> None:
        # librdkafka reports authentication failures only through error_cb; without this a read
        # would wait for its timeout. (_ALL_BROKERS_DOWN is not fatal: brokers may come back.)
        for error in self._errors:
            if error.code() in _AUTHENTICATION:
                raise self._failure(error)

    def _failure(self, error: CKError) -> Exception:
        code = error.code()
        text = self.settings.redact(f"{error.name()}: {error.str()}")
        if code in _AUTHORIZATION:
            return OffsetsLogUnavailable(f"not authorized to read {self.topic} ({text})")
        if code not in _AUTHENTICATION:
            # The call may fail with a timeout while error_cb holds the real cause.
            error = next((e for e in self._errors if e.code() in _AUTHENTICATION), error)
            code, text = error.code(), self.settings.redact(f"{error.name()}: {error.str()}")
        if code == CKError._SSL:
            return tls_failure(self.settings.describe(), text)
        if code in _AUTHENTICATION:
            text = explain_refused_token(self.settings, text)
            return KafkaAuthenticationFailed(f"authentication to {self.settings.describe()} failed: {text}")
        if code == CKError.UNKNOWN_TOPIC_OR_PART:
            return OffsetsLogUnavailable(f"{self.topic} does not exist or is hidden ({text})")
        return KafkaUnavailable(f"reading {self.topic} from {self.settings.describe()} failed: {text}")
