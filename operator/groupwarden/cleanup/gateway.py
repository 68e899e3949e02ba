"""The Kafka gateway port: what groupwarden needs from a cluster, with per-item results.

The real adapter (`groupwarden.adapters.kafka_gateway`) batches every call per group coordinator;
`groupwarden.testing.fake_kafka` implements the same port in memory for unit tests. Nothing here holds a
client, so the orchestration code (`gather`, `execute`) stays testable without a broker.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias

from groupwarden.connectivity.retry import RetryObserver
from groupwarden.core.kafka_error import KafkaError as KafkaError  # re-exported: part of the port
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from groupwarden.offsets_log.ledger import OffsetsLogRecord


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """One row of ListGroups: id, type (classic/consumer/share/streams) and state."""

    group_id: str
    group_type: str  # ListGroups v5 GroupType: "classic", "consumer", "share", "streams" ("" if unknown)
    protocol_type: str  # "" for simple groups
    state: GroupState


@dataclass(frozen=True)
class DescribedGroup:
    group_id: str
    kind: GroupKind
    state: GroupState
    protocol_type: str
    member_count: int
    # Union of the members' subscriptions (classic: decoded ConsumerProtocolSubscription;
    # KIP-848: SubscribedTopicNames plus topics the broker resolved for SubscribedTopicRegex).
    # None when not knowable (opaque protocol, undecodable metadata, unresolved regex).
    subscribed_topics: frozenset[str] | None
    error: KafkaError | None = None
    # Streams groups: the repartition and changelog topics of the described topology (None: unknown).
    internal_topics: frozenset[str] | None = None


@dataclass(frozen=True)
class CommittedOffsetInfo:
    offset: int
    leader_epoch: int | None = None
    metadata: str = ""


@dataclass(frozen=True)
class GroupOffsets:
    group_id: str
    offsets: Mapping[TopicPartition, CommittedOffsetInfo]
    error: KafkaError | None = None
    # Share groups: the id of each topic of `offsets` (DescribeShareGroupOffsets names both), the
    # key of its share-partitions in `__share_group_state`.
    topic_ids: Mapping[str, uuid.UUID] = field(default_factory=dict)


# Asked by a destructive call before every send of its request, re-sends through a failover
# included: a reason (the run guard's: the Lease was lost, the policy deleted) stops the call;
# None lets it go on. Called from the client's threads: it must be cheap and thread-safe.
SendGuard: TypeAlias = Callable[[], str | None]
# One group's OffsetDelete: (group id, partitions); its answer: a group-level error, else per partition.
OffsetDeletion: TypeAlias = tuple[str, Sequence[TopicPartition]]
OffsetDeleteAnswer: TypeAlias = tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]


class KafkaGateway(Protocol):
    def cluster_id(self) -> str: ...

    def list_groups(self) -> Sequence[ListedGroup]: ...

    def describe_groups(self, groups: Sequence[ListedGroup]) -> Mapping[str, DescribedGroup]:
        """Classic groups via DescribeGroups, KIP-848 groups via ConsumerGroupDescribe (API 69),
        share groups via ShareGroupDescribe (API 77), batched per coordinator. Every requested id
        is in the answer (with `error` on failure)."""
        ...

    def fetch_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        """Committed offsets, batched per coordinator (multi-group OffsetFetch where supported)."""
        ...

    def list_topics(self) -> frozenset[str]: ...

    def fetch_share_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        """Share-partition start offsets (DescribeShareGroupOffsets, API 90; KIP-932), batched per
        coordinator. Share state is not in __consumer_offsets and OffsetFetch does not serve it.
        A partition whose state was never initialised is absent."""
        ...

    def delete_share_offsets(
        self, group_id: str, topics: Sequence[str], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[str, KafkaError | None]]:
        """DeleteShareGroupOffsets (API 92): a group-level error (NON_EMPTY_GROUP while the share
        group has members, even for topics it no longer subscribes to), else one result per topic."""
        ...

    def alter_share_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        """AlterShareGroupOffsets (API 91): start offsets of an Empty share group (created when
        absent, as restore needs); NON_EMPTY_GROUP while it has members."""
        ...

    def delete_groups(
        self, group_ids: Sequence[str], before_send: SendGuard | None = None
    ) -> Mapping[str, KafkaError | None]:
        """DeleteGroups (KIP-229) batched per coordinator; None means deleted. Retried through a
        failover until the API timeout, `before_send` asked before every send; a re-send that
        finds the group gone after an earlier attempt may have deleted it answers
        DONE_BY_EARLIER_ATTEMPT (connectivity/retry.py)."""
        ...

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        """OffsetDelete (KIP-496): a group-level error, else one result per partition. Retried
        like `delete_groups`."""
        ...

    def delete_offsets_many(
        self, requests: Sequence[OffsetDeletion], before_send: SendGuard | None = None
    ) -> Mapping[str, OffsetDeleteAnswer]:
        """`delete_offsets` of several groups (one request each: the API has no batch form), all
        in flight at once, each retried and guarded like `delete_offsets`; per group id its
        answer."""
        ...

    def read_offsets_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        """Records of __consumer_offsets from the given next-offset per partition up to the current
        end. Raises OffsetsLogUnavailable when the topic cannot be read (authorization, managed
        services), so callers fall back to first-observed times; raises OffsetsLogGap when a
        partition's log start is past the given position."""
        ...

    def read_share_state_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        """Records of `__share_group_state`, read like `read_offsets_log` (same errors)."""
        ...

    def observe_retries(self, observer: RetryObserver | None) -> None:
        """From now on, tell `observer` before each pause of a retried request (connectivity/retry.py):
        the operator says `Reconciling` while a failover lasts. None stops telling."""
        ...

    def close(self) -> None: ...


class OffsetsLogUnavailable(Exception):
    """__consumer_offsets could not be read; timestamps fall back to first-observed times."""


class OffsetsLogGap(Exception):
    """Records the ledger never saw were removed (retention or DeleteRecords moved the log start past
    its position): the ledger must be rebuilt from the beginning, or it could keep phantom offsets
    or members."""

    def __init__(self, partition: int, position: int, log_start: int) -> None:
        start = "unknown" if log_start < 0 else str(log_start)
        super().__init__(
            f"__consumer_offsets partition {partition}: next offset {position} is below the log start "
            f"offset ({start}); records were removed before they were read, rebuild the ledger"
        )
        self.partition = partition
        self.position = position
        self.log_start = log_start

    def __reduce__(self) -> tuple[type[OffsetsLogGap], tuple[int, int, int]]:
        # Pickled with its arguments (Exception's default pickles the message alone): it crosses
        # from `export-offsets-log --parallel`'s reading processes.
        return (type(self), (self.partition, self.position, self.log_start))


class KafkaUnavailable(Exception):
    """The cluster could not be reached at all (a transient, whole-run failure)."""


class KafkaAuthenticationFailed(KafkaUnavailable):
    """SASL authentication or the TLS handshake failed: a configuration problem, not transient.

    A subclass of `KafkaUnavailable` so callers that only know the port still treat it as "the
    cluster could not be used"; the message names the mechanism and the user, never a secret."""


class KafkaTlsHandshakeFailed(KafkaAuthenticationFailed):
    """The TLS handshake failed (typically: the broker's certificate is not signed by the CA the
    client trusts). Its own type so a user is told to check the CA, not the password."""
