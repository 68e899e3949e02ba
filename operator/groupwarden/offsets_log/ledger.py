"""`OffsetsLedger`: the state of `__consumer_offsets`, rebuilt by applying its records in log order.

Compaction semantics, as the group coordinator replays the log: the latest record per key wins, a
tombstone deletes its key, every committed offset is an independent key, a GroupMetadata
tombstone deletes a classic group and a ConsumerGroupMetadata tombstone a KIP-848 group.

A group lives in exactly one `__consumer_offsets` partition, so per-partition log order is all
the ordering the ledger needs. `positions` holds the next offset to read per partition: a reader
resumes from there, and records below it (a replay) are skipped, so applying is idempotent.

The reader must consume with `isolation.level=read_committed`: transactional offset commits only
count once their transaction commits, and aborted ones must never be applied.

Memory: state is kept in slotted objects and tuples, group and topic names are interned, and the
bytes of classic member subscriptions/assignments are dropped once their topics are decoded.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from groupwarden.core.snapshot import CommittedOffset, SourcedTime, TopicPartition
from groupwarden.offsets_log._state import (
    UNDECODABLE_ENTRY,
    ClassicState,
    ConsumerState,
    Entry,
    GroupState,
    group_kind,
    intern,
    interned_topics,
    ledger_offset,
    subscribed_topics_of,
)
from groupwarden.offsets_log._wire import Buffer
from groupwarden.offsets_log.codec import (
    decode_key,
    decode_value,
    read_offset_commit_key,
    read_offset_commit_value,
)
from groupwarden.offsets_log.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    RecordType,
    RecordValue,
    Tombstone,
    UnknownRecord,
    UnknownRecordKey,
)
from groupwarden.offsets_log.views import LedgerConsumerMember, LedgerGroup, LedgerOffset, log_time

# (key, value, timestamp_ms, partition, offset) as a reader of __consumer_offsets sees a record.
LogRecord = tuple[Buffer | None, Buffer | None, int, int, int]


class OffsetsLedger:
    """Latest state per key of `__consumer_offsets`, with counters and per-partition positions."""

    __slots__ = (
        "_groups",
        "_topic_ids",
        "corrupt",
        "duplicates",
        "positions",
        "records",
        "tombstones",
        "unknown",
        "unknown_by_type",
    )

    def __init__(self) -> None:
        self._groups: dict[str, GroupState] = {}
        self._topic_ids: dict[bytes, bytes] = {}  # one shared object per topic id
        self.positions: dict[int, int] = {}  # partition -> next offset to read
        self.records = 0  # records applied (replays excluded)
        self.tombstones = 0
        self.unknown = 0  # record types or value versions this codec does not decode
        self.unknown_by_type: Counter[int] = Counter()
        self.corrupt = 0  # undecodable keys or values
        self.duplicates = 0  # records below `positions`, skipped

    # -- applying --------------------------------------------------------------------------------

    def apply(
        self, key: Buffer | None, value: Buffer | None, timestamp_ms: int, partition: int, offset: int
    ) -> None:
        """Apply one record of `__consumer_offsets` partition `partition` at `offset`."""
        positions = self.positions
        if offset < positions.get(partition, 0):
            self.duplicates += 1
            return
        positions[partition] = offset + 1
        self.records += 1
        if value is None:
            self.tombstones += 1
        if key is None or len(key) < 2:
            self.corrupt += 1
            return
        if key[0] != 0 or key[1] > 1:
            self._apply_other(key, value, timestamp_ms)
            return
        # Fast path: OffsetCommit (types 0 and 1), the bulk of the log.
        try:
            group, topic, tp = read_offset_commit_key(key)
        except CorruptRecordError:
            self.corrupt += 1
            return
        state = self._groups.get(group)
        if value is None:
            if state is not None and state.offsets is not None:
                self._delete_offset(group, state, state.offsets, topic, tp)
            return
        entry: Entry | None
        try:
            entry = read_offset_commit_value(value)
        except CorruptRecordError:
            self.corrupt += 1
            entry = UNDECODABLE_ENTRY
        if entry is None:
            self._count_unknown(key[1])
            entry = UNDECODABLE_ENTRY
        elif entry[5] is not None:
            entry = (*entry[:5], self._topic_ids.setdefault(entry[5], entry[5]))
        if state is None:
            state = self._groups[intern(group)] = GroupState()
        offsets = state.offsets
        if offsets is None:
            offsets = state.offsets = {}
        partitions = offsets.get(topic)
        if partitions is None:
            partitions = offsets[intern(topic)] = {}
        partitions[tp] = entry

    def apply_many(self, records: Iterable[LogRecord]) -> int:
        """Apply records in log order; returns how many were given."""
        apply = self.apply
        count = 0
        for key, value, timestamp_ms, partition, offset in records:
            apply(key, value, timestamp_ms, partition, offset)
            count += 1
        return count

    def _count_unknown(self, rtype: int) -> None:
        self.unknown += 1
        self.unknown_by_type[rtype] += 1

    def _delete_offset(
        self, group: str, state: GroupState, offsets: dict[str, dict[int, Entry]], topic: str, tp: int
    ) -> None:
        partitions = offsets.get(topic)
        if partitions is None or partitions.pop(tp, None) is None or partitions:
            return
        del offsets[topic]
        if not offsets:
            state.offsets = None
            self._drop_if_gone(group, state)

    def _drop_if_gone(self, group: str, state: GroupState) -> None:
        if state.is_gone():
            self._groups.pop(group, None)

    def _apply_other(self, key: Buffer, value: Buffer | None, timestamp_ms: int) -> None:
        try:
            decoded = decode_key(key)
        except CorruptRecordError:
            self.corrupt += 1
            return
        if isinstance(decoded, UnknownRecordKey):
            self._count_unknown(decoded.record_type)
            self._apply_unknown(decoded, value)
            return
        if isinstance(decoded, OffsetCommitKey):  # unreachable: apply() takes the fast path
            return
        group = decoded.group
        state = self._groups.get(group)
        if value is None:
            if state is not None:
                self._apply_tombstone(decoded, group, state, timestamp_ms)
            return
        parsed: RecordValue | Tombstone | None
        try:
            parsed = decode_value(decoded, value)
        except CorruptRecordError:
            self.corrupt += 1
            parsed = None
        if isinstance(parsed, UnknownRecord):
            self._count_unknown(parsed.record_type)
            parsed = None
        if state is None:
            state = self._groups[intern(group)] = GroupState()
        if isinstance(decoded, GroupMetadataKey):
            state.classic = ClassicState(parsed if isinstance(parsed, GroupMetadataValue) else None)
            return
        consumer = state.consumer
        if consumer is None:
            consumer = state.consumer = ConsumerState()
        if isinstance(decoded, ConsumerGroupMetadataKey):
            consumer.has_metadata = True
            consumer.epoch = parsed.epoch if isinstance(parsed, ConsumerGroupMetadataValue) else None
            consumer.epoch_record_ms = timestamp_ms if timestamp_ms >= 0 else None
        elif isinstance(decoded, ConsumerGroupMemberMetadataKey):
            member_id = decoded.member_id
            if isinstance(parsed, ConsumerGroupMemberMetadataValue):
                member = LedgerConsumerMember(
                    member_id, interned_topics(parsed.subscribed_topic_names), parsed.subscribed_topic_regex
                )
            else:
                member = LedgerConsumerMember(member_id, None, None)
            consumer.members[member_id] = member
            consumer.last_member_left_ms = None
        elif isinstance(decoded, ConsumerGroupRegularExpressionKey):
            resolved = parsed.topics if isinstance(parsed, ConsumerGroupRegularExpressionValue) else None
            consumer.regexes[decoded.regex] = None if resolved is None else interned_topics(resolved)

    def _apply_tombstone(
        self,
        decoded: GroupMetadataKey
        | ConsumerGroupMetadataKey
        | ConsumerGroupMemberMetadataKey
        | ConsumerGroupRegularExpressionKey,
        group: str,
        state: GroupState,
        timestamp_ms: int,
    ) -> None:
        if isinstance(decoded, GroupMetadataKey):
            state.classic = None
        elif state.consumer is not None:
            consumer = state.consumer
            if isinstance(decoded, ConsumerGroupMetadataKey):
                consumer.has_metadata = False
                consumer.epoch = consumer.epoch_record_ms = None
            elif isinstance(decoded, ConsumerGroupMemberMetadataKey):
                if consumer.members.pop(decoded.member_id, None) is not None and not consumer.members:
                    # A record without a timestamp stays -1: "unknown", never 1970 nor a fallback.
                    consumer.last_member_left_ms = max(timestamp_ms, -1)
            else:
                consumer.regexes.pop(decoded.regex, None)
            if consumer.is_gone():
                state.consumer = None
        self._drop_if_gone(group, state)

    def _apply_unknown(self, decoded: UnknownRecordKey, value: Buffer | None) -> None:
        # Only share/streams group existence matters: such groups are out of scope, never touched.
        rtype = decoded.record_type
        group = decoded.group
        if group is None or rtype not in (RecordType.SHARE_GROUP_METADATA, RecordType.STREAMS_GROUP_METADATA):
            return
        state = self._groups.get(group)
        if state is None:
            if value is None:
                return
            state = self._groups[intern(group)] = GroupState()
        if rtype == RecordType.SHARE_GROUP_METADATA:
            state.share = value is not None
        else:
            state.streams = value is not None
        self._drop_if_gone(group, state)

    # -- queries ---------------------------------------------------------------------------------

    @property
    def group_count(self) -> int:
        # Not __len__: an empty ledger must not be falsy.
        return len(self._groups)

    def __contains__(self, group: object) -> bool:
        return group in self._groups

    def groups(self) -> Iterator[str]:
        """Ids of the groups with any live record (a snapshot: safe to apply while iterating)."""
        return iter(list(self._groups))

    @property
    def offset_count(self) -> int:
        """Live committed offsets over all groups."""
        return sum(
            len(partitions)
            for state in self._groups.values()
            if state.offsets
            for partitions in state.offsets.values()
        )

    def offsets(self, group: str) -> dict[TopicPartition, LedgerOffset]:
        state = self._groups.get(group)
        if state is None or not state.offsets:
            return {}
        return {
            TopicPartition(topic, partition): ledger_offset(entry)
            for topic, partitions in state.offsets.items()
            for partition, entry in partitions.items()
        }

    def offset(self, group: str, tp: TopicPartition) -> LedgerOffset | None:
        state = self._groups.get(group)
        entry = None
        if state is not None and state.offsets:
            entry = state.offsets.get(tp.topic, {}).get(tp.partition)
        return None if entry is None else ledger_offset(entry)

    def commit_time(self, group: str, tp: TopicPartition) -> SourcedTime | None:
        """The exact last commit time of one partition (None when unknown)."""
        found = self.offset(group, tp)
        if found is None or found.commit_time_ms is None:
            return None
        return log_time(found.commit_time_ms)

    def committed_offsets(self, group: str) -> tuple[CommittedOffset, ...]:
        """The group's offsets as the shared snapshot type, sorted by partition."""
        out = []
        for tp, lo in sorted(self.offsets(group).items()):
            committed_at = None if lo.commit_time_ms is None else log_time(lo.commit_time_ms)
            expire_at = None if lo.expire_time_ms is None else log_time(lo.expire_time_ms).at
            out.append(CommittedOffset(tp, lo.offset, committed_at, expire_at, lo.leader_epoch, lo.metadata))
        return tuple(out)

    def empty_since(self, group: str) -> SourcedTime | None:
        found = self.group(group)
        return None if found is None else found.empty_since

    def subscribed_topics(self, group: str) -> frozenset[str] | None:
        """Union of the members' subscriptions; None when any of it is unknown (or no group)."""
        state = self._groups.get(group)
        return None if state is None else subscribed_topics_of(state)

    def group(self, group: str) -> LedgerGroup | None:
        state = self._groups.get(group)
        if state is None:
            return None
        classic = state.classic
        consumer = state.consumer
        kind = group_kind(state)
        empty_since: int | None = None
        protocol_type: str | None = ""
        if classic is not None:
            protocol_type = classic.protocol_type
            if protocol_type is not None and not classic.members:
                empty_since = classic.current_state_timestamp_ms
        elif consumer is not None:
            protocol_type = "consumer"
            if not consumer.members:
                empty_since = consumer.last_member_left_ms
                if empty_since is None and consumer.has_metadata:
                    # The member tombstones were compacted away: the epoch bump written with
                    # the last removal is never older than it.
                    empty_since = consumer.epoch_record_ms
                elif empty_since == -1:
                    empty_since = None
        return LedgerGroup(
            group_id=group,
            kind=kind,
            protocol_type=protocol_type,
            generation=None if classic is None else classic.generation,
            protocol=None if classic is None else classic.protocol,
            current_state_timestamp_ms=None if classic is None else classic.current_state_timestamp_ms,
            group_epoch=None if consumer is None else consumer.epoch,
            classic_members=() if classic is None else classic.members,
            consumer_members={} if consumer is None else dict(consumer.members),
            regex_topics={} if consumer is None else dict(consumer.regexes),
            empty_since_ms=empty_since,
            subscribed_topics=subscribed_topics_of(state),
            offset_count=sum(len(p) for p in state.offsets.values()) if state.offsets else 0,
        )
