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

Scope: a ledger may keep only the groups a predicate accepts (the groups some policy selects).
Records of other groups are skipped after their key is read, before their value is decoded, so a
policy pays for the groups it selects, not for the whole log. Widening the scope replays the log
from its start in the same pass that catches up: below the old positions only the newly accepted
groups are applied (the others are already there), from them on every accepted group. The
widening ends on a partition with its first record at or past the old position, or when the
reader says its read reached the log's end (`finish_read`): a partition whose log did not grow
has no such record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import NamedTuple

from groupwarden.core.snapshot import CommittedOffset, SourcedTime, TopicPartition
from groupwarden.offsets_log._state import (
    UNDECODABLE_ENTRY,
    ClassicState,
    ConsumerState,
    Entry,
    ModernState,
    Partitions,
    ReplayedGroup,
    StoredEntry,
    get_partition,
    group_kind,
    intern,
    interned_topics,
    ledger_offset,
    new_partitions,
    pack_entry,
    partition_count,
    partition_items,
    pop_partition,
    put_partition,
    streams_topology,
    subscribed_topics_of,
    unpack_entry,
)
from groupwarden.offsets_log._wire import Buffer
from groupwarden.offsets_log.codec import (
    decode_key,
    decode_value,
    read_offset_commit_key,
    read_offset_commit_value,
)
from groupwarden.offsets_log.records import (
    MODERN_MEMBER_TYPES,
    MODERN_METADATA_TYPES,
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
    RecordKey,
    RecordType,
    RecordValue,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    Tombstone,
    UnknownRecord,
    UnknownRecordKey,
)
from groupwarden.offsets_log.views import LedgerConsumerMember, LedgerGroup, LedgerOffset, log_time

# (key, value, timestamp_ms, partition, offset) as a reader of __consumer_offsets sees a record.
LogRecord = tuple[Buffer | None, Buffer | None, int, int, int]


class OffsetsLogRecord(NamedTuple):
    """One raw record of __consumer_offsets (or `__share_group_state`), as the ledger consumes it
    (a tuple in the order of `OffsetsLedger.apply`'s arguments: cheap to make a million of, and
    `apply_many` takes it). Readers (adapters) produce it; the operator and the fleet audit read it."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    partition: int
    offset: int


# Which group ids a ledger keeps (None: every group).
GroupPredicate = Callable[[str], bool]
# Decisions of a scope predicate cached per group id; cleared past this many ids (bounded memory).
_SCOPE_CACHE_LIMIT = 500_000


class OffsetsLedger:
    """Latest state per key of `__consumer_offsets`, with counters and per-partition positions."""

    __slots__ = (
        "_added",
        "_added_cache",
        "_groups",
        "_rejected_raw",
        "_replay_below",
        "_scope",
        "_scope_cache",
        "_topic_id_index",
        "_topic_id_table",
        "_touched",
        "corrupt",
        "duplicates",
        "out_of_scope",
        "positions",
        "records",
        "tombstones",
        "unknown",
        "unknown_by_type",
    )

    def __init__(self, scope: GroupPredicate | None = None) -> None:
        self._scope = scope
        self._scope_cache: dict[str, bool] = {}
        # Raw group-name bytes of OffsetCommit keys the scope rejected (see `apply`).
        self._rejected_raw: set[bytes] = set()
        # While widening: per partition, the old position; below it only `_added` groups apply.
        self._replay_below: dict[int, int] = {}
        self._added: GroupPredicate | None = None
        self._added_cache: dict[str, bool] = {}
        self.out_of_scope = 0  # records skipped because no policy selects their group
        self._groups: dict[str, ReplayedGroup] = {}
        # Topic ids of OffsetCommit values (v4+), one shared object each; packed entries name
        # them by their index in the table (index 0: no topic id).
        self._topic_id_index: dict[bytes, int] = {}
        self._topic_id_table: list[bytes | None] = [None]
        self.positions: dict[int, int] = {}  # partition -> next offset to read
        self.records = 0  # records applied (replays excluded)
        self.tombstones = 0
        self.unknown = 0  # record types or value versions this codec does not decode
        self.unknown_by_type: Counter[int] = Counter()
        self.corrupt = 0  # undecodable keys or values
        self.duplicates = 0  # records below `positions`, skipped
        # Groups changed by the records applied since `take_touched` (None: not tracked yet).
        self._touched: set[str] | None = None

    # -- persistence -----------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, object]:
        """The state to persist (a CLI checkpoint): everything but the scope's predicates and
        caches, which are code: whoever loads it sets the scope again (`narrow_scope`)."""
        if self._replay_below:
            raise ValueError("a ledger in the middle of widening its scope cannot be saved")
        skipped = {
            "_scope",
            "_scope_cache",
            "_rejected_raw",
            "_added",
            "_added_cache",
            "_replay_below",
            "_touched",
        }
        return {name: getattr(self, name) for name in self.__slots__ if name not in skipped}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__()  # type: ignore[misc]
        for name, value in state.items():
            setattr(self, name, value)
        # One object per group and topic name again (a checkpoint is written without sharing).
        self._groups = {intern(group): state_ for group, state_ in self._groups.items()}
        for group_state in self._groups.values():
            if group_state.offsets:
                group_state.offsets = {intern(t): p for t, p in group_state.offsets.items()}

    # -- scope -----------------------------------------------------------------------------------

    @property
    def scoped(self) -> bool:
        return self._scope is not None

    def widen_scope(self, scope: GroupPredicate | None) -> None:
        """Keep the groups `scope` accepts (None: all) from now on, including groups the old scope
        skipped: the next read must start at the log start (`positions` is reset); below the old
        positions only the newly accepted groups are applied. Groups the new scope does not
        accept are dropped. The widening lasts until that read is finished (`finish_read`) or
        has passed every old position; meanwhile the ledger cannot be saved."""
        old = self._scope
        if old is None:
            self.narrow_scope(scope)
            return
        self._replay_below = {p: n for p, n in self.positions.items() if n > 0}
        self.positions = {}
        self._added = (lambda g: not old(g)) if scope is None else (lambda g: scope(g) and not old(g))
        self._added_cache = {}
        self._scope = scope
        self._scope_cache = {}
        self._rejected_raw = set()
        self._drop_out_of_scope()

    def finish_read(self, ends: Mapping[int, int] | None = None) -> None:
        """A read that started at `positions` is finished: every partition was read to the log's
        end as captured when the read started (`ends` None: a reader's bounded read iterated to
        its end), or partition `p` up to `ends[p]` (the next offset it would have read; an absent
        partition was not read). A widening of the scope ends on each partition read at or past
        its old position, whether or not records came from there on: a log that did not grow
        since, or whose tail is transaction markers or records compacted away, has none, and
        every record below was replayed (a log truncated below it has nothing left to replay).
        Once no partition is replaying, the ledger can be saved and out-of-scope commits are
        rejected on their raw bytes again. Without a widening, nothing changes."""
        replay_below = self._replay_below
        if not replay_below:
            return
        if ends is None:
            replay_below.clear()
        else:
            for partition, end in ends.items():
                below = replay_below.get(partition)
                if below is not None and end >= below:
                    del replay_below[partition]
        if not replay_below:
            self._end_replay()

    def _end_replay(self) -> None:
        """The widening is complete on every partition: its predicate and cache are not needed."""
        self._added = None
        self._added_cache = {}

    def narrow_scope(self, scope: GroupPredicate | None) -> None:
        """Keep only the groups `scope` accepts (it must accept no group the current scope skips)."""
        self._scope = scope
        self._scope_cache = {}
        self._rejected_raw = set()
        self._drop_out_of_scope()

    def _drop_out_of_scope(self) -> None:
        scope = self._scope
        if scope is not None:
            for group in [g for g in self._groups if not scope(g)]:
                del self._groups[group]

    def _in_scope(self, group: str, partition: int, offset: int) -> bool:
        replay_below = self._replay_below
        if replay_below:
            below = replay_below.get(partition)
            if below is not None:
                if offset < below:
                    return _cached(self._added_cache, self._added, group)
                del replay_below[partition]  # caught up with the old position
                if not replay_below:
                    self._end_replay()
        return _cached(self._scope_cache, self._scope, group)

    # -- applying --------------------------------------------------------------------------------

    def apply(
        self, key: Buffer | None, value: Buffer | None, timestamp_ms: int, partition: int, offset: int
    ) -> RecordKey | None:
        """Apply one record of `__consumer_offsets` partition `partition` at `offset`. Returns the
        key when it was decoded whole (every record type but OffsetCommit, whose fast path reads
        only its group, topic and partition), else None (a commit, a corrupt key, a replayed
        offset): a caller that needs the decoded key (`history.ReplayWithHistory`) does not decode
        it again."""
        positions = self.positions
        if offset < positions.get(partition, 0):
            self.duplicates += 1
            return None
        positions[partition] = offset + 1
        self.records += 1
        if value is None:
            self.tombstones += 1
        if key is None or len(key) < 2:
            self.corrupt += 1
            return None
        if key[0] != 0 or key[1] > 1:
            return self._apply_other(key, value, timestamp_ms, partition, offset)
        # Fast path: OffsetCommit (types 0 and 1), the bulk of the log. A group seen before and
        # out of scope is rejected on its raw bytes, before any decoding: a small policy on a big
        # cluster skips ~all of the log (a key with a bad topic then counts as out of scope, not
        # corrupt: it is never applied either way).
        rejected = self._rejected_raw
        if (
            rejected
            and len(key) > 4
            and not self._replay_below
            and key[4 : 4 + ((key[2] << 8) | key[3])] in rejected
        ):
            self.out_of_scope += 1
            return None
        try:
            group, topic, tp = read_offset_commit_key(key)
        except CorruptRecordError:
            self.corrupt += 1
            return None
        if self._replay_below:
            if not self._in_scope(group, partition, offset):
                self.out_of_scope += 1
                return None
        elif self._scope is not None:
            accepted = self._scope_cache.get(group)  # inlined `_in_scope`: once per record
            if accepted is None:
                accepted = _cached(self._scope_cache, self._scope, group)
            if not accepted:
                if len(rejected) >= _SCOPE_CACHE_LIMIT:
                    rejected.clear()
                rejected.add(bytes(key[4 : 4 + ((key[2] << 8) | key[3])]))
                self.out_of_scope += 1
                return None
        touched = self._touched
        if touched is not None:
            touched.add(group)
        state = self._groups.get(group)
        if value is None:
            if state is not None and state.offsets is not None:
                self._delete_offset(group, state, state.offsets, topic, tp)
            return None
        entry: Entry | None
        stored: StoredEntry
        try:
            entry = read_offset_commit_value(value)
        except CorruptRecordError:
            self.corrupt += 1
            entry = UNDECODABLE_ENTRY
        if entry is None:
            self._count_unknown(key[1])
            stored = UNDECODABLE_ENTRY
        elif entry[5] is None:
            stored = pack_entry(entry, 0)
        else:
            index = self._topic_id_index.get(entry[5])
            if index is None:
                index = self._topic_id_index[entry[5]] = len(self._topic_id_table)
                self._topic_id_table.append(entry[5])
            stored = pack_entry(entry, index)
            if stored is entry:  # kept as a tuple: with the table's (shared) bytes object
                stored = (*entry[:5], self._topic_id_table[index])
        if state is None:
            state = self._groups[intern(group)] = ReplayedGroup()
        offsets = state.offsets
        if offsets is None:
            offsets = state.offsets = {}
        partitions = offsets.get(topic)
        if partitions is None:
            offsets[intern(topic)] = new_partitions(tp, stored)
        elif type(partitions) is list and 0 <= tp < len(partitions):
            partitions[tp] = stored  # (the common case, inlined)
        else:
            offsets[topic] = put_partition(partitions, tp, stored)
        return None

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
        self, group: str, state: ReplayedGroup, offsets: dict[str, Partitions], topic: str, tp: int
    ) -> None:
        partitions = offsets.get(topic)
        if partitions is None or not pop_partition(partitions, tp) or partition_count(partitions):
            return
        del offsets[topic]
        if not offsets:
            state.offsets = None
            self._drop_if_gone(group, state)

    def _drop_if_gone(self, group: str, state: ReplayedGroup) -> None:
        if state.is_gone():
            self._groups.pop(group, None)

    def _apply_other(
        self, key: Buffer, value: Buffer | None, timestamp_ms: int, partition: int, offset: int
    ) -> RecordKey | None:
        """A record of any type but OffsetCommit; returns its decoded key (None: corrupt)."""
        try:
            decoded = decode_key(key)
        except CorruptRecordError:
            self.corrupt += 1
            return None
        self._apply_decoded(decoded, value, timestamp_ms, partition, offset)
        return decoded

    def _apply_decoded(
        self, decoded: RecordKey, value: Buffer | None, timestamp_ms: int, partition: int, offset: int
    ) -> None:
        group_of_key = getattr(decoded, "group", None)
        if (
            (self._scope is not None or self._replay_below)
            and isinstance(group_of_key, str)
            and not self._in_scope(group_of_key, partition, offset)
        ):
            self.out_of_scope += 1
            return
        if isinstance(group_of_key, str) and self._touched is not None:
            self._touched.add(group_of_key)
        if isinstance(decoded, UnknownRecordKey):
            self._count_unknown(decoded.record_type)
            self._apply_unknown(decoded, value, timestamp_ms)
            return
        if isinstance(decoded, OffsetCommitKey):  # unreachable: apply() takes the fast path
            return
        if isinstance(decoded, StreamsGroupTopologyKey):
            self._apply_topology(decoded, value)
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
            state = self._groups[intern(group)] = ReplayedGroup()
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
        state: ReplayedGroup,
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

    def _apply_topology(self, decoded: StreamsGroupTopologyKey, value: Buffer | None) -> None:
        """A streams group's topology (type 23): its source topics are its subscription, its
        repartition/changelog topics are named in plans; a tombstone removes it."""
        group = decoded.group
        state = self._groups.get(group)
        if value is None:
            if state is not None and state.modern is not None:
                state.modern.topology = None
                self._drop_modern_if_gone(state)
                self._drop_if_gone(group, state)
            return
        parsed: RecordValue | Tombstone | None
        try:
            parsed = decode_value(decoded, value)
        except CorruptRecordError:
            self.corrupt += 1
            parsed = None
        if isinstance(parsed, UnknownRecord):
            self._count_unknown(parsed.record_type)
        if state is None:
            state = self._groups[intern(group)] = ReplayedGroup()
        if state.modern is None:
            state.modern = ModernState()
        state.modern.topology = streams_topology(
            parsed if isinstance(parsed, StreamsGroupTopologyValue) else None
        )

    @staticmethod
    def _drop_modern_if_gone(state: ReplayedGroup) -> None:
        modern = state.modern
        if modern is not None and not (
            state.share or state.streams or modern.members or modern.topology is not None
        ):
            state.modern = None

    def _apply_unknown(self, decoded: UnknownRecordKey, value: Buffer | None, timestamp_ms: int) -> None:
        # Share/streams groups: their existence (metadata records) and members (member records,
        # whose tombstones say when the last one left); their other records are not needed.
        rtype = decoded.record_type
        group = decoded.group
        if group is None or rtype not in MODERN_METADATA_TYPES | MODERN_MEMBER_TYPES:
            return
        state = self._groups.get(group)
        if state is None:
            if value is None:
                return
            state = self._groups[intern(group)] = ReplayedGroup()
        modern = state.modern
        if modern is None:
            modern = state.modern = ModernState()
        if rtype in MODERN_METADATA_TYPES:
            live = value is not None
            if rtype == RecordType.SHARE_GROUP_METADATA:
                state.share = live
            else:
                state.streams = live
            modern.metadata_record_ms = timestamp_ms if live and timestamp_ms >= 0 else None
        elif decoded.member_id is not None:
            if value is not None:
                modern.members.add(decoded.member_id)
            elif decoded.member_id in modern.members:
                modern.members.discard(decoded.member_id)
                if not modern.members:
                    # A record without a timestamp stays -1: "unknown", never 1970 nor a fallback.
                    modern.last_member_left_ms = max(timestamp_ms, -1)
        self._drop_modern_if_gone(state)
        self._drop_if_gone(group, state)

    # -- changes ---------------------------------------------------------------------------------

    def take_touched(self) -> set[str] | None:
        """The groups that records applied since the previous call changed (any record of the
        group: offsets, metadata, members, tombstones), and starts a new set. None on the first
        call (nothing was tracked before it: treat every group as changed). Lets a caller that keeps
        facts derived from the ledger rebuild only what changed."""
        touched = self._touched
        self._touched = set()
        return touched

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
            partition_count(partitions)
            for state in self._groups.values()
            if state.offsets
            for partitions in state.offsets.values()
        )

    def offsets(self, group: str) -> dict[TopicPartition, LedgerOffset]:
        state = self._groups.get(group)
        if state is None or not state.offsets:
            return {}
        return {
            TopicPartition(topic, partition): ledger_offset(unpack_entry(stored, self._topic_id_table))
            for topic, partitions in state.offsets.items()
            for partition, stored in partition_items(partitions)
        }

    def offset(self, group: str, tp: TopicPartition) -> LedgerOffset | None:
        state = self._groups.get(group)
        stored = None
        if state is not None and state.offsets:
            partitions = state.offsets.get(tp.topic)
            stored = None if partitions is None else get_partition(partitions, tp.partition)
        return None if stored is None else ledger_offset(unpack_entry(stored, self._topic_id_table))

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
        protocol_type: str | None = ""
        if classic is not None:
            protocol_type = classic.protocol_type
        elif consumer is not None:
            protocol_type = "consumer"
        return LedgerGroup(
            group_id=group,
            kind=group_kind(state),
            protocol_type=protocol_type,
            generation=None if classic is None else classic.generation,
            protocol=None if classic is None else classic.protocol,
            current_state_timestamp_ms=None if classic is None else classic.current_state_timestamp_ms,
            group_epoch=None if consumer is None else consumer.epoch,
            classic_members=() if classic is None else classic.members,
            consumer_members={} if consumer is None else dict(consumer.members),
            regex_topics={} if consumer is None else dict(consumer.regexes),
            empty_since_ms=_empty_since_ms(state),
            subscribed_topics=subscribed_topics_of(state),
            offset_count=sum(partition_count(p) for p in state.offsets.values()) if state.offsets else 0,
            modern_member_count=0 if state.modern is None else len(state.modern.members),
            streams_topology=None if state.modern is None else state.modern.topology,
        )

    def membership(self, group: str) -> tuple[int, int | None] | None:
        """(members, Empty-since ms or None) as the log says; None when the log has no such group.
        The cheap form of `group()` for a gather over many groups."""
        state = self._groups.get(group)
        if state is None:
            return None
        classic = state.classic
        consumer = state.consumer
        modern = state.modern
        members = (
            (0 if classic is None else len(classic.members))
            + (0 if consumer is None else len(consumer.members))
            + (0 if modern is None else len(modern.members))
        )
        return members, _empty_since_ms(state)

    def offset_entries(self, group: str) -> list[tuple[str, int, Entry]]:
        """The group's live offsets as raw entries (topic, partition, entry), unsorted; see
        `_state.Entry`. The cheap form of `offsets()` for a gather over many groups."""
        state = self._groups.get(group)
        if state is None or not state.offsets:
            return []
        table = self._topic_id_table
        return [
            (topic, partition, unpack_entry(stored, table))
            for topic, partitions in state.offsets.items()
            for partition, stored in partition_items(partitions)
        ]


def _empty_since_ms(state: ReplayedGroup) -> int | None:
    modern = state.modern
    if modern is not None and (state.share or state.streams):
        if modern.members:
            return None
        empty_since = modern.last_member_left_ms
        if empty_since is None:
            # The member tombstones were compacted away (or never seen): the metadata record
            # written with the last removal (an epoch bump) is never older than it.
            return modern.metadata_record_ms
        return None if empty_since == -1 else empty_since
    classic = state.classic
    if classic is not None:
        if classic.protocol_type is not None and not classic.members:
            return classic.current_state_timestamp_ms
        return None
    consumer = state.consumer
    if consumer is None or consumer.members:
        return None
    empty_since = consumer.last_member_left_ms
    if empty_since is None and consumer.has_metadata:
        # The member tombstones were compacted away: the epoch bump written with the last removal
        # is never older than it.
        return consumer.epoch_record_ms
    return None if empty_since == -1 else empty_since


def _cached(cache: dict[str, bool], predicate: GroupPredicate | None, group: str) -> bool:
    if predicate is None:
        return True
    found = cache.get(group)
    if found is None:
        if len(cache) >= _SCOPE_CACHE_LIMIT:
            cache.clear()
        found = cache[group] = predicate(group)
    return found
