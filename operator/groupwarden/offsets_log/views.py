"""Immutable answers of the `OffsetsLedger` (built on demand; the ledger stores compact state)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from groupwarden.core.snapshot import GroupKind, SourcedTime, TimestampSource

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


# What a datetime can hold (years 1-9999). A record's int64 timestamp may be anything when the
# record is corrupt (found by bench/fuzz_codec.py: an OverflowError here failed the whole snapshot).
MIN_LOG_MS: Final = -62_135_596_800_000  # 0001-01-01T00:00:00Z
MAX_LOG_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z


def log_time(ms: int) -> SourcedTime:
    """An exact `__consumer_offsets` timestamp (epoch milliseconds) as the shared snapshot type.

    Out of range values are clamped: a time after 9999 makes nothing old enough to delete; one
    before year 1 is as old as any other pre-1970 time (a broker never writes either).
    """
    ms = MIN_LOG_MS if ms < MIN_LOG_MS else MAX_LOG_MS if ms > MAX_LOG_MS else ms
    return SourcedTime(at=_EPOCH + timedelta(milliseconds=ms), source=TimestampSource.OFFSETS_LOG)


class LogTimes(dict[int, SourcedTime]):
    """`log_time` with a memo: `times[ms]` is `log_time(ms)`, built once per distinct value. The
    offsets of one commit share its timestamp (the synthetic 1M log: 30k offsets, 5.4k distinct
    times), and a datetime per offset was a sizeable part of building a fleet's facts."""

    __slots__ = ()

    def __missing__(self, ms: int) -> SourcedTime:
        found = self[ms] = log_time(ms)
        return found


@dataclass(frozen=True, slots=True)
class LedgerOffset:
    """The latest committed offset of one partition, as the log says.

    `commit_time_ms` is None when the latest record for this offset could not be decoded (unknown
    value version or corrupt bytes): its time is then unknown, never guessed from older records.
    """

    offset: int  # -1 when undecodable
    commit_time_ms: int | None
    expire_time_ms: int | None  # an explicit v1 expireTimestamp
    leader_epoch: int | None
    metadata: str
    topic_id: uuid.UUID | None = None  # OffsetCommit value v4+ (Kafka 4.1+)


@dataclass(frozen=True, slots=True)
class LedgerClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    # Topics of its ConsumerProtocolSubscription; None when the protocol type is not `consumer`
    # (opaque metadata) or the subscription cannot be decoded.
    subscribed_topics: frozenset[str] | None


@dataclass(frozen=True, slots=True)
class LedgerConsumerMember:
    """A KIP-848 member. `topic_names` is None when its latest record was undecodable."""

    member_id: str
    topic_names: frozenset[str] | None
    regex: str | None


@dataclass(frozen=True, slots=True)
class LedgerStreamsTopology:
    """A streams group's topology as its latest StreamsGroupTopology record (type 23) says.

    `source_topics`: the topics the group reads, internal repartition topics included (what the
    broker's `StreamsGroup.isSubscribedToTopic` checks); None when a subtopology reads by regex
    (resolved by the broker, not logged) or the record was undecodable. `repartition_topics` and
    `changelog_topics`: the app's internal topics (None when undecodable); groupwarden never
    deletes topics, plans name them for the owner.
    """

    epoch: int | None
    source_topics: frozenset[str] | None
    repartition_topics: frozenset[str] | None
    changelog_topics: frozenset[str] | None

    @property
    def internal_topics(self) -> frozenset[str] | None:
        if self.repartition_topics is None or self.changelog_topics is None:
            return None
        return self.repartition_topics | self.changelog_topics


UNDECODABLE_TOPOLOGY = LedgerStreamsTopology(None, None, None, None)


@dataclass(frozen=True, slots=True)
class LedgerGroup:
    group_id: str
    kind: GroupKind
    # classic: the protocolType ("" for simple groups); KIP-848: "consumer"; offsets only: "";
    # None when the group's metadata record could not be decoded.
    protocol_type: str | None
    generation: int | None  # classic generation
    protocol: str | None  # classic selected protocol (assignor)
    current_state_timestamp_ms: int | None  # classic, GroupMetadata v2+
    group_epoch: int | None  # KIP-848
    classic_members: tuple[LedgerClassicMember, ...]
    consumer_members: Mapping[str, LedgerConsumerMember]
    # Resolved topics per regex of a KIP-848 group; None when the resolution is undecodable.
    regex_topics: Mapping[str, frozenset[str] | None]
    # Classic: currentStateTimestamp of the latest GroupMetadata with no members. KIP-848: log time
    # of the member tombstone that removed the last member (or, when compaction has already dropped
    # that tombstone, the log time of the group's epoch record, which is written with or after it).
    # None while members exist or when unknown.
    empty_since_ms: int | None
    subscribed_topics: frozenset[str] | None
    offset_count: int
    # Members of a share or streams group (their member records, types 10 and 19): only counted,
    # their subscriptions are not needed from the log.
    modern_member_count: int = 0
    # A streams group's latest topology record (None: no such record).
    streams_topology: LedgerStreamsTopology | None = None

    @property
    def member_count(self) -> int:
        return len(self.classic_members) + len(self.consumer_members) + self.modern_member_count

    @property
    def empty_since(self) -> SourcedTime | None:
        return None if self.empty_since_ms is None else log_time(self.empty_since_ms)
