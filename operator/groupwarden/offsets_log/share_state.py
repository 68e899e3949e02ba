"""`__share_group_state` (KIP-932): the share coordinator's log of share-partition state, decoded so
that a share group's start offsets are dated by the broker's own time instead of first observation.

Schemas (the share-coordinator jar of Kafka 4.3.1, `common/message/Share*.json`):
- keys (never flexible): type 0 `ShareSnapshotKey`, type 1 `ShareUpdateKey`, both GroupId string,
  TopicId uuid, Partition int32;
- `ShareSnapshotValue` v0 (flexible): SnapshotEpoch int32, StateEpoch int32, LeaderEpoch int32,
  StartOffset int64, DeliveryCompleteCount (tag 0, int32, default -1), CreateTimestamp int64,
  WriteTimestamp int64, StateBatches[FirstOffset int64, LastOffset int64, DeliveryState int8,
  DeliveryCount int16]: the whole state of one share-partition;
- `ShareUpdateValue` v0 (flexible): SnapshotEpoch, LeaderEpoch, StartOffset (-1: not updated),
  DeliveryCompleteCount (tag 0), StateBatches: a change on top of the latest snapshot. It carries
  no timestamp of its own: the record's timestamp (written by the share coordinator) dates it.

`ShareStateLedger` keeps, per (group, topic id, partition), the current start offset and the time
it last changed as far as the readable log shows: a record that sets a different start offset
dates the change (a snapshot by its WriteTimestamp, an update by its record time); a record that
repeats the start offset (periodic snapshots, acknowledgements that do not move it) changes
nothing. The first record seen of a share-partition dates its start offset by itself: the change
happened at or before it, so the time is never earlier than the truth (the topic is pruned up to
the latest snapshots, so older history is gone). A snapshot key's tombstone (the state deleted)
removes the share-partition.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from groupwarden.core.snapshot import TopicPartition
from groupwarden.offsets_log._wire import Buffer, Reader
from groupwarden.offsets_log.codec import record_type, value_version
from groupwarden.offsets_log.ledger import LogRecord
from groupwarden.offsets_log.records import TOMBSTONE, CorruptRecordError, Tombstone, UnknownRecord

SHARE_STATE_TOPIC: Final = "__share_group_state"
SHARE_SNAPSHOT: Final = 0
SHARE_UPDATE: Final = 1
SHARE_STATE_VALUE_VERSIONS: Final = range(0, 1)  # v0, flexible (Kafka 4.1-4.3.1)
_DECODE_ERRORS: Final = (struct.error, UnicodeDecodeError, IndexError)


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """Types 0 (snapshot) and 1 (update): one share-partition of one share group."""

    record_type: int
    group: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class UnknownShareStateKey:
    """A key type this codec does not decode (a newer broker's)."""

    record_type: int


@dataclass(frozen=True, slots=True)
class ShareStateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int  # 0 Available, 2 Acknowledged, 4 Archived
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[ShareStateBatch, ...] = ()
    delivery_complete_count: int = -1  # tagged field 0
    version: int = 0


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int  # -1: this update does not move the start offset
    state_batches: tuple[ShareStateBatch, ...] = ()
    delivery_complete_count: int = -1  # tagged field 0
    version: int = 0


ShareStateValue = ShareSnapshotValue | ShareUpdateValue | UnknownRecord | Tombstone


def decode_share_state_key(key: Buffer) -> ShareStateKey | UnknownShareStateKey:
    rtype = record_type(key)
    if rtype not in (SHARE_SNAPSHOT, SHARE_UPDATE):
        return UnknownShareStateKey(rtype)
    reader = Reader(key, 2)
    try:
        group = reader.string()
        topic_id = reader.uuid()
        partition = reader.int32()
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"bad share state key: {exc}") from exc
    return ShareStateKey(rtype, group, topic_id, partition)


def decode_share_state_value(key: ShareStateKey, value: Buffer | None) -> ShareStateValue:
    """The value of a type 0/1 record (None: a tombstone). Bad bytes raise CorruptRecordError."""
    if value is None:
        return TOMBSTONE
    version = value_version(value)
    if version not in SHARE_STATE_VALUE_VERSIONS:
        return UnknownRecord(key.record_type, version)
    r = Reader(value, 2)
    try:
        if key.record_type == SHARE_SNAPSHOT:
            snapshot_epoch, state_epoch, leader_epoch = r.int32(), r.int32(), r.int32()
            start_offset = r.int64()
            create_ms, write_ms = r.int64(), r.int64()
            batches = _batches(r)
            complete = _delivery_complete_count(r)
            return ShareSnapshotValue(
                snapshot_epoch,
                state_epoch,
                leader_epoch,
                start_offset,
                create_ms,
                write_ms,
                batches,
                complete,
            )
        snapshot_epoch, leader_epoch = r.int32(), r.int32()
        start_offset = r.int64()
        batches = _batches(r)
        complete = _delivery_complete_count(r)
        return ShareUpdateValue(snapshot_epoch, leader_epoch, start_offset, batches, complete)
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"bad share state value: {exc}") from exc


def _batches(r: Reader) -> tuple[ShareStateBatch, ...]:
    batches = []
    for _ in range(r.compact_array_len()):
        batch = ShareStateBatch(r.int64(), r.int64(), r.int8(), r.int16())
        r.skip_tagged_fields()
        batches.append(batch)
    return tuple(batches)


def _delivery_complete_count(r: Reader) -> int:
    field = r.tagged_fields().get(0)
    if field is None:
        return -1
    if field.remaining() != 4:
        raise CorruptRecordError("tagged DeliveryCompleteCount is not 4 bytes")
    return field.int32()


# (group, topic id bytes, partition) -> (start offset, log time of its last change in ms)
_PartitionKey = tuple[str, bytes, int]


class ShareStateLedger:
    """Per share-partition: the start offset and when it last changed (see the module docstring)."""

    __slots__ = ("_partitions", "corrupt", "duplicates", "positions", "records", "unknown")

    def __init__(self) -> None:
        self._partitions: dict[_PartitionKey, tuple[int, int]] = {}
        self.positions: dict[int, int] = {}  # partition of the topic -> next offset to read
        self.records = 0
        self.corrupt = 0
        self.unknown = 0
        self.duplicates = 0

    def apply(
        self, key: Buffer | None, value: Buffer | None, timestamp_ms: int, partition: int, offset: int
    ) -> None:
        if offset < self.positions.get(partition, 0):
            self.duplicates += 1
            return
        self.positions[partition] = offset + 1
        self.records += 1
        if key is None:
            self.corrupt += 1
            return
        try:
            decoded = decode_share_state_key(key)
            if isinstance(decoded, UnknownShareStateKey):
                self.unknown += 1
                return
            parsed = decode_share_state_value(decoded, value)
        except CorruptRecordError:
            self.corrupt += 1
            return
        where = (decoded.group, decoded.topic_id.bytes, decoded.partition)
        if isinstance(parsed, Tombstone):
            if decoded.record_type == SHARE_SNAPSHOT:
                self._partitions.pop(where, None)
            return
        if isinstance(parsed, UnknownRecord):
            self.unknown += 1
            return
        if isinstance(parsed, ShareSnapshotValue):
            start = parsed.start_offset
            at = parsed.write_timestamp_ms if parsed.write_timestamp_ms >= 0 else timestamp_ms
        else:
            start = parsed.start_offset
            if start < 0:  # the update leaves the start offset where it is
                return
            at = timestamp_ms
        known = self._partitions.get(where)
        if known is None or known[0] != start:
            self._partitions[where] = (start, at)

    def apply_many(self, records: Iterable[LogRecord]) -> None:
        apply = self.apply
        for key, value, timestamp_ms, partition, offset in records:
            apply(key, value, timestamp_ms, partition, offset)

    def start_offset(self, group: str, topic_id: uuid.UUID, partition: int) -> tuple[int, int] | None:
        """(start offset, log time in ms of its last change) of one share-partition, or None."""
        return self._partitions.get((group, topic_id.bytes, partition))

    def entries(self) -> Iterator[tuple[str, uuid.UUID, int, int, int]]:
        """(group, topic id, partition, start offset, changed ms) of every share-partition."""
        for (group, topic_id, partition), (start, changed_ms) in self._partitions.items():
            yield group, uuid.UUID(bytes=topic_id), partition, start, changed_ms

    @property
    def partition_count(self) -> int:
        # Not __len__: an empty ledger must not be falsy.
        return len(self._partitions)


@dataclass(frozen=True, slots=True)
class ShareStart:
    """One share-partition's start offset and the log time (ms) it last changed."""

    partition: TopicPartition
    start_offset: int
    changed_ms: int


# Per share group: its share-partitions, or None when one of its topics has no known name (its
# state cannot be matched to topics, so it is dated by first observation instead).
ShareStarts = Mapping[str, tuple[ShareStart, ...] | None]


def share_starts(
    ledger: ShareStateLedger, topic_names: Mapping[uuid.UUID, str]
) -> dict[str, tuple[ShareStart, ...] | None]:
    """The ledger's share-partitions per group, named. Partitions whose state was never initialised
    (start offset -1) are left out, as DescribeShareGroupOffsets leaves them out."""
    found: dict[str, list[ShareStart] | None] = {}
    for group, topic_id, partition, start, changed_ms in ledger.entries():
        starts = found.setdefault(group, [])
        if starts is None or start < 0:
            continue
        name = topic_names.get(topic_id)
        if name is None:
            found[group] = None
            continue
        starts.append(ShareStart(TopicPartition(name, partition), start, changed_ms))
    return {
        group: None if starts is None else tuple(sorted(starts, key=lambda s: s.partition))
        for group, starts in found.items()
    }
