"""`FakeKafka`: an in-memory cluster implementing the `KafkaGateway` port, for unit tests.

It answers like the broker does (docs/kafka-gateway.md and docs/engine.md describe those answers;
tests/integration/test_gateway_contract.py runs the same cases against it and the real adapter on a
real broker):

- DeleteGroups: GROUP_ID_NOT_FOUND for missing groups, NON_EMPTY_GROUP unless Empty.
- OffsetFetch: no offsets and no error for a missing group and for a share group.
- OffsetDelete: GROUP_ID_NOT_FOUND (top level) for missing and share groups; NON_EMPTY_GROUP (top level) for a
  classic group with members whose protocol is not `consumer`; otherwise per partition
  GROUP_SUBSCRIBED_TO_TOPIC for topics the group subscribes to (classic `consumer` and KIP-848
  groups, any state; an unknown subscription counts as subscribed to everything), else deleted.
- Describe: classic groups report member subscriptions only while Stable (as the broker does);
  KIP-848 regexes are matched against the fake's topics.

Every change is also appended to an in-memory `__consumer_offsets` log, encoded with
`groupwarden.testing.offsets_log_encoder` exactly as the group coordinator writes it, so the ledger path
(`read_offsets_log` -> `OffsetsLedger`) is testable without a broker. Hooks (`before`) change
state between calls, e.g. a consumer that comes back between plan and apply. Pure: no client.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from groupwarden.cleanup.gateway import (
    CommittedOffsetInfo,
    DescribedGroup,
    GroupOffsets,
    KafkaError,
    KafkaUnavailable,
    ListedGroup,
    OffsetDeleteAnswer,
    OffsetDeletion,
    OffsetsLogGap,
    OffsetsLogUnavailable,
    SendGuard,
)
from groupwarden.connectivity.retry import NOT_RESENT, RetryObserver
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from groupwarden.offsets_log.ledger import OffsetsLogRecord
from groupwarden.offsets_log.records import (
    ClassicMember,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordKey,
    RecordValue,
)
from groupwarden.testing.offsets_log_encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_value,
)

GROUP_ID_NOT_FOUND = KafkaError("GROUP_ID_NOT_FOUND", 69)
NON_EMPTY_GROUP = KafkaError("NON_EMPTY_GROUP", 68)
GROUP_SUBSCRIBED_TO_TOPIC = KafkaError("GROUP_SUBSCRIBED_TO_TOPIC", 86)
_DEFAULT_PROTOCOL_TYPES = {GroupKind.SIMPLE: "", GroupKind.SHARE: "share", GroupKind.STREAMS: "streams"}
_GROUP_TYPES = {GroupKind.CONSUMER: "consumer", GroupKind.SHARE: "share", GroupKind.STREAMS: "streams"}
Partitions = Mapping[TopicPartition, int] | Mapping[tuple[str, int], int]


@dataclass
class FakeMember:
    member_id: str
    topics: frozenset[str] | None  # None: undecodable / opaque metadata
    regex: str | None = None  # KIP-848 SubscribedTopicRegex


@dataclass
class FakeGroup:
    group_id: str
    kind: GroupKind
    state: GroupState
    protocol_type: str
    members: list[FakeMember] = field(default_factory=list)
    offsets: dict[TopicPartition, CommittedOffsetInfo] = field(default_factory=dict)
    # Injected per-operation errors: "describe", "fetch", "delete_group", "delete_offsets".
    errors: dict[str, KafkaError] = field(default_factory=dict)
    epoch: int = 0

    def subscriptions(self, topics: Iterable[str]) -> frozenset[str] | None:
        """What the broker knows the members subscribe to (None: unknown)."""
        if self.kind is GroupKind.SIMPLE or not self.members:
            return frozenset()
        if self.kind is GroupKind.CLASSIC and self.protocol_type != "consumer":
            return None
        found: set[str] = set()
        for member in self.members:
            if member.topics is None:
                return None
            found |= member.topics
            if member.regex:
                found |= {t for t in topics if re.fullmatch(member.regex, t)}
        return frozenset(found)


def _not_sent(reason: str) -> KafkaError:
    """The real gateway's answer when the run guard stops a deletion before it is sent."""
    return KafkaError(NOT_RESENT, retriable=True, message=f"not sent again: {reason}")


def fake_topic_id(topic: str) -> uuid.UUID:
    """The fake cluster's id of a topic (stable: derived from its name)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"fake-kafka-topic:{topic}")


class FakeKafka:
    """In-memory `KafkaGateway`. Mutate it with the helpers; read `calls` to see what was asked."""

    def __init__(
        self,
        *,
        topics: Iterable[str] = (),
        cluster_id: str = "fake-cluster",
        offsets_partitions: int = 3,
        now_ms: int = 1_700_000_000_000,
    ) -> None:
        self.topics: set[str] = set(topics)
        self.cluster = cluster_id
        self.groups: dict[str, FakeGroup] = {}
        self.calls: Counter[str] = Counter()
        self.now_ms = now_ms
        self.unavailable = False  # every call raises KafkaUnavailable
        self.offsets_log_unavailable = False  # read_offsets_log raises OffsetsLogUnavailable
        # `__share_group_state`: records a test appends (encoded with offsets_log.share_state's
        # schemas), all in its partition 0; `share_state_unavailable` makes reading it fail (ACLs).
        self.share_state_log: list[OffsetsLogRecord] = []
        self.share_state_unavailable = False
        self.closed = False
        # Who `observe_retries` tells: a test's hook calls it to play a failover's retries.
        self.retry_observer: RetryObserver | None = None
        self.offsets_partitions = offsets_partitions
        self._log: dict[int, list[OffsetsLogRecord]] = defaultdict(list)
        self._log_start: dict[int, int] = defaultdict(int)
        self._hooks: list[tuple[str, Callable[[FakeKafka], None], bool]] = []

    # -- building state --------------------------------------------------------------------------

    def add_group(
        self,
        group_id: str,
        kind: GroupKind = GroupKind.CLASSIC,
        *,
        state: GroupState | None = None,
        protocol_type: str | None = None,
        subscribed: Iterable[str] | None = None,
        regex: str | None = None,
        members: int | None = None,
        offsets: Partitions | None = None,
        committed_at_ms: int | None = None,
        empty_since_ms: int | None = None,
    ) -> FakeGroup:
        """A group with `members` members (default: 1 when `subscribed`/`regex` is given, else 0),
        each subscribing to `subscribed` (None with members = undecodable) and `regex`; state
        defaults to Stable with members, else Empty. Offsets are committed at `committed_at_ms`,
        the group became Empty at `empty_since_ms` (both default to `now_ms`)."""
        if group_id in self.groups:
            raise ValueError(f"group {group_id} exists")
        if protocol_type is None:
            protocol_type = _DEFAULT_PROTOCOL_TYPES.get(kind, "consumer")
        count = members if members is not None else int(subscribed is not None or regex is not None)
        if kind is GroupKind.SIMPLE and count:
            raise ValueError("simple groups have no members")
        group = self.groups[group_id] = FakeGroup(group_id, kind, GroupState.EMPTY, protocol_type)
        if offsets:
            self.commit(group_id, offsets, at_ms=committed_at_ms)
        self._write_group(group, empty_since_ms)  # a group record exists before members join
        if count:
            self.join(group_id, subscribed, regex=regex, members=count, state=state or GroupState.STABLE)
        elif state is not None:
            group.state = state
        return group

    def commit(self, group_id: str, offsets: Partitions, *, at_ms: int | None = None) -> None:
        """OffsetCommit (a simple group is created for an unknown id, like an admin commit)."""
        at = self.now_ms if at_ms is None else at_ms
        group = self.groups.get(group_id) or self.groups.setdefault(
            group_id, FakeGroup(group_id, GroupKind.SIMPLE, GroupState.EMPTY, "")
        )
        for key, offset in offsets.items():
            tp = key if isinstance(key, TopicPartition) else TopicPartition(*key)
            group.offsets[tp] = CommittedOffsetInfo(offset)
            if group.kind is GroupKind.SHARE:
                continue  # share-partition state lives in __share_group_state, not in this log
            value = OffsetCommitValue(offset=offset, leader_epoch=-1, metadata="", commit_timestamp_ms=at)
            self._append(OffsetCommitKey(group_id, tp.topic, tp.partition), value, at)

    def join(
        self,
        group_id: str,
        subscribed: Iterable[str] | None,
        *,
        regex: str | None = None,
        members: int = 1,
        state: GroupState = GroupState.STABLE,
        at_ms: int | None = None,
        kind: GroupKind = GroupKind.CLASSIC,
    ) -> None:
        """Members (re)join: a consumer came back. Replaces the current members. Members joining a
        simple group make it a group of their protocol (`kind`: classic or KIP-848 consumer)."""
        group = self.groups[group_id]
        if group.kind is GroupKind.SIMPLE:
            group.kind, group.protocol_type = kind, "consumer"
        topics: frozenset[str] | None = frozenset(subscribed or ())
        if subscribed is None and group.kind is GroupKind.CLASSIC and regex is None:
            topics = None  # a classic member whose metadata cannot be decoded
        group.members = [FakeMember(f"{group_id}-member-{i}", topics, regex) for i in range(members)]
        group.state = state if members else GroupState.EMPTY
        self._write_group(group, at_ms)

    def leave(self, group_id: str, *, at_ms: int | None = None) -> None:
        """Every member leaves: the group becomes Empty at `at_ms`."""
        group = self.groups[group_id]
        gone, group.members, group.state = group.members, [], GroupState.EMPTY
        at = self.now_ms if at_ms is None else at_ms
        if group.kind is GroupKind.CONSUMER:
            for member in gone:
                self._append(ConsumerGroupMemberMetadataKey(group_id, member.member_id), None, at)
        self._write_group(group, at)

    def fail(self, group_id: str, operation: str, error: KafkaError) -> None:
        """Inject a per-group error for "describe", "fetch", "delete_group" or "delete_offsets"."""
        self.groups[group_id].errors[operation] = error

    def before(self, method: str, hook: Callable[[FakeKafka], None], *, once: bool = True) -> None:
        """Run `hook(self)` at the start of the next call (every call if not `once`) of `method`."""
        self._hooks.append((method, hook, once))

    def advance(self, ms: int) -> None:
        self.now_ms += ms

    def truncate_log(self, partition: int, log_start: int) -> None:
        """Retention/DeleteRecords removed the records below `log_start` of one partition."""
        self._log_start[partition] = max(self._log_start[partition], log_start)

    def log_end(self, partition: int) -> int:
        return len(self._log[partition])

    def partition_for(self, group_id: str) -> int:
        """`__consumer_offsets` partition of a group: Java `abs(groupId.hashCode()) % n`."""
        h = 0
        for unit in group_id.encode("utf-16-be").hex(" ", 2).split():
            h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
        return (h & 0x7FFFFFFF) % self.offsets_partitions

    # -- the port --------------------------------------------------------------------------------

    def _call(self, method: str) -> None:
        if self.unavailable:
            raise KafkaUnavailable("FakeKafka is unavailable")
        self.calls[method] += 1
        for entry in list(self._hooks):
            if entry[0] == method:
                if entry[2]:
                    self._hooks.remove(entry)
                entry[1](self)

    def cluster_id(self) -> str:
        self._call("cluster_id")
        return self.cluster

    def list_topics(self) -> frozenset[str]:
        self._call("list_topics")
        return frozenset(self.topics)

    def list_groups(self) -> Sequence[ListedGroup]:
        self._call("list_groups")
        return [
            ListedGroup(g.group_id, _GROUP_TYPES.get(g.kind, "classic"), g.protocol_type, g.state)
            for g in self.groups.values()
        ]

    def describe_groups(self, groups: Sequence[ListedGroup]) -> Mapping[str, DescribedGroup]:
        self._call("describe_groups")
        out: dict[str, DescribedGroup] = {}
        for listed in groups:
            group = self.groups.get(listed.group_id)
            if group is None or "describe" in group.errors:
                error = GROUP_ID_NOT_FOUND if group is None else group.errors["describe"]
                state = GroupState.DEAD if group is None else listed.state
                kind = GroupKind.SIMPLE if listed.protocol_type == "" else GroupKind.CLASSIC
                if listed.group_type == "consumer":
                    kind = GroupKind.CONSUMER
                out[listed.group_id] = DescribedGroup(
                    listed.group_id, kind, state, listed.protocol_type, 0, None, error
                )
                continue
            subscribed = group.subscriptions(self.topics)
            if group.kind is GroupKind.CLASSIC and group.members and group.state is not GroupState.STABLE:
                subscribed = None  # the broker sends no member metadata mid-rebalance
            out[listed.group_id] = DescribedGroup(
                group.group_id, group.kind, group.state, group.protocol_type, len(group.members), subscribed
            )
        return out

    def fetch_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        self._call("fetch_offsets")
        out: dict[str, GroupOffsets] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is not None and "fetch" in group.errors:
                out[group_id] = GroupOffsets(group_id, {}, group.errors["fetch"])
            elif group is None or group.kind is GroupKind.SHARE:
                # The broker answers an unknown group, and a share group (its state is not in
                # OffsetFetch), with no offsets, not an error.
                out[group_id] = GroupOffsets(group_id, {})
            else:
                out[group_id] = GroupOffsets(group_id, dict(group.offsets))
        return out

    def delete_groups(
        self, group_ids: Sequence[str], before_send: SendGuard | None = None
    ) -> Mapping[str, KafkaError | None]:
        # Asked before the request is sent; the `before` hooks of `_call` happen while it runs.
        stop = before_send() if before_send is not None else None
        if stop is not None:
            return dict.fromkeys(group_ids, _not_sent(stop))
        self._call("delete_groups")
        out: dict[str, KafkaError | None] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                out[group_id] = GROUP_ID_NOT_FOUND
            elif "delete_group" in group.errors:
                out[group_id] = group.errors["delete_group"]
            elif group.state is not GroupState.EMPTY or group.members:
                out[group_id] = NON_EMPTY_GROUP
            elif group.kind is GroupKind.SHARE:
                group.offsets.clear()  # with its share state (__share_group_state)
                del self.groups[group_id]
                out[group_id] = None
            else:
                self._delete_offsets(group, list(group.offsets))
                key: RecordKey = (
                    ConsumerGroupMetadataKey(group_id)
                    if group.kind is GroupKind.CONSUMER
                    else GroupMetadataKey(group_id)
                )
                self._append(key, None, self.now_ms)
                del self.groups[group_id]
                out[group_id] = None
        return out

    def delete_offsets_many(
        self, requests: Sequence[OffsetDeletion], before_send: SendGuard | None = None
    ) -> Mapping[str, OffsetDeleteAnswer]:
        """Each group's `delete_offsets` in turn (the broker would take them concurrently)."""
        return {
            group_id: self.delete_offsets(group_id, partitions, before_send)
            for group_id, partitions in requests
        }

    def delete_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        # Asked before the request is sent; the `before` hooks of `_call` happen while it runs.
        stop = before_send() if before_send is not None else None
        if stop is not None:
            return _not_sent(stop), {}
        self._call("delete_offsets")
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD or group.kind is GroupKind.SHARE:
            return GROUP_ID_NOT_FOUND, {}  # a share group is no consumer group to OffsetDelete
        if "delete_offsets" in group.errors:
            return group.errors["delete_offsets"], {}
        if group.kind is GroupKind.CLASSIC and group.protocol_type != "consumer" and group.members:
            return NON_EMPTY_GROUP, {}
        subscribed = group.subscriptions(self.topics)
        results: dict[TopicPartition, KafkaError | None] = {}
        for tp in partitions:
            if subscribed is None or tp.topic in subscribed:
                results[tp] = GROUP_SUBSCRIBED_TO_TOPIC
            else:
                results[tp] = None
        self._delete_offsets(group, [tp for tp, error in results.items() if error is None])
        return None, results

    def fetch_share_offsets(self, group_ids: Sequence[str]) -> Mapping[str, GroupOffsets]:
        self._call("fetch_share_offsets")
        out: dict[str, GroupOffsets] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is not None and "fetch" in group.errors:
                out[group_id] = GroupOffsets(group_id, {}, group.errors["fetch"])
            elif group is None or group.kind is not GroupKind.SHARE:
                out[group_id] = GroupOffsets(group_id, {})  # the broker answers with no state
            else:
                topic_ids = {tp.topic: fake_topic_id(tp.topic) for tp in group.offsets}
                out[group_id] = GroupOffsets(group_id, dict(group.offsets), topic_ids=topic_ids)
        return out

    def delete_share_offsets(
        self, group_id: str, topics: Sequence[str], before_send: SendGuard | None = None
    ) -> tuple[KafkaError | None, Mapping[str, KafkaError | None]]:
        # Asked before the request is sent; the `before` hooks of `_call` happen while it runs.
        stop = before_send() if before_send is not None else None
        if stop is not None:
            return _not_sent(stop), {}
        self._call("delete_share_offsets")
        group = self.groups.get(group_id)
        if group is None or group.kind is not GroupKind.SHARE:
            return GROUP_ID_NOT_FOUND, {}
        if "delete_offsets" in group.errors:
            return group.errors["delete_offsets"], {}
        if group.members or group.state is not GroupState.EMPTY:
            return NON_EMPTY_GROUP, {}  # the broker removes share state of Empty groups only
        for tp in [tp for tp in group.offsets if tp.topic in topics]:
            del group.offsets[tp]
        return None, dict.fromkeys(topics)

    def alter_share_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, int]
    ) -> tuple[KafkaError | None, Mapping[TopicPartition, KafkaError | None]]:
        """Like the broker: creates an absent share group; NON_EMPTY_GROUP while it has members."""
        self._call("alter_share_offsets")
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = FakeGroup(group_id, GroupKind.SHARE, GroupState.EMPTY, "share")
        if group.kind is not GroupKind.SHARE:
            return GROUP_ID_NOT_FOUND, {}
        if group.members or group.state is not GroupState.EMPTY:
            return NON_EMPTY_GROUP, {}
        for tp, offset in offsets.items():
            group.offsets[tp] = CommittedOffsetInfo(offset)
        return None, dict.fromkeys(offsets)

    def read_offsets_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        self._call("read_offsets_log")
        if self.offsets_log_unavailable:
            raise OffsetsLogUnavailable("FakeKafka: not authorized to read __consumer_offsets")
        bounds = {}
        for partition in range(self.offsets_partitions):
            start = start_positions.get(partition, self._log_start[partition])
            if start < self._log_start[partition]:
                raise OffsetsLogGap(partition, start, self._log_start[partition])
            bounds[partition] = (start, len(self._log[partition]))  # the end is fixed now
        return self._records(bounds)

    def read_share_state_log(self, start_positions: Mapping[int, int]) -> Iterable[OffsetsLogRecord]:
        self._call("read_share_state_log")
        if self.share_state_unavailable:
            raise OffsetsLogUnavailable("FakeKafka: not authorized to read __share_group_state")
        return list(self.share_state_log[start_positions.get(0, 0) :])

    def _records(self, bounds: Mapping[int, tuple[int, int]]) -> Iterator[OffsetsLogRecord]:
        for partition, (start, end) in bounds.items():
            yield from self._log[partition][start:end]

    def observe_retries(self, observer: RetryObserver | None) -> None:
        self.retry_observer = observer

    def close(self) -> None:
        self.closed = True

    # -- the log ---------------------------------------------------------------------------------

    def _delete_offsets(self, group: FakeGroup, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            if group.offsets.pop(tp, None) is not None:
                self._append(OffsetCommitKey(group.group_id, tp.topic, tp.partition), None, self.now_ms)

    def _append(self, key: RecordKey, value: RecordValue | None, at_ms: int) -> None:
        partition = self.partition_for(key.group or "")
        log = self._log[partition]
        raw_value = None if value is None else encode_value(value)
        log.append(OffsetsLogRecord(encode_key(key), raw_value, at_ms, partition, len(log)))

    @staticmethod
    def _classic_member(group: FakeGroup, member: FakeMember) -> ClassicMember:
        if group.protocol_type == "consumer":
            subscription = encode_consumer_protocol_subscription(sorted(member.topics or ()))
        else:
            subscription = b"opaque"  # never parsed
        return ClassicMember(
            member.member_id, None, "fake-client", "/127.0.0.1", 60_000, 45_000, subscription, b""
        )

    def _write_group(self, group: FakeGroup, at_ms: int | None) -> None:
        at = self.now_ms if at_ms is None else at_ms
        if group.kind is GroupKind.CLASSIC:
            group.epoch += 1
            members = tuple(self._classic_member(group, m) for m in group.members)
            leader = group.members[0].member_id if group.members else None
            value = GroupMetadataValue(
                group.protocol_type, group.epoch, "range" if members else None, leader, at, members
            )
            self._append(GroupMetadataKey(group.group_id), value, at)
        elif group.kind is GroupKind.CONSUMER:
            for m in group.members:
                member = ConsumerGroupMemberMetadataValue(
                    None, None, "fake-client", "/127.0.0.1", tuple(sorted(m.topics or ())), m.regex
                )
                self._append(ConsumerGroupMemberMetadataKey(group.group_id, m.member_id), member, at)
            group.epoch += 1
            self._append(
                ConsumerGroupMetadataKey(group.group_id), ConsumerGroupMetadataValue(group.epoch), at
            )
