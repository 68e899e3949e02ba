"""The facts a decision is made from: an immutable picture of a cluster's consumer groups.

Gateways (Kafka Admin API, the `__consumer_offsets` ledger, first-observed times) produce a
`ClusterSnapshot`; the engine only reads it. Nothing here performs I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from groupwarden.core.kafka_error import KafkaError


class GroupKind(StrEnum):
    """What kind of group this is, which decides the broker's expiration base (KIP-211/848)."""

    CLASSIC = "classic"  # classic protocol with a protocolType (consumer, connect, ...)
    CONSUMER = "consumer"  # KIP-848 group (group.protocol=consumer)
    SIMPLE = "simple"  # classic group with an empty protocolType: offsets only, never members
    SHARE = "share"  # out of scope: never touched
    STREAMS = "streams"  # out of scope: never touched
    UNKNOWN = "unknown"


class GroupState(StrEnum):
    """Classic and KIP-848 states, normalised to one vocabulary."""

    EMPTY = "Empty"
    STABLE = "Stable"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    DEAD = "Dead"
    UNKNOWN = "Unknown"

    @classmethod
    def parse(cls, value: str | None) -> GroupState:
        if not value:
            return cls.UNKNOWN
        normalised = value.replace("_", "").replace(" ", "").lower()
        for state in cls:
            if state.value.lower() == normalised:
                return state
        return cls.UNKNOWN


class TimestampSource(StrEnum):
    """Where a timestamp came from. `observed` times are never earlier than the truth."""

    OFFSETS_LOG = "offsetsLog"  # exact, read from __consumer_offsets
    OBSERVED = "observed"  # first time groupwarden saw the fact: can only delay a deletion


# The snapshot types are slotted: a 100k-group snapshot holds ~10^6 of them (docs/benchmarks.md,
# "Memory model").
@dataclass(frozen=True, order=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class SourcedTime:
    """A point in time plus where it came from (every timestamp in a plan says its source)."""

    at: datetime
    source: TimestampSource


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    partition: TopicPartition
    offset: int
    # Last commit time of this partition; None when neither the log nor an observation knows it.
    committed_at: SourcedTime | None = None
    # An explicit expireTimestamp from a v1 OffsetCommit value (the broker honours it as is).
    expire_at: datetime | None = None
    leader_epoch: int | None = None
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class GroupFacts:
    group_id: str
    kind: GroupKind
    state: GroupState
    # classic: DescribeGroups protocol_type ("consumer", "connect", ...); "" for simple groups;
    # "consumer" for KIP-848 groups.
    protocol_type: str = ""
    member_count: int = 0
    # Topics the group's members subscribe to now (union over members, regexes resolved).
    # None means "not known" (opaque protocol, undecodable metadata, unresolved regex): the engine
    # then never plans an OffsetDelete for this group.
    subscribed_topics: frozenset[str] | None = None
    # When the group became Empty (classic currentStateTimestamp, or the KIP-848 record that removed
    # the last member); None when unknown or not Empty.
    empty_since: SourcedTime | None = None
    offsets: tuple[CommittedOffset, ...] = ()
    # Set when describing this group (or fetching its offsets) failed; the engine skips it.
    error: str | None = None
    # A streams group's internal topics (repartition and changelog topics of its topology, sorted),
    # named in plans for the owner: groupwarden never deletes topics. Empty when unknown or none.
    internal_topics: tuple[str, ...] = ()
    # The Kafka error `error` renders, when it came from the broker or the client (None for our
    # own words, e.g. "not described"): what decisions read, never the text.
    kafka_error: KafkaError | None = None

    @property
    def last_commit(self) -> SourcedTime | None:
        known = [o.committed_at for o in self.offsets if o.committed_at is not None]
        return max(known, key=lambda t: t.at) if known else None


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    taken_at: datetime
    groups: tuple[GroupFacts, ...]
    cluster_id: str = ""
    # Existing topics, when known (offsets of deleted topics are never "subscribed").
    topics: frozenset[str] | None = None
    # True when the timestamps come from __consumer_offsets; False for the observed fallback.
    offsets_log_available: bool = False
    # Problems that are not tied to one group (e.g. the offsets log was not readable).
    warnings: tuple[str, ...] = field(default_factory=tuple)
