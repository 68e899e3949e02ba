"""Safety invariants of the engine over arbitrary snapshots and policies (hypothesis)."""

from __future__ import annotations

import fnmatch
from collections import Counter
from datetime import datetime, timedelta
from fractions import Fraction

import pytest
from core_factories import NOW, manifest, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.core.decide_many import decide_many
from groupwarden.core.engine import decide
from groupwarden.core.plan import ActionKind, Plan, SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, RuleName, parse_policy
from groupwarden.core.rules import REBALANCING_STATES
from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
    TimestampSource,
    TopicPartition,
)

pytestmark = pytest.mark.unit

TOPICS = ["a", "b", "c"]
GROUP_IDS = ["ci-1", "ci-2", "ci-keep-1", "CI-3", "tmp-a", "tmp-bb", "svc", "svc-x", "s[1]", "x"]
PATTERNS = ["*", "ci-*", "ci-keep-*", "tmp-?", "s*", "[cs]*", "*-[0-9]", "svc", "[!c]*"]
DURATIONS = ["1s", "1h", "12h", "1d", "3d", "7d", "30d"]

# Ages around the retentions above (on, just before and just after the boundaries), mostly old,
# plus arbitrary ones; negative ages are clock skew (a time after `now`).
_DAY = 86400
_AGES = [
    -_DAY,
    0,
    1,
    3600,
    3599,
    12 * 3600,
    _DAY - 1,
    _DAY,
    _DAY + 1,
    3 * _DAY,
    7 * _DAY,
    8 * _DAY,
    30 * _DAY,
    40 * _DAY,
]
ages = (
    st.sampled_from(_AGES)
    | st.sampled_from(_AGES[-6:])
    | st.integers(min_value=-2 * _DAY, max_value=40 * _DAY)
)
times = ages.map(lambda seconds: NOW - timedelta(seconds=seconds))
sourced_times = st.builds(SourcedTime, times, st.sampled_from(list(TimestampSource)))
maybe_times = st.one_of(sourced_times, sourced_times, sourced_times, st.none())

old_times = st.sampled_from(_AGES[-5:]).map(lambda seconds: NOW - timedelta(seconds=seconds))


def offset_lists_at(
    moments: st.SearchStrategy[datetime], min_size: int = 0
) -> st.SearchStrategy[tuple[CommittedOffset, ...]]:
    stamped = st.builds(SourcedTime, moments, st.sampled_from(list(TimestampSource)))
    committed = st.builds(
        CommittedOffset,
        partition=st.builds(TopicPartition, st.sampled_from(TOPICS), st.integers(0, 2)),
        offset=st.integers(0, 100),
        committed_at=st.one_of(stamped, stamped, stamped, st.none()),
        expire_at=st.none() | times,
    )
    return st.lists(committed, min_size=min_size, max_size=4, unique_by=lambda o: o.partition).map(tuple)


offset_lists = offset_lists_at(times)
old_offset_lists = offset_lists_at(old_times, min_size=1)
old_sourced_times = st.builds(SourcedTime, old_times, st.sampled_from(list(TimestampSource)))

# Anything goes, including facts that contradict each other (Empty with members, ...).
arbitrary_groups = st.builds(
    GroupFacts,
    group_id=st.sampled_from(GROUP_IDS),
    kind=st.sampled_from(list(GroupKind)),
    state=st.sampled_from(list(GroupState)),
    protocol_type=st.sampled_from(["consumer", "connect", ""]),
    member_count=st.integers(0, 3),
    subscribed_topics=st.none() | st.frozensets(st.sampled_from(TOPICS)),
    empty_since=maybe_times,
    offsets=offset_lists,
    error=st.none() | st.just("GROUP_AUTHORIZATION_FAILED"),
)


_MEMBER_KINDS = st.sampled_from(
    [GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE, GroupKind.SHARE, GroupKind.STREAMS]
)
_MEMBER_STATES = st.sampled_from([GroupState.EMPTY] * 3 + [GroupState.STABLE] * 3 + list(GroupState))
_CLASSIC_PROTOCOLS = st.sampled_from(["consumer"] * 4 + ["connect"])
_SUBSCRIPTIONS = st.one_of(
    st.none(),
    st.frozensets(st.sampled_from(TOPICS)),
    st.sampled_from([frozenset({"a"}), frozenset({"b"}), frozenset({"a", "c"})]),
)
_IDS = st.sampled_from(GROUP_IDS)
_MEMBER_COUNTS = st.integers(1, 3)
_EMPTY_SINCE = {True: st.none() | old_sourced_times, False: st.none() | sourced_times}
_OFFSETS = {True: old_offset_lists, False: offset_lists_at(times, min_size=1)}


@st.composite
def plausible_groups(draw: st.DrawFn) -> GroupFacts:
    """Groups as a gateway would report them, biased towards the ones rules act on."""
    kind = draw(_MEMBER_KINDS)
    stale = draw(st.booleans())  # a stale group (everything old), or anything
    if kind is GroupKind.SIMPLE:
        state, protocol, subscribed = GroupState.EMPTY, "", None
    else:
        state = draw(_MEMBER_STATES)
        protocol = {
            GroupKind.CONSUMER: "consumer",
            GroupKind.SHARE: "share",
            GroupKind.STREAMS: "streams",
        }.get(kind) or draw(_CLASSIC_PROTOCOLS)
        subscribed = draw(_SUBSCRIPTIONS)
    empty = state is GroupState.EMPTY
    return GroupFacts(
        group_id=draw(_IDS),
        kind=kind,
        state=state,
        protocol_type=protocol,
        member_count=0 if empty else draw(_MEMBER_COUNTS),
        subscribed_topics=frozenset() if empty else subscribed,
        empty_since=draw(_EMPTY_SINCE[stale]) if empty and kind is not GroupKind.SIMPLE else None,
        offsets=draw(_OFFSETS[stale]),
    )


group_facts = st.one_of(plausible_groups(), plausible_groups(), plausible_groups(), arbitrary_groups)

snapshots = st.builds(
    lambda groups, log: snapshot(*groups, offsets_log=log),
    st.lists(group_facts, max_size=8, unique_by=lambda g: g.group_id),
    st.booleans(),
)


def mostly(usual: list[str], other: st.SearchStrategy[list[str]]) -> st.SearchStrategy[list[str]]:
    return st.one_of(st.just(usual), st.just(usual), other)


_DURATION_OR_OFF = st.sampled_from([None, *DURATIONS, *DURATIONS])
_INCLUDES = mostly(["*"], st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3))
_EXCLUDES = mostly([], st.lists(st.sampled_from(PATTERNS[1:]), max_size=2))
_ALL_TYPES = ["classic", "consumer", "simple"]
# `share` and `streams` are never in the default; a policy names them.
_GROUP_TYPES = mostly(
    _ALL_TYPES, st.lists(st.sampled_from([*_ALL_TYPES, "share", "streams"]), min_size=1, unique=True)
)
_MODES = st.sampled_from(["DryRun", "Enforce"])
_RATIOS = st.sampled_from([0.1, 0.25, 0.5, 0.75, 1.0, 1.0, 1.0])


@st.composite
def policies(draw: st.DrawFn, name: str = "p") -> ConsumerGroupPolicy:
    rules = {rule.value: duration for rule in RuleName if (duration := draw(_DURATION_OR_OFF)) is not None}
    document = manifest(
        rules,
        name=name,
        include=draw(_INCLUDES),
        exclude=draw(_EXCLUDES),
        group_types=draw(_GROUP_TYPES),
        mode=draw(_MODES),
        suspend=draw(st.booleans()),
        limits={
            "maxGroupDeletionsPerRun": draw(st.integers(0, 6)),
            "maxOffsetDeletionsPerRun": draw(st.integers(0, 12)),
            "maxDeletionRatio": draw(_RATIOS),
        },
    )
    return parse_policy(document)


def groups_by_id(snap: ClusterSnapshot) -> dict[str, GroupFacts]:
    return {g.group_id: g for g in snap.groups}


def selected(policy: ConsumerGroupPolicy, facts: GroupFacts) -> bool:
    """An independent re-statement of selection (fnmatchcase), to check the engine against."""
    selector = policy.spec.selector
    return (
        facts.kind.value in {t.value for t in selector.group_types}
        and any(fnmatch.fnmatchcase(facts.group_id, p) for p in selector.include)
        and not any(fnmatch.fnmatchcase(facts.group_id, p) for p in selector.exclude)
    )


def check_safety(policy: ConsumerGroupPolicy, snap: ClusterSnapshot, plan: Plan) -> None:
    facts_by_id = groups_by_id(snap)
    rules = policy.spec.rules.enabled()
    limits = policy.spec.limits
    acted_on = [a.group_id for a in plan.actions]
    assert len(acted_on) == len(set(acted_on)), "at most one action per group"
    for action in plan.actions:
        facts = facts_by_id[action.group_id]
        # only selected, supported, describable groups in a settled state
        assert selected(policy, facts)
        assert facts.kind in (
            GroupKind.CLASSIC,
            GroupKind.CONSUMER,
            GroupKind.SIMPLE,
            GroupKind.SHARE,
            GroupKind.STREAMS,
        )
        if facts.kind is GroupKind.SHARE:
            # the broker removes share state only with an Empty group: never an offsets action
            assert (action.kind, action.rule) == (ActionKind.DELETE_GROUP, RuleName.EMPTY_GROUP_RETENTION)
        assert facts.error is None
        assert facts.state not in REBALANCING_STATES
        assert facts.state not in (GroupState.DEAD, GroupState.UNKNOWN)
        assert action.group_kind is facts.kind
        # later is always safe, earlier never: the clock ran at least the rule's retention
        assert action.retention == rules[action.rule]
        assert action.age >= action.retention
        assert action.eligible_since <= NOW - action.retention
        if action.kind is ActionKind.DELETE_GROUP:
            assert facts.state is GroupState.EMPTY and facts.member_count == 0, (
                "never delete a non-Empty group"
            )
            assert action.partitions == ()
            if action.rule is RuleName.EMPTY_GROUP_RETENTION:
                assert facts.kind is not GroupKind.SIMPLE
                if facts.empty_since is not None:
                    assert action.eligible_since >= facts.empty_since.at
                known = [o.committed_at.at for o in facts.offsets if o.committed_at is not None]
                assert all(action.eligible_since >= at for at in known), "a later commit delays deletion"
            else:
                assert facts.kind is GroupKind.SIMPLE
                assert all(o.committed_at is not None for o in facts.offsets)
        else:
            assert action.partitions, "no empty DeleteOffsets"
            assert len(set(action.partitions)) == len(action.partitions)
            if facts.kind is not GroupKind.SIMPLE:
                assert facts.subscribed_topics is not None, "never DeleteOffsets with unknown subscriptions"
                assert facts.state is GroupState.STABLE
                assert (
                    facts.kind in (GroupKind.CONSUMER, GroupKind.STREAMS) or facts.protocol_type == "consumer"
                )
                for partition in action.partitions:
                    assert partition.topic not in facts.subscribed_topics, "never a subscribed topic"
            commits = {o.partition: o.committed_at for o in facts.offsets}
            for partition in action.partitions:
                committed_at = commits[partition]
                assert committed_at is not None, "unknown commit time is never eligible"
                assert NOW - committed_at.at >= action.retention
    summary = plan.summary
    assert summary.groups_planned <= limits.max_group_deletions_per_run
    assert summary.offsets_planned <= limits.max_offset_deletions_per_run
    assert summary.groups_matched == sum(1 for f in snap.groups if selected(policy, f))
    ratio = Fraction(str(limits.max_deletion_ratio))
    tripped = summary.groups_eligible > ratio * summary.groups_matched
    assert summary.blast_radius_exceeded is tripped
    if tripped:
        assert plan.actions == ()
    for skip in plan.skipped:
        facts = facts_by_id[skip.group_id]
        assert selected(policy, facts) or (
            facts.kind not in (GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE)
            and any(fnmatch.fnmatchcase(facts.group_id, p) for p in policy.spec.selector.include)
            and not any(fnmatch.fnmatchcase(facts.group_id, p) for p in policy.spec.selector.exclude)
        )


@settings(max_examples=250)
@given(policies(), snapshots)
def test_safety_invariants(policy: ConsumerGroupPolicy, snap: ClusterSnapshot) -> None:
    check_safety(policy, snap, decide(policy, snap, NOW))


@settings(max_examples=100)
@given(policies(), snapshots)
def test_every_eligible_item_is_planned_or_deferred(
    policy: ConsumerGroupPolicy, snap: ClusterSnapshot
) -> None:
    plan = decide(policy, snap, NOW)
    deferred = [
        s
        for s in plan.skipped
        if s.reason_code in (SkipReason.LIMIT_REACHED, SkipReason.BLAST_RADIUS_EXCEEDED)
    ]
    summary = plan.summary
    assert summary.groups_eligible == summary.groups_planned + sum(1 for s in deferred if not s.partitions)
    assert summary.offsets_eligible == summary.offsets_planned + sum(len(s.partitions) for s in deferred)
    assert summary.skipped == len(plan.skipped)


@settings(max_examples=60)
@given(policies(), snapshots, st.randoms(use_true_random=False))
def test_decide_is_deterministic(policy: ConsumerGroupPolicy, snap: ClusterSnapshot, random: object) -> None:
    plan = decide(policy, snap, NOW)
    assert decide(policy, snap, NOW) == plan
    shuffled = list(snap.groups)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    assert decide(policy, snapshot(*shuffled, offsets_log=snap.offsets_log_available), NOW) == plan


@settings(max_examples=150)
@given(policies(name="p1"), policies(name="p2"), policies(name="p3"), snapshots)
def test_overlap_merge_is_conservative(
    first: ConsumerGroupPolicy, second: ConsumerGroupPolicy, third: ConsumerGroupPolicy, snap: ClusterSnapshot
) -> None:
    policies_ = [first, second, third]
    merged = decide_many(policies_, snap, NOW)
    alone = {p.ref: decide(p.model_copy(update={}), snap, NOW) for p in policies_}
    facts_by_id = groups_by_id(snap)
    for policy, plan in zip(policies_, merged, strict=True):
        check_safety(policy, snap, plan)
        own = alone[policy.ref]
        assert plan.summary.groups_eligible == own.summary.groups_eligible
        assert plan.summary.blast_radius_exceeded == own.summary.blast_radius_exceeded
        for action in plan.actions:
            facts = facts_by_id[action.group_id]
            for other in policies_:
                if other is policy or not selected(other, facts):
                    continue
                # every other selecting policy allows it: Enforce, not suspended, breaker closed ...
                assert other.spec.mode is Mode.ENFORCE and not other.spec.suspend
                other_plan = alone[other.ref]
                assert not other_plan.summary.blast_radius_exceeded
                # ... and finds the same items eligible under its own rules (before its own limits)
                other_items = _eligible_items(other_plan)
                if action.kind is ActionKind.DELETE_GROUP:
                    assert (action.group_id, None) in other_items
                else:
                    for partition in action.partitions:
                        assert {(action.group_id, None), (action.group_id, partition)} & other_items


def _eligible_items(plan: Plan) -> set[tuple[str, TopicPartition | None]]:
    """Everything a plan found eligible, planned or deferred (group deletions as (id, None))."""
    items: set[tuple[str, TopicPartition | None]] = set()
    for action in plan.actions:
        if action.kind is ActionKind.DELETE_GROUP:
            items.add((action.group_id, None))
        items.update((action.group_id, p) for p in action.partitions)
    for skip in plan.skipped:
        if skip.reason_code is SkipReason.LIMIT_REACHED:
            if not skip.partitions:
                items.add((skip.group_id, None))
            items.update((skip.group_id, p) for p in skip.partitions)
    return items


def test_the_generators_reach_every_kind_of_action() -> None:
    """The invariants above are not vacuous: the strategies produce each kind of action and skip.

    Hypothesis also draws constants from the source of every imported module, so what a fixed seed
    generates depends on which modules the session imported: enough examples that every kind shows
    up whatever else the suite loads."""
    seen: Counter[str] = Counter()

    @settings(max_examples=600, derandomize=True, database=None)
    @given(policies(), snapshots)
    def collect(policy: ConsumerGroupPolicy, snap: ClusterSnapshot) -> None:
        plan = decide(policy, snap, NOW)
        seen.update(f"{a.kind.value}/{a.rule.value}" for a in plan.actions)
        seen.update(s.reason_code.value for s in plan.skipped)

    collect()
    expected = {
        "DeleteGroup/emptyGroupRetention",
        "DeleteGroup/simpleGroupOffsetRetention",
        "DeleteOffsets/unsubscribedOffsetRetention",
        "DeleteOffsets/simpleGroupOffsetRetention",
        SkipReason.LIMIT_REACHED.value,
        SkipReason.BLAST_RADIUS_EXCEEDED.value,
        SkipReason.SUBSCRIPTIONS_UNKNOWN.value,
        SkipReason.NO_TIMESTAMP.value,
    }
    assert expected <= seen.keys(), seen
