"""Per-group eligibility: which rule applies to a group in its state, and from which base time.

The bases follow the broker's own offset expiration (GroupMetadata.removeExpiredOffsets, KIP-211,
KIP-496, KIP-848), with one rule of thumb where we differ: when in doubt pick the LATER time, because a
later base only delays a deletion, an earlier one could delete something still wanted.

Everything here is pure: a group's facts and the policy's retentions in, candidates or skips out.
Limits, the blast-radius breaker and overlap between policies are applied later (engine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from groupwarden.core.durations import format_age, format_duration
from groupwarden.core.plan import Skip, SkipReason
from groupwarden.core.policy import RuleName
from groupwarden.core.snapshot import GroupFacts, GroupKind, GroupState, SourcedTime, TopicPartition
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.core.wording import counted

REBALANCING_STATES = frozenset(
    {
        GroupState.PREPARING_REBALANCE,
        GroupState.COMPLETING_REBALANCE,
        GroupState.ASSIGNING,
        GroupState.RECONCILING,
    }
)
CONSUMER_PROTOCOL = "consumer"
_MEMBER_RULES = frozenset({RuleName.EMPTY_GROUP_RETENTION, RuleName.UNSUBSCRIBED_OFFSET_RETENTION})


@dataclass(frozen=True, slots=True)
class PartitionCandidate:
    partition: TopicPartition
    committed_at: SourcedTime


@dataclass(frozen=True, slots=True)
class GroupDeletionCandidate:
    """The whole group is eligible for DeleteGroups (it is Empty; the broker re-checks that)."""

    group: GroupFacts
    rule: RuleName
    retention: timedelta
    base: SourcedTime
    # emptyGroupRetention: what the base is, with an `{age}` field (see `explain`).
    basis: str = ""
    # simpleGroupOffsetRetention: every partition of the group is eligible (see `partitions`).
    every_partition: bool = False
    # `partitions`, once asked (overlapping policies ask for every candidate they block).
    _partitions: tuple[PartitionCandidate, ...] | None = field(
        default=None, init=False, compare=False, repr=False
    )

    def explain(self, now: datetime) -> str:
        """The reason sentence, for a plan decided at `now`. Written only for the candidates that
        become actions (at 100k eligible groups and a limit of 100, formatting every reason was a
        sizeable part of a pass), and with the plan's time, so a candidate holds no `now` of its
        own and stays valid for later passes (core/verdicts.py)."""
        age = format_age(now - self.base.at)
        limit = f"{self.rule.value} {format_duration(self.retention)}"
        if self.rule is RuleName.EMPTY_GROUP_RETENTION:
            return f"group {self.basis.format(age=age)} >= {limit}"
        if not self.every_partition:
            since = describe_time(self.base)
            return f"simple group without committed offsets, Empty for {age} (since {since}) >= {limit}"
        count = plural(len(self.group.offsets), "partition")
        latest = describe_time(self.base)
        return f"simple group: all {count} last committed {age} ago or earlier (latest {latest}) >= {limit}"

    @property
    def partitions(self) -> tuple[PartitionCandidate, ...]:
        """simpleGroupOffsetRetention: the (all eligible) partitions, so an overlapping policy with
        a longer retention can still allow some of them; empty for emptyGroupRetention (all or
        nothing)."""
        if not self.every_partition:
            return ()
        found = self._partitions
        if found is None:
            offsets = self.group.offsets
            dated = (PartitionCandidate(o.partition, o.committed_at) for o in offsets if o.committed_at)
            found = tuple(sorted(dated, key=_by_partition))
            object.__setattr__(self, "_partitions", found)  # a cache: the candidate stays the same
        return found


@dataclass(frozen=True, slots=True)
class OffsetDeletionCandidate:
    """Some partitions of the group are eligible for OffsetDelete (sorted by partition)."""

    group: GroupFacts
    rule: RuleName
    retention: timedelta
    partitions: tuple[PartitionCandidate, ...]


Verdict = GroupDeletionCandidate | OffsetDeletionCandidate | Skip | None


def describe_time(time: SourcedTime) -> str:
    return f"{to_rfc3339(time.at)}, {time.source.value}"


def judge_group(group: GroupFacts, rules: dict[RuleName, timedelta], now: datetime) -> Verdict:
    """What the enabled rules say about one selected group with no describe error.

    None means "nothing to do and nothing worth reporting" (e.g. a Stable group with no old
    unsubscribed offsets, or no rule that applies to this kind).

    Mirrored for the fleet audit's common shapes (which groups it answers on numpy columns, and
    with which rule) by `fleet/columnar_claims.py` and `fleet/columnar_rules.py` (`candidates`):
    a change here must be made there too (DESIGN.md, "Fast paths and their oracle").
    """
    if group.kind is GroupKind.SIMPLE:
        if RuleName.SIMPLE_GROUP_OFFSET_RETENTION not in rules:
            return None
    elif group.kind in (GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SHARE, GroupKind.STREAMS):
        if not _MEMBER_RULES & rules.keys():
            return None
    else:  # unknown kinds never reach here (selection), but never act on them regardless
        return _skip(group, SkipReason.UNSUPPORTED_GROUP_TYPE, f"{group.kind.value} groups are never touched")

    state_skip = _state_skip(group)
    if state_skip is not None:
        return state_skip
    if group.kind is GroupKind.SIMPLE:
        if group.state is not GroupState.EMPTY or group.member_count:
            detail = f"simple group in state {group.state.value} with {counted(group.member_count, 'member')}"
            return _skip(group, SkipReason.UNEXPECTED_STATE, detail)
        return simple_group_offsets(group, rules[RuleName.SIMPLE_GROUP_OFFSET_RETENTION], now)
    if group.state is GroupState.EMPTY:
        if group.member_count:
            detail = f"state Empty but {counted(group.member_count, 'member')}"
            return _skip(group, SkipReason.UNEXPECTED_STATE, detail)
        retention = rules.get(RuleName.EMPTY_GROUP_RETENTION)
        return None if retention is None else empty_group(group, retention, now)
    # Stable (every other state was skipped above)
    retention = rules.get(RuleName.UNSUBSCRIBED_OFFSET_RETENTION)
    if retention is None:
        return None
    if group.kind is GroupKind.SHARE:
        return share_unsubscribed_state(group, retention, now)
    if group.kind is GroupKind.CLASSIC and group.protocol_type != CONSUMER_PROTOCOL:
        # Non-consumer protocols (connect, ...) have opaque member metadata: the broker itself never
        # expires their offsets while the group is active, and neither do we.
        protocol = group.protocol_type or "(none)"
        detail = (
            f"classic group with protocol type {protocol!r} is {group.state.value}: offsets are not touched"
        )
        return _skip(group, SkipReason.NON_CONSUMER_PROTOCOL, detail)
    return unsubscribed_offsets(group, retention, now)


def _skip(group: GroupFacts, reason: SkipReason, detail: str) -> Skip:
    return Skip(group.group_id, reason, detail, group.kind)


def _state_skip(group: GroupFacts) -> Skip | None:
    if group.state in REBALANCING_STATES:
        return _skip(group, SkipReason.REBALANCING, f"group is {group.state.value}")
    if group.state is GroupState.DEAD:
        return _skip(group, SkipReason.DEAD, "group is Dead (being removed or not describable)")
    if group.state is GroupState.UNKNOWN:
        return _skip(group, SkipReason.UNKNOWN_STATE, "group state is unknown")
    return None


def empty_group(group: GroupFacts, retention: timedelta, now: datetime) -> Verdict:
    """emptyGroupRetention: base = Empty-since, or the last commit when that is later (KIP-211).

    The broker uses currentStateTimestamp for an Empty classic group; a commit after it (an admin
    resetting offsets) means someone still cares, so we take the later of the two. Without an
    Empty-since time the base is the last commit, and then every partition's commit time must be
    known (an unknown one could be the latest).

    Mirrored on numpy columns for the fleet audit's common shapes by `fleet/columnar_rules.py`
    (`verdicts`): a change here must be made there too (DESIGN.md, "Fast paths and their oracle";
    tests/unit/fleet/test_fleet_columnar.py holds them equal).
    """
    rule = RuleName.EMPTY_GROUP_RETENTION
    # A share group has no commits: its clock is when its share-partition start offsets last
    # changed (first observed), and the broker itself never expires it (ShareGroup.shouldExpire).
    change = "share-partition start offset change" if group.kind is GroupKind.SHARE else "offset commit"
    known = [o.committed_at for o in group.offsets if o.committed_at is not None]
    unknown = len(group.offsets) - len(known)
    last_commit = max(known, key=lambda t: t.at) if known else None
    empty_since = group.empty_since
    if empty_since is not None:
        if last_commit is not None and last_commit.at > empty_since.at:
            base = last_commit
            basis = (
                f"last {change} {{age}} ago ({describe_time(last_commit)}), "
                f"after it became Empty at {to_rfc3339(empty_since.at)}"
            )
        else:
            base = empty_since
            basis = f"Empty for {{age}} (since {describe_time(empty_since)})"
    elif unknown:
        detail = (
            f"Empty-since time unknown and {counted(unknown, 'partition')} "
            f"{'has' if unknown == 1 else 'have'} no known commit time"
        )
        return _skip(group, SkipReason.NO_TIMESTAMP, detail)
    elif last_commit is not None:
        base = last_commit
        basis = f"Empty-since time unknown; last {change} {{age}} ago ({describe_time(last_commit)})"
    else:
        return _skip(
            group, SkipReason.NO_TIMESTAMP, "neither the Empty-since time nor any commit time is known"
        )
    if now - base.at < retention:
        return None

    return GroupDeletionCandidate(group, rule, retention, base, basis=basis)


def unsubscribed_offsets(group: GroupFacts, retention: timedelta, now: datetime) -> Verdict:
    """unsubscribedOffsetRetention for a Stable classic-`consumer`, KIP-848 or streams group (KIP-496).
    A streams group's subscription is its current topology's source topics, internal repartition
    topics included (the broker's `StreamsGroup.isSubscribedToTopic`), so their offsets stay.

    Only partitions of topics no member subscribes to, each by its own last commit time; a partition
    without a known commit time is never eligible. Unknown subscriptions: nothing (the broker answers
    GROUP_SUBSCRIBED_TO_TOPIC for subscribed topics, but we never rely on that).
    """
    cutoff = now - retention  # committed at or before the cutoff = old enough
    old = [
        PartitionCandidate(o.partition, o.committed_at)
        for o in group.offsets
        if o.committed_at is not None and o.committed_at.at <= cutoff
    ]
    if group.subscribed_topics is None:
        if not old:
            return None
        detail = (
            f"{counted(len(old), 'partition')} {'was' if len(old) == 1 else 'were'} last committed "
            f">= {format_duration(retention)} ago, "
            "but the group's subscriptions are unknown"
        )
        return _skip(group, SkipReason.SUBSCRIPTIONS_UNKNOWN, detail)
    subscribed = group.subscribed_topics
    eligible = tuple(
        sorted((c for c in old if c.partition.topic not in subscribed), key=lambda c: c.partition)
    )
    if not eligible:
        return None
    return OffsetDeletionCandidate(group, RuleName.UNSUBSCRIBED_OFFSET_RETENTION, retention, eligible)


def share_unsubscribed_state(group: GroupFacts, retention: timedelta, now: datetime) -> Verdict:
    """unsubscribedOffsetRetention on a Stable share group: the broker's rule differs from KIP-496.
    DeleteShareGroupOffsets (API 92) answers NON_EMPTY_GROUP while the group has members, even for a
    topic no member subscribes to (seen on Kafka 4.3.1), so such state can only go with the group
    (emptyGroupRetention once it is Empty). Reported when old enough, never planned."""
    if group.subscribed_topics is None:
        return None
    cutoff = now - retention
    old = sorted(
        o.partition
        for o in group.offsets
        if o.partition.topic not in group.subscribed_topics
        and o.committed_at is not None
        and o.committed_at.at <= cutoff
    )
    if not old:
        return None
    topics = sorted({tp.topic for tp in old})
    detail = (
        f"{plural(len(old), 'share partition')} of unsubscribed topics ({', '.join(topics[:5])}"
        f"{f' and {len(topics) - 5} more' if len(topics) > 5 else ''}) unchanged for >= "
        f"{format_duration(retention)}; the broker removes share-partition state only from an Empty "
        "share group (DeleteShareGroupOffsets answers NON_EMPTY_GROUP), so it goes with the group "
        "under emptyGroupRetention"
    )
    return Skip(group.group_id, SkipReason.BROKER_REQUIRES_EMPTY, detail, group.kind, tuple(old))


def simple_group_offsets(group: GroupFacts, retention: timedelta, now: datetime) -> Verdict:
    """simpleGroupOffsetRetention: each partition by its last commit, as the broker does for groups
    without a protocol type. When every partition is eligible the group goes (DeleteGroups), like
    the broker removing an Empty group whose last offset expired.

    Mirrored on numpy columns for the fleet audit's common shapes by `fleet/columnar_rules.py`
    (`verdicts`): a change here must be made there too (DESIGN.md, "Fast paths and their oracle";
    tests/unit/fleet/test_fleet_columnar.py holds them equal).
    """
    rule = RuleName.SIMPLE_GROUP_OFFSET_RETENTION
    if not group.offsets:
        if group.empty_since is None:
            return _skip(group, SkipReason.NO_TIMESTAMP, "simple group without offsets or Empty-since time")
        empty_since = group.empty_since
        age = now - empty_since.at
        if age < retention:
            return None
        return GroupDeletionCandidate(group, rule, retention, empty_since)
    dated = [(o.partition, at) for o in group.offsets if (at := o.committed_at) is not None]
    if not dated:
        return _skip(group, SkipReason.NO_TIMESTAMP, "no partition of this group has a known commit time")
    cutoff = now - retention
    old = [(partition, at) for partition, at in dated if at.at <= cutoff]
    if not old:
        return None
    if len(old) == len(group.offsets):
        # Every partition: the group goes. Its partitions are derived from the facts when asked
        # (rarely: an overlapping policy allowing only some), not built for every eligible group.
        latest = max((at for _, at in old), key=_at)
        return GroupDeletionCandidate(group, rule, retention, latest, every_partition=True)
    eligible = tuple(sorted((PartitionCandidate(p, at) for p, at in old), key=_by_partition))
    return OffsetDeletionCandidate(group, rule, retention, eligible)


def _by_partition(candidate: PartitionCandidate) -> TopicPartition:
    return candidate.partition


def _at(time: SourcedTime) -> datetime:
    return time.at


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def offsets_reason(
    candidate: OffsetDeletionCandidate, partitions: tuple[PartitionCandidate, ...], now: datetime
) -> str:
    """The reason sentence for a DeleteOffsets action over `partitions` (a subset after limits)."""
    latest = max((p.committed_at for p in partitions), key=lambda t: t.at)
    topics = sorted({p.partition.topic for p in partitions})
    shown_topics = ", ".join(topics[:5]) + (f" and {len(topics) - 5} more" if len(topics) > 5 else "")
    clock = f"last committed {format_age(now - latest.at)} ago or earlier (latest {describe_time(latest)})"
    limit = f"{candidate.rule.value} {format_duration(candidate.retention)}"
    if candidate.rule is RuleName.UNSUBSCRIBED_OFFSET_RETENTION:
        what = f"{plural(len(partitions), 'partition')} of unsubscribed topics ({shown_topics})"
    else:
        total = plural(len(candidate.group.offsets), "partition")
        what = f"simple group: {len(partitions)} of {total} ({shown_topics})"
    return f"{what} {clock} >= {limit}"
