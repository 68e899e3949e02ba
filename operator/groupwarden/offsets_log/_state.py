"""The ledger's compact per-group state and the views built from it (internal)."""

from __future__ import annotations

import functools
import sys
import uuid
from collections.abc import Iterable

from groupwarden.core.snapshot import GroupKind
from groupwarden.offsets_log.codec import parse_consumer_protocol_subscription
from groupwarden.offsets_log.records import GroupMetadataValue, StreamsGroupTopologyValue
from groupwarden.offsets_log.views import (
    UNDECODABLE_TOPOLOGY,
    LedgerClassicMember,
    LedgerConsumerMember,
    LedgerOffset,
    LedgerStreamsTopology,
)

# Offset entry: the codec's fields, raw (-1 = absent), with one shared bytes object per topic id:
# (offset, leader_epoch, metadata, commit_ms | None, expire_ms, topic_id bytes | None);
# commit_ms None = the latest record for this offset was undecodable.
Entry = tuple[int, int, str, int | None, int, bytes | None]
UNDECODABLE_ENTRY: Entry = (-1, -1, "", None, -1, None)

# How the ledger stores an entry. Nearly every record of a real log is a plain commit (no metadata,
# no explicit expiry, a known commit time): such an entry is packed into one int (~40 B instead of
# a 6-tuple and its two ints, ~150 B: 60 MB per 600k live offsets). Bits, low to high: commit_ms
# (44: until year 2527), leader_epoch + 1 (32), the topic id's index in the ledger's table of topic
# ids (24; 0 = no topic id), then the offset (>= 0). Anything else stays a tuple.
StoredEntry = Entry | int
_COMMIT_BITS = 44
_EPOCH_SHIFT = _COMMIT_BITS
_TOPIC_ID_SHIFT = _EPOCH_SHIFT + 32
_OFFSET_SHIFT = _TOPIC_ID_SHIFT + 24
_COMMIT_MASK = (1 << _COMMIT_BITS) - 1
_EPOCH_MASK = (1 << 32) - 1
TOPIC_ID_LIMIT = 1 << 24  # topic ids a ledger can index (more: entries stay tuples)
_TOPIC_ID_MASK = TOPIC_ID_LIMIT - 1


def pack_entry(entry: Entry, topic_id_index: int) -> StoredEntry:
    """`entry` as stored: one int when it is a plain commit (`topic_id_index`: its topic id's
    index, 0 for none), else the tuple itself."""
    offset, leader_epoch, metadata, commit_ms, expire_ms, _topic_id = entry
    if (
        commit_ms is not None
        and 0 <= commit_ms <= _COMMIT_MASK
        and offset >= 0
        and -1 <= leader_epoch < _EPOCH_MASK
        and expire_ms == -1
        and not metadata
        and 0 <= topic_id_index < TOPIC_ID_LIMIT
    ):
        return (
            (offset << _OFFSET_SHIFT)
            | (topic_id_index << _TOPIC_ID_SHIFT)
            | ((leader_epoch + 1) << _EPOCH_SHIFT)
            | commit_ms
        )
    return entry


def unpack_entry(stored: StoredEntry, topic_ids: list[bytes | None]) -> Entry:
    """The entry `pack_entry` stored (`topic_ids`: the ledger's table, index 0 = None)."""
    if isinstance(stored, tuple):
        return stored
    return (
        stored >> _OFFSET_SHIFT,
        ((stored >> _EPOCH_SHIFT) & _EPOCH_MASK) - 1,
        "",
        stored & _COMMIT_MASK,
        -1,
        topic_ids[(stored >> _TOPIC_ID_SHIFT) & _TOPIC_ID_MASK],
    )


intern = sys.intern


def interned_topics(names: Iterable[str]) -> frozenset[str]:
    return frozenset(intern(n) for n in names)


# Distinct subscription bytes remembered at once, and their total size (cleared when either is
# reached: bounded memory, whatever the members' userData).
SUBSCRIPTION_MEMO_ENTRIES = 50_000
SUBSCRIPTION_MEMO_BYTES = 16 << 20


class SubscriptionMemo:
    """Topics of classic `consumer` members' subscription bytes, parsed once per distinct bytes:
    a group's members send the same subscription at every rebalance, and every rebalance writes a
    GroupMetadata record with all of them. Bounded (cleared when full). Undecodable bytes are never
    remembered: they are parsed again and stay unknown (None)."""

    __slots__ = ("_bytes", "_max_bytes", "_max_entries", "_topics")

    def __init__(
        self, max_entries: int = SUBSCRIPTION_MEMO_ENTRIES, max_bytes: int = SUBSCRIPTION_MEMO_BYTES
    ) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._topics: dict[bytes, frozenset[str]] = {}
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._topics)

    def topics(self, subscription: bytes) -> frozenset[str] | None:
        """`parse_consumer_protocol_subscription`, with the names interned."""
        known = self._topics.get(subscription)
        if known is not None:
            return known
        parsed = parse_consumer_protocol_subscription(subscription)
        if parsed is None:
            return None
        if len(self._topics) >= self._max_entries or self._bytes + len(subscription) > self._max_bytes:
            self._topics.clear()
            self._bytes = 0
        topics = self._topics[subscription] = interned_topics(parsed)
        self._bytes += len(subscription)
        return topics


_SUBSCRIPTIONS = SubscriptionMemo()
subscribed_topics = _SUBSCRIPTIONS.topics


class ClassicState:
    __slots__ = ("current_state_timestamp_ms", "generation", "members", "protocol", "protocol_type")

    def __init__(self, value: GroupMetadataValue | None) -> None:
        # value None: the latest GroupMetadata record was undecodable; everything is unknown.
        self.protocol_type: str | None = None
        self.generation: int | None = None
        self.protocol: str | None = None
        self.current_state_timestamp_ms: int | None = None
        self.members: tuple[LedgerClassicMember, ...] = ()
        if value is None:
            return
        self.protocol_type = intern(value.protocol_type)
        self.generation = value.generation
        self.protocol = value.protocol
        ts = value.current_state_timestamp_ms
        self.current_state_timestamp_ms = ts if ts >= 0 else None
        consumer = value.protocol_type == "consumer"
        members = []
        for m in value.members:
            members.append(
                LedgerClassicMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    subscribed_topics(m.subscription) if consumer else None,
                )
            )
        self.members = tuple(members)


class ConsumerState:
    __slots__ = ("epoch", "epoch_record_ms", "has_metadata", "last_member_left_ms", "members", "regexes")

    def __init__(self) -> None:
        self.has_metadata = False
        self.epoch: int | None = None
        self.epoch_record_ms: int | None = None
        # Log time of the tombstone that removed the last member; -1 = at an unknown time.
        self.last_member_left_ms: int | None = None
        self.members: dict[str, LedgerConsumerMember] = {}
        self.regexes: dict[str, frozenset[str] | None] = {}

    def is_gone(self) -> bool:
        return not (self.has_metadata or self.members or self.regexes)


class ModernState:
    """A share or streams group's membership as the log shows it (metadata and member records, as
    for KIP-848 groups): enough for "Empty since" (the tombstone that removed the last member, else
    the metadata record's time: the epoch bump written with that removal is never older)."""

    __slots__ = ("last_member_left_ms", "members", "metadata_record_ms", "topology")

    def __init__(self) -> None:
        self.members: set[str] = set()
        # Log time of the tombstone that removed the last member; -1 = at an unknown time.
        self.last_member_left_ms: int | None = None
        self.metadata_record_ms: int | None = None
        # A streams group's latest topology record (type 23); None while it has none.
        self.topology: LedgerStreamsTopology | None = None


def streams_topology(value: StreamsGroupTopologyValue | None) -> LedgerStreamsTopology:
    """The parts of a topology record the ledger keeps (None: undecodable)."""
    if value is None:
        return UNDECODABLE_TOPOLOGY
    sources: set[str] = set()
    repartition: set[str] = set()
    changelogs: set[str] = set()
    by_regex = False
    for sub in value.subtopologies:
        sources.update(sub.source_topics)
        by_regex = by_regex or bool(sub.source_topic_regex)
        for info in sub.repartition_source_topics:
            sources.add(info.name)
            repartition.add(info.name)
        repartition.update(sub.repartition_sink_topics)
        changelogs.update(info.name for info in sub.state_changelog_topics)
    return LedgerStreamsTopology(
        value.epoch,
        None if by_regex else interned_topics(sources),
        interned_topics(repartition),
        interned_topics(changelogs),
    )


class ReplayedGroup:
    """What the log's records say of one group so far (mutable while the ledger replays): its
    committed offsets, classic / consumer-protocol metadata, share and streams markers and members.
    Not the broker's group state (`core.snapshot.GroupState`): that is derived from it."""

    __slots__ = ("classic", "consumer", "modern", "offsets", "share", "streams")

    def __init__(self) -> None:
        self.offsets: dict[str, Partitions] | None = None
        self.classic: ClassicState | None = None
        self.consumer: ConsumerState | None = None
        self.share = False  # a ShareGroupMetadata record is live
        self.streams = False  # a StreamsGroupMetadata record is live
        self.modern: ModernState | None = None  # share/streams members (types 10, 11, 17, 19)

    def is_gone(self) -> bool:
        return not (
            self.offsets or self.classic or self.consumer or self.share or self.streams or self.modern
        )


def ledger_offset(entry: Entry) -> LedgerOffset:
    offset, leader_epoch, metadata, commit, expire, topic_id = entry
    return LedgerOffset(
        offset,
        commit,
        expire if expire >= 0 else None,
        leader_epoch if leader_epoch >= 0 else None,
        metadata,
        None if topic_id is None else _uuid(topic_id),
    )


@functools.lru_cache(maxsize=4096)
def _uuid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=raw)


def group_kind(state: ReplayedGroup) -> GroupKind:
    if state.share:
        return GroupKind.SHARE
    modern = state.modern
    if state.streams or (modern is not None and modern.topology is not None):
        return GroupKind.STREAMS
    classic = state.classic
    if classic is not None:
        if state.consumer is not None or classic.protocol_type is None:
            return GroupKind.UNKNOWN  # undecodable, or both protocols at once: never guess
        return GroupKind.CLASSIC if classic.protocol_type else GroupKind.SIMPLE
    if state.consumer is not None:
        return GroupKind.CONSUMER
    return GroupKind.SIMPLE  # offsets only: admin commits or assign() consumers


def subscribed_topics_of(state: ReplayedGroup) -> frozenset[str] | None:
    if state.share:
        return None
    modern = state.modern
    if state.streams or (modern is not None and modern.topology is not None):
        # The current topology's source topics (the broker's rule); unknown without one.
        topology = None if modern is None else modern.topology
        return None if topology is None else topology.source_topics
    topics: set[str] = set()
    classic = state.classic
    if classic is not None:
        if classic.protocol_type is None:
            return None
        for member in classic.members:
            if member.subscribed_topics is None:
                return None
            topics.update(member.subscribed_topics)
    consumer = state.consumer
    if consumer is not None:
        for cm in consumer.members.values():
            if cm.topic_names is None:
                return None
            topics.update(cm.topic_names)
            if cm.regex is not None:
                resolved = consumer.regexes.get(cm.regex)
                if resolved is None:
                    return None
                topics.update(resolved)
    return frozenset(topics)


# A topic's live offsets in one group: a list indexed by partition (None: no offset) while the
# partitions are dense (0..n-1, what consumers commit), else a dict. A list of 6 entries is ~120 B,
# a dict ~290 B: 17 MB per 100k groups of one 6-partition topic. Entries are tested with `is None`
# (a packed entry may be the int 0).
Partitions = list[StoredEntry | None] | dict[int, StoredEntry]
_DENSE_UP_TO = 64  # a new partition past this (and past twice the list) turns the list into a dict


def new_partitions(partition: int, stored: StoredEntry) -> Partitions:
    if 0 <= partition < _DENSE_UP_TO:
        dense: list[StoredEntry | None] = [None] * partition
        dense.append(stored)
        return dense
    return {partition: stored}


def put_partition(partitions: Partitions, partition: int, stored: StoredEntry) -> Partitions:
    """Stores `stored` for `partition`; returns the container to keep (a list may become a dict)."""
    if isinstance(partitions, dict):
        partitions[partition] = stored
        return partitions
    size = len(partitions)
    if 0 <= partition < size:
        partitions[partition] = stored
        return partitions
    if 0 <= partition < max(_DENSE_UP_TO, 2 * size):
        partitions.extend([None] * (partition - size))
        partitions.append(stored)
        return partitions
    sparse = {p: e for p, e in enumerate(partitions) if e is not None}
    sparse[partition] = stored
    return sparse


def get_partition(partitions: Partitions, partition: int) -> StoredEntry | None:
    if isinstance(partitions, dict):
        return partitions.get(partition)
    return partitions[partition] if 0 <= partition < len(partitions) else None


def pop_partition(partitions: Partitions, partition: int) -> bool:
    """Removes `partition`'s entry; True when there was one."""
    if isinstance(partitions, dict):
        return partitions.pop(partition, None) is not None
    if 0 <= partition < len(partitions) and partitions[partition] is not None:
        partitions[partition] = None
        return True
    return False


def partition_items(partitions: Partitions) -> list[tuple[int, StoredEntry]]:
    if isinstance(partitions, dict):
        return list(partitions.items())
    return [(p, e) for p, e in enumerate(partitions) if e is not None]


def partition_count(partitions: Partitions) -> int:
    if isinstance(partitions, dict):
        return len(partitions)
    return sum(1 for e in partitions if e is not None)
