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

intern = sys.intern


def interned_topics(names: Iterable[str]) -> frozenset[str]:
    return frozenset(intern(n) for n in names)


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
            topics = parse_consumer_protocol_subscription(m.subscription) if consumer else None
            members.append(
                LedgerClassicMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    None if topics is None else interned_topics(topics),
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


class GroupState:
    __slots__ = ("classic", "consumer", "modern", "offsets", "share", "streams")

    def __init__(self) -> None:
        self.offsets: dict[str, dict[int, Entry]] | None = None
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


def group_kind(state: GroupState) -> GroupKind:
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


def subscribed_topics_of(state: GroupState) -> frozenset[str] | None:
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
