"""Table-driven tests of `decide`: one group, one rule set, one expected verdict per row."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest
from core_factories import NOW, ago, group, logged, observed, offset, policy, snapshot, tp

from groupwarden.core.engine import OBSERVED_TIMES_WARNING, decide
from groupwarden.core.plan import ActionKind, Plan, SkipReason
from groupwarden.core.policy import RuleName
from groupwarden.core.snapshot import GroupFacts, GroupKind, GroupState, SourcedTime, TopicPartition

pytestmark = pytest.mark.unit

CLASSIC, CONSUMER, SIMPLE = GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE
EMPTY, STABLE = GroupState.EMPTY, GroupState.STABLE
EMPTY_RULE = {"emptyGroupRetention": "1d"}
UNSUBSCRIBED_RULE = {"unsubscribedOffsetRetention": "1d"}
SIMPLE_RULE = {"simpleGroupOffsetRetention": "1d"}
ALL_RULES = {**EMPTY_RULE, **UNSUBSCRIBED_RULE, **SIMPLE_RULE}


@dataclass(frozen=True)
class DeleteGroup:
    since: SourcedTime


@dataclass(frozen=True)
class DeleteOffsets:
    partitions: tuple[TopicPartition, ...]
    since: SourcedTime


@dataclass(frozen=True)
class Skipped:
    reason: SkipReason


Expected = DeleteGroup | DeleteOffsets | Skipped | None

# fixed times, so expectations can name them
T_3D, T_2D, T_12H = logged(days=3), logged(days=2), logged(hours=12)
O_3D = observed(days=3)
T_EXACT = logged(days=1)

CASES: list[tuple[str, GroupFacts, dict[str, str], Expected]] = [
    # --- emptyGroupRetention: base = Empty-since, or a later commit ---------------------------------
    ("empty classic, Empty-since old", group("g", empty_since=T_2D), EMPTY_RULE, DeleteGroup(T_2D)),
    (
        "empty classic, exactly the retention",
        group("g", empty_since=T_EXACT),
        EMPTY_RULE,
        DeleteGroup(T_EXACT),
    ),
    ("empty classic, Empty-since young", group("g", empty_since=T_12H), EMPTY_RULE, None),
    (
        "empty classic, earlier commit: base stays Empty-since",
        group("g", empty_since=T_2D, offsets=[offset("t", 0, T_3D)]),
        EMPTY_RULE,
        DeleteGroup(T_2D),
    ),
    (
        "empty classic, later old commit: base is the commit",
        group("g", empty_since=T_3D, offsets=[offset("t", 0, T_2D)]),
        EMPTY_RULE,
        DeleteGroup(T_2D),
    ),
    (
        "empty classic, recent commit after Empty (offsets reset): not yet",
        group("g", empty_since=T_3D, offsets=[offset("t", 0, T_12H)]),
        EMPTY_RULE,
        None,
    ),
    (
        "empty classic, Empty-since known, unknown commit time ignored (broker uses Empty-since)",
        group("g", empty_since=T_2D, offsets=[offset("t", 0, None)]),
        EMPTY_RULE,
        DeleteGroup(T_2D),
    ),
    (
        "empty classic, Empty-since unknown: last commit",
        group("g", offsets=[offset("t", 0, T_3D), offset("t", 1, T_2D)]),
        EMPTY_RULE,
        DeleteGroup(T_2D),
    ),
    (
        "empty classic, Empty-since unknown, one commit time unknown",
        group("g", offsets=[offset("t", 0, T_3D), offset("t", 1, None)]),
        EMPTY_RULE,
        Skipped(SkipReason.NO_TIMESTAMP),
    ),
    ("empty classic, nothing known", group("g"), EMPTY_RULE, Skipped(SkipReason.NO_TIMESTAMP)),
    ("empty classic, observed times", group("g", empty_since=O_3D), EMPTY_RULE, DeleteGroup(O_3D)),
    (
        "empty classic, Empty-since in the future (clock skew)",
        group("g", empty_since=SourcedTime(NOW + timedelta(days=2), logged().source)),
        EMPTY_RULE,
        None,
    ),
    ("empty connect group", group("g", protocol="connect", empty_since=T_2D), EMPTY_RULE, DeleteGroup(T_2D)),
    ("empty KIP-848 group", group("g", kind=CONSUMER, empty_since=T_2D), EMPTY_RULE, DeleteGroup(T_2D)),
    (
        "empty with members contradicts itself",
        group("g", empty_since=T_2D, members=1),
        EMPTY_RULE,
        Skipped(SkipReason.UNEXPECTED_STATE),
    ),
    ("stable classic, only the empty rule", group("g", state=STABLE, subscribed=["t"]), EMPTY_RULE, None),
    (
        "simple group, only the empty rule",
        group("g", kind=SIMPLE, offsets=[offset("t", 0, T_3D)]),
        EMPTY_RULE,
        None,
    ),
    ("empty classic, only the simple rule", group("g", empty_since=T_3D), SIMPLE_RULE, None),
    ("empty classic, only the unsubscribed rule", group("g", empty_since=T_3D), UNSUBSCRIBED_RULE, None),
    # --- states that are never acted on ---------------------------------------------------------------
    *[
        (f"classic {state.value}", group("g", state=state, empty_since=T_3D), ALL_RULES, Skipped(reason))
        for state, reason in [
            (GroupState.PREPARING_REBALANCE, SkipReason.REBALANCING),
            (GroupState.COMPLETING_REBALANCE, SkipReason.REBALANCING),
            (GroupState.DEAD, SkipReason.DEAD),
            (GroupState.UNKNOWN, SkipReason.UNKNOWN_STATE),
        ]
    ],
    *[
        (
            f"KIP-848 {state.value}",
            group("g", kind=CONSUMER, state=state, subscribed=[]),
            ALL_RULES,
            Skipped(reason),
        )
        for state, reason in [
            (GroupState.ASSIGNING, SkipReason.REBALANCING),
            (GroupState.RECONCILING, SkipReason.REBALANCING),
            (GroupState.DEAD, SkipReason.DEAD),
            (GroupState.UNKNOWN, SkipReason.UNKNOWN_STATE),
        ]
    ],
    (
        "rebalancing group with no applicable rule is not reported",
        group("g", state=GroupState.PREPARING_REBALANCE),
        SIMPLE_RULE,
        None,
    ),
    # --- unsubscribedOffsetRetention ------------------------------------------------------------------
    (
        "stable classic: only old partitions of unsubscribed topics",
        group(
            "g",
            state=STABLE,
            subscribed=["a"],
            offsets=[
                offset("a", 0, T_3D),  # subscribed: never
                offset("b", 0, T_3D),
                offset("b", 1, T_12H),  # too young
                offset("c", 0, None),  # commit time unknown: never
                offset("d", 2, T_2D),
            ],
        ),
        UNSUBSCRIBED_RULE,
        DeleteOffsets((tp("b", 0), tp("d", 2)), T_2D),
    ),
    (
        "stable classic: everything subscribed",
        group("g", state=STABLE, subscribed=["a", "b"], offsets=[offset("a", 0, T_3D), offset("b", 0, T_3D)]),
        UNSUBSCRIBED_RULE,
        None,
    ),
    (
        "stable classic: subscriptions unknown, old offsets",
        group("g", state=STABLE, subscribed=None, offsets=[offset("a", 0, T_3D)]),
        UNSUBSCRIBED_RULE,
        Skipped(SkipReason.SUBSCRIPTIONS_UNKNOWN),
    ),
    (
        "stable classic: subscriptions unknown, only young offsets",
        group("g", state=STABLE, subscribed=None, offsets=[offset("a", 0, T_12H)]),
        UNSUBSCRIBED_RULE,
        None,
    ),
    (
        "stable connect group: opaque, never its offsets",
        group("g", state=STABLE, protocol="connect", subscribed=[], offsets=[offset("a", 0, T_3D)]),
        UNSUBSCRIBED_RULE,
        Skipped(SkipReason.NON_CONSUMER_PROTOCOL),
    ),
    (
        "stable KIP-848 group: unsubscribed old partitions",
        group(
            "g",
            kind=CONSUMER,
            state=STABLE,
            subscribed=["a"],
            offsets=[offset("a", 0, T_3D), offset("z", 1, O_3D)],
        ),
        UNSUBSCRIBED_RULE,
        DeleteOffsets((tp("z", 1),), O_3D),
    ),
    (
        "stable KIP-848 group: subscriptions unknown (unresolved regex)",
        group("g", kind=CONSUMER, state=STABLE, subscribed=None, offsets=[offset("z", 1, T_3D)]),
        UNSUBSCRIBED_RULE,
        Skipped(SkipReason.SUBSCRIPTIONS_UNKNOWN),
    ),
    (
        "stable group with no subscriptions at all: every old offset is unsubscribed",
        group("g", state=STABLE, subscribed=[], offsets=[offset("a", 0, T_3D)]),
        UNSUBSCRIBED_RULE,
        DeleteOffsets((tp("a", 0),), T_3D),
    ),
    # --- simpleGroupOffsetRetention -------------------------------------------------------------------
    (
        "simple: every partition old -> the group goes",
        group("g", kind=SIMPLE, offsets=[offset("a", 0, T_3D), offset("a", 1, T_2D)]),
        SIMPLE_RULE,
        DeleteGroup(T_2D),
    ),
    (
        "simple: some partitions old -> those offsets",
        group("g", kind=SIMPLE, offsets=[offset("a", 0, T_3D), offset("a", 1, T_12H), offset("b", 0, T_2D)]),
        SIMPLE_RULE,
        DeleteOffsets((tp("a", 0), tp("b", 0)), T_2D),
    ),
    (
        "simple: unknown commit time keeps the group",
        group("g", kind=SIMPLE, offsets=[offset("a", 0, T_3D), offset("a", 1, None)]),
        SIMPLE_RULE,
        DeleteOffsets((tp("a", 0),), T_3D),
    ),
    (
        "simple: no commit time known",
        group("g", kind=SIMPLE, offsets=[offset("a", 0, None)]),
        SIMPLE_RULE,
        Skipped(SkipReason.NO_TIMESTAMP),
    ),
    ("simple: all young", group("g", kind=SIMPLE, offsets=[offset("a", 0, T_12H)]), SIMPLE_RULE, None),
    (
        "simple: an explicit earlier expireTimestamp does not make it eligible sooner",
        group("g", kind=SIMPLE, offsets=[offset("a", 0, T_12H, expire_at=ago(hours=11))]),
        SIMPLE_RULE,
        None,
    ),
    (
        "simple: an explicit later expireTimestamp does not keep it longer (the rule is shorter)",
        group("g", kind=SIMPLE, offsets=[offset("a", 0, T_3D, expire_at=NOW + timedelta(days=30))]),
        SIMPLE_RULE,
        DeleteGroup(T_3D),
    ),
    (
        "simple: no offsets, old Empty-since",
        group("g", kind=SIMPLE, empty_since=T_2D),
        SIMPLE_RULE,
        DeleteGroup(T_2D),
    ),
    (
        "simple: no offsets, nothing known",
        group("g", kind=SIMPLE),
        SIMPLE_RULE,
        Skipped(SkipReason.NO_TIMESTAMP),
    ),
    (
        "simple group reported Stable contradicts itself",
        group("g", kind=SIMPLE, state=STABLE, offsets=[offset("a", 0, T_3D)]),
        SIMPLE_RULE,
        Skipped(SkipReason.UNEXPECTED_STATE),
    ),
    (
        "simple group Dead",
        group("g", kind=SIMPLE, state=GroupState.DEAD, offsets=[offset("a", 0, T_3D)]),
        SIMPLE_RULE,
        Skipped(SkipReason.DEAD),
    ),
    # --- groups that are never touched ----------------------------------------------------------------
    (
        "share group",
        group("g", kind=GroupKind.SHARE, empty_since=T_3D),
        ALL_RULES,
        Skipped(SkipReason.UNSUPPORTED_GROUP_TYPE),
    ),
    (
        "streams group",
        group("g", kind=GroupKind.STREAMS, empty_since=T_3D),
        ALL_RULES,
        Skipped(SkipReason.UNSUPPORTED_GROUP_TYPE),
    ),
    (
        "unknown kind",
        group("g", kind=GroupKind.UNKNOWN, empty_since=T_3D),
        ALL_RULES,
        Skipped(SkipReason.UNSUPPORTED_GROUP_TYPE),
    ),
    (
        "describe failed",
        group("g", empty_since=T_3D, error="GROUP_AUTHORIZATION_FAILED"),
        ALL_RULES,
        Skipped(SkipReason.DESCRIBE_FAILED),
    ),
    (
        "describe failed, kind unknown",
        group("g", kind=GroupKind.UNKNOWN, error="COORDINATOR_NOT_AVAILABLE"),
        ALL_RULES,
        Skipped(SkipReason.DESCRIBE_FAILED),
    ),
    ("no rules at all", group("g", empty_since=T_3D), {}, None),
]


def verdict(plan: Plan) -> Expected:
    assert len(plan.actions) + len(plan.skipped) <= 1, plan
    if plan.skipped:
        return Skipped(plan.skipped[0].reason_code)
    if not plan.actions:
        return None
    action = plan.actions[0]
    since = SourcedTime(action.eligible_since, action.timestamp_source)
    assert action.age == NOW - action.eligible_since
    if action.kind is ActionKind.DELETE_GROUP:
        assert action.partitions == ()
        return DeleteGroup(since)
    return DeleteOffsets(action.partitions, since)


@pytest.mark.parametrize(("facts", "rules", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decide_one_group(facts: GroupFacts, rules: dict[str, str], expected: Expected) -> None:
    plan = decide(policy(rules), snapshot(facts), NOW)
    assert verdict(plan) == expected
    if plan.actions:
        assert plan.actions[0].rule in set(RuleName)
        assert plan.actions[0].group_kind is facts.kind


def test_reason_sentences_carry_rule_age_base_and_source() -> None:
    facts = [
        group("empty", empty_since=SourcedTime(datetime(2026, 11, 19, 8, 0, 0, tzinfo=UTC), logged().source)),
        group("reset", empty_since=T_3D, offsets=[offset("t", 0, T_2D)]),
        group("nostate", offsets=[offset("t", 0, O_3D)]),
        group(
            "svc", state=STABLE, subscribed=["a"], offsets=[offset("old", 0, T_2D), offset("old", 1, T_3D)]
        ),
        group("solo", kind=SIMPLE, offsets=[offset("x", 0, T_3D)]),
        group("half", kind=SIMPLE, offsets=[offset("x", 0, T_3D), offset("x", 1, T_12H)]),
    ]
    plan = decide(policy(ALL_RULES), snapshot(*facts), NOW)
    reasons = {a.group_id: a.reason for a in plan.actions}
    assert reasons == {
        "empty": "group Empty for 3d4h (since 2026-11-19T08:00:00Z, offsetsLog) >= emptyGroupRetention 1d",
        "reset": "group last offset commit 2d ago (2026-11-20T12:00:00Z, offsetsLog), "
        "after it became Empty at 2026-11-19T12:00:00Z >= emptyGroupRetention 1d",
        "nostate": "group Empty-since time unknown; last offset commit 3d ago "
        "(2026-11-19T12:00:00Z, observed) >= emptyGroupRetention 1d",
        "svc": "2 partitions of unsubscribed topics (old) last committed 2d ago or earlier "
        "(latest 2026-11-20T12:00:00Z, offsetsLog) >= unsubscribedOffsetRetention 1d",
        "solo": "simple group: all 1 partition last committed 3d ago or earlier "
        "(latest 2026-11-19T12:00:00Z, offsetsLog) >= simpleGroupOffsetRetention 1d",
        "half": "simple group: 1 of 2 partitions (x) last committed 3d ago or earlier "
        "(latest 2026-11-19T12:00:00Z, offsetsLog) >= simpleGroupOffsetRetention 1d",
    }


def test_skip_details_explain_themselves() -> None:
    plan = decide(
        policy(ALL_RULES),
        snapshot(
            group("conn", state=STABLE, protocol="connect", offsets=[offset("a", 0, T_3D)]),
            group("unk", state=STABLE, offsets=[offset("a", 0, T_3D), offset("b", 0, T_3D)]),
            group("err", error="GROUP_AUTHORIZATION_FAILED"),
        ),
        NOW,
    )
    details = {s.group_id: (s.reason_code, s.detail) for s in plan.skipped}
    assert details == {
        "conn": (
            SkipReason.NON_CONSUMER_PROTOCOL,
            "classic group with protocol type 'connect' is Stable: offsets are not touched",
        ),
        "unk": (
            SkipReason.SUBSCRIPTIONS_UNKNOWN,
            "2 partitions were last committed >= 1d ago, but the group's subscriptions are unknown",
        ),
        "err": (SkipReason.DESCRIBE_FAILED, "GROUP_AUTHORIZATION_FAILED"),
    }


SELECTION_GROUPS = [
    group("ci-1", empty_since=T_3D),
    group("ci-keep-1", empty_since=T_3D),
    group("CI-2", empty_since=T_3D),
    group("tmp-a", kind=CONSUMER, empty_since=T_3D),
    group("tmp-b", kind=SIMPLE, offsets=[offset("t", 0, T_3D)]),
    group("svc", empty_since=T_3D),
    group("ci-share", kind=GroupKind.SHARE),
    group("ci-keep-share", kind=GroupKind.STREAMS),
    group("other-share", kind=GroupKind.SHARE),
]


@pytest.mark.parametrize(
    ("include", "exclude", "group_types", "planned", "matched", "unsupported"),
    [
        (
            ["*"],
            [],
            None,
            {"ci-1", "ci-keep-1", "CI-2", "tmp-a", "tmp-b", "svc"},
            6,
            {"ci-share", "ci-keep-share", "other-share"},
        ),
        (["ci-*", "tmp-*"], ["ci-keep-*"], None, {"ci-1", "tmp-a", "tmp-b"}, 3, {"ci-share"}),
        (["ci-*"], [], None, {"ci-1", "ci-keep-1"}, 2, {"ci-share", "ci-keep-share"}),  # case-sensitive
        (["*"], ["*"], None, set(), 0, set()),  # exclude always wins
        (["tmp-?"], [], ["simple"], {"tmp-b"}, 1, set()),
        (["tmp-[ab]"], [], ["classic", "consumer"], {"tmp-a"}, 1, set()),
        (["[!c]*"], [], None, {"CI-2", "tmp-a", "tmp-b", "svc"}, 4, {"other-share"}),
    ],
)
def test_selection(
    include: list[str],
    exclude: list[str],
    group_types: list[str] | None,
    planned: set[str],
    matched: int,
    unsupported: set[str],
) -> None:
    rules = {"emptyGroupRetention": "1d", "simpleGroupOffsetRetention": "1d"}
    p = policy(rules, include=include, exclude=exclude, group_types=group_types)
    plan = decide(p, snapshot(*SELECTION_GROUPS), NOW)
    assert {a.group_id for a in plan.actions} == planned
    assert plan.summary.groups_matched == matched
    assert plan.summary.groups_total == len(SELECTION_GROUPS)
    assert {
        s.group_id for s in plan.skipped if s.reason_code is SkipReason.UNSUPPORTED_GROUP_TYPE
    } == unsupported


def test_summary_counts() -> None:
    plan = decide(
        policy(ALL_RULES),
        snapshot(
            group("a", empty_since=T_3D),
            group(
                "b", kind=SIMPLE, offsets=[offset("t", 0, T_3D), offset("t", 1, T_12H), offset("u", 0, T_2D)]
            ),
            group("c", state=STABLE, subscribed=[], offsets=[offset("t", 0, T_3D)]),
            group("d", state=GroupState.PREPARING_REBALANCE),
        ),
        NOW,
    )
    summary = plan.summary
    assert (summary.groups_matched, summary.groups_eligible, summary.offsets_eligible) == (4, 1, 3)
    assert (summary.groups_planned, summary.offsets_planned, summary.skipped) == (1, 3, 1)
    assert summary.blast_radius_exceeded is False


def test_plan_metadata_and_warnings() -> None:
    p = policy({}, suspend=True, mode="DryRun")
    plan = decide(
        p, snapshot(group("a"), offsets_log=False, warnings=("offsets log: TOPIC_AUTHORIZATION_FAILED",)), NOW
    )
    assert plan.policy == p.ref
    assert plan.generated_at == NOW
    assert plan.mode.value == "DryRun"
    assert plan.suspended is True
    assert plan.cluster_id == "test-cluster"
    assert plan.warnings == (
        "no retention rule is set: this policy never plans anything",
        "the policy is suspended: the operator does not act on it",
        OBSERVED_TIMES_WARNING,
        "offsets log: TOPIC_AUTHORIZATION_FAILED",
    )


def test_decide_refuses_a_naive_now() -> None:
    with pytest.raises(ValueError, match="must be timezone-aware"):
        decide(policy(EMPTY_RULE), snapshot(), datetime(2026, 1, 1))


def test_decide_is_pure_and_deterministic() -> None:
    facts = [f for _, f, _, _ in CASES[:20]]
    renamed = [replace(f, group_id=f"g{i}") for i, f in enumerate(facts)]
    p = policy(ALL_RULES)
    first = decide(p, snapshot(*renamed), NOW)
    assert decide(p, snapshot(*renamed), NOW) == first
    assert decide(p, snapshot(*reversed(renamed)), NOW) == first
    assert first.actions and first.skipped
