"""The offsets-log reader across a leader change mid-read, with a scripted librdkafka consumer.

A node just elected leader serves records only up to its own high watermark, which catches up with
the old leader's one fetch round later (KIP-207); until then it reports the end of the partition
below the end captured when the read started, and answers ListOffsets with OFFSET_NOT_AVAILABLE.
The read must go on to the captured end (those last records are the latest commits and Empty
transitions a plan turns on), and still end when the log really is shorter (a truncation).
The real thing: tests/integration/test_failover_cluster.py kills the leader mid-read."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
from confluent_kafka import KafkaError as CKError
from confluent_kafka import KafkaException, TopicPartition

from groupwarden.adapters import offsets_log_reader
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.gateway import KafkaUnavailable
from groupwarden.connectivity.retry import RetryNotice
from groupwarden.connectivity.settings import settings_from_properties


@dataclass
class Event:
    """A consumed message or event, as confluent-kafka hands it out."""

    part: int
    at: int
    err: CKError | None = None

    def error(self) -> CKError | None:
        return self.err

    def partition(self) -> int:
        return self.part

    def offset(self) -> int:
        return self.at

    def key(self) -> bytes:
        return b"k%d" % self.at

    def value(self) -> bytes:
        return b"v%d" % self.at

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_000 + self.at)


def records(partition: int, first: int, end: int) -> list[Event]:
    return [Event(partition, o) for o in range(first, end)]


def eof(partition: int, at: int) -> Event:
    return Event(partition, at, CKError(CKError._PARTITION_EOF))


@dataclass
class ScriptedConsumer:
    """`consume` hands out the scripted batches in order, then nothing; `get_watermark_offsets`
    answers the scripted ends in order (an error is raised), the last one from then on."""

    batches: list[list[Event]]
    watermarks: list[tuple[int, int] | CKError] = field(default_factory=list)
    assigned: list[TopicPartition] = field(default_factory=list)
    asked: int = 0
    closed: bool = False

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions

    def consume(self, num_messages: int, timeout: float) -> list[Event]:
        return self.batches.pop(0) if self.batches else []

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float, cached: bool
    ) -> tuple[int, int]:
        self.asked += 1
        answer = self.watermarks.pop(0) if len(self.watermarks) > 1 else self.watermarks[0]
        if isinstance(answer, CKError):
            raise KafkaException(answer)
        return answer

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def reader() -> OffsetsLogReader:
    # Real pauses: the retry policy's first backoff is 0.1 s.
    return OffsetsLogReader(settings_from_properties({"bootstrap.servers": "h:1"}))


def read_all(
    reader: OffsetsLogReader, consumer: ScriptedConsumer, ends: dict[int, int], timeout: float = 5
) -> list[tuple[int, int]]:
    begins = dict.fromkeys(ends, 0)
    got = reader._records(consumer, begins, dict(ends), timeout)  # type: ignore[arg-type]
    return [(r.partition, r.offset) for r in got]


def test_an_eof_below_the_captured_end_after_a_leader_change_reads_on(reader: OffsetsLogReader) -> None:
    notices: list[RetryNotice] = []
    reader.on_retry = notices.append
    consumer = ScriptedConsumer(
        batches=[records(0, 0, 7), [eof(0, 7)], [], records(0, 7, 10), [eof(0, 10)]],
        # The new leader: not caught up at first, then the end the old leader had.
        watermarks=[CKError(CKError.OFFSET_NOT_AVAILABLE), (0, 10)],
    )
    assert read_all(reader, consumer, {0: 10}) == [(0, o) for o in range(10)]
    assert consumer.asked == 2 and consumer.closed
    assert [n.error for n in notices] == ["OFFSET_NOT_AVAILABLE"]


def test_an_eof_at_the_captured_end_ends_the_partition_without_asking(reader: OffsetsLogReader) -> None:
    # Partition 0's last offset is a transaction marker (never delivered): its EOF at the captured
    # end (the last stable offset) ends it; partition 1 ends on its last record.
    consumer = ScriptedConsumer(batches=[records(0, 0, 3), records(1, 0, 2), [eof(0, 4)]])
    assert read_all(reader, consumer, {0: 4, 1: 2}) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    assert consumer.asked == 0


def test_a_log_shorter_than_captured_ends_at_its_eof(
    reader: OffsetsLogReader, caplog: pytest.LogCaptureFixture
) -> None:
    consumer = ScriptedConsumer(batches=[records(0, 0, 7), [eof(0, 7)]], watermarks=[(0, 7)])
    with caplog.at_level(logging.WARNING, logger=offsets_log_reader.__name__):
        assert read_all(reader, consumer, {0: 10}) == [(0, o) for o in range(7)]
    assert consumer.asked == 1
    assert "below the 10 seen when the read started (truncated)" in caplog.text


def test_a_new_leader_that_never_catches_up_fails_the_read_at_the_timeout(reader: OffsetsLogReader) -> None:

    consumer = ScriptedConsumer(
        batches=[records(0, 0, 2), [eof(0, 2)]],
        watermarks=[CKError(CKError.OFFSET_NOT_AVAILABLE)],
    )
    with pytest.raises(KafkaUnavailable, match="OFFSET_NOT_AVAILABLE"):
        read_all(reader, consumer, {0: 5}, timeout=0.3)
    assert consumer.closed
