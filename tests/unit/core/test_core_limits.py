"""Per-run limits (oldest first, stable ties) and the blast-radius breaker."""

from __future__ import annotations

import pytest
from core_factories import NOW, group, logged, manifest, offset, policy, snapshot, tp

from groupwarden.core.engine import decide
from groupwarden.core.plan import ActionKind, SkipReason
from groupwarden.core.policy import parse_policy
from groupwarden.core.snapshot import GroupFacts, GroupKind, GroupState

pytestmark = pytest.mark.unit


def empty_groups(ages_in_hours: dict[str, int]) -> list[GroupFacts]:
    return [group(name, empty_since=logged(hours=hours)) for name, hours in ages_in_hours.items()]


def test_group_limit_takes_the_oldest_first_with_ties_by_group_id() -> None:
    groups = empty_groups({"e": 30, "d": 50, "c": 50, "b": 40, "a": 25})
    plan = decide(
        policy({"emptyGroupRetention": "1d"}, limits={"maxGroupDeletionsPerRun": 3}), snapshot(*groups), NOW
    )
    assert [a.group_id for a in plan.actions] == ["c", "d", "b"]
    deferred = [s for s in plan.skipped if s.reason_code is SkipReason.LIMIT_REACHED]
    assert [s.group_id for s in deferred] == ["a", "e"]
    assert deferred[0].detail == "maxGroupDeletionsPerRun 3 reached; 2 group deletions wait for the next run"
    assert (plan.summary.groups_eligible, plan.summary.groups_planned) == (5, 3)


def test_offset_limit_counts_partitions_across_groups_oldest_first() -> None:
    groups = [
        group(
            "svc-b",
            state=GroupState.STABLE,
            subscribed=["live"],
            offsets=[
                offset("gone", 0, logged(days=5)),
                offset("gone", 1, logged(days=2)),
                offset("live", 0, logged(days=9)),
            ],
        ),
        group(
            "svc-a",
            state=GroupState.STABLE,
            subscribed=[],
            offsets=[
                offset("old", 0, logged(days=3)),
                offset("old", 1, logged(days=5)),
                offset("old", 2, logged(days=4)),
            ],
        ),
    ]
    p = policy({"unsubscribedOffsetRetention": "1d"}, limits={"maxOffsetDeletionsPerRun": 3})
    plan = decide(p, snapshot(*groups), NOW)
    # oldest first: svc-a old-1 5d, svc-b gone-0 5d (tie -> group id), svc-a old-2 4d;
    # deferred: svc-a old-0 3d, svc-b gone-1 2d
    planned = {a.group_id: a.partitions for a in plan.actions}
    assert planned == {"svc-a": (tp("old", 1), tp("old", 2)), "svc-b": (tp("gone", 0),)}
    assert all(a.kind is ActionKind.DELETE_OFFSETS for a in plan.actions)
    deferred = {s.group_id: s.partitions for s in plan.skipped if s.reason_code is SkipReason.LIMIT_REACHED}
    assert deferred == {"svc-a": (tp("old", 0),), "svc-b": (tp("gone", 1),)}
    assert (plan.summary.offsets_eligible, plan.summary.offsets_planned) == (5, 3)
    # the action's clock is the youngest partition actually planned
    assert next(a for a in plan.actions if a.group_id == "svc-a").eligible_since == logged(days=4).at


def test_zero_limits_plan_nothing_but_report_everything() -> None:
    groups = [
        *empty_groups({"a": 30}),
        group(
            "s",
            kind=GroupKind.SIMPLE,
            offsets=[offset("t", 0, logged(days=3)), offset("t", 1, logged(hours=1))],
        ),
    ]
    rules = {"emptyGroupRetention": "1d", "simpleGroupOffsetRetention": "1d"}
    p = policy(rules, limits={"maxGroupDeletionsPerRun": 0, "maxOffsetDeletionsPerRun": 0})
    plan = decide(p, snapshot(*groups), NOW)
    assert plan.actions == ()
    assert {(s.group_id, s.reason_code) for s in plan.skipped} == {
        ("a", SkipReason.LIMIT_REACHED),
        ("s", SkipReason.LIMIT_REACHED),
    }


@pytest.mark.parametrize(
    ("eligible", "matched", "ratio", "tripped"),
    [
        (3, 4, 0.5, True),
        (2, 4, 0.5, False),  # exactly the ratio is allowed
        (1, 1, 0.5, True),  # a single-group policy needs ratio 1
        (1, 1, 1.0, False),
        (29, 100, 0.29, False),  # exact arithmetic: 0.29 * 100 is 29, not 28.999...
        (30, 100, 0.29, True),
        (0, 0, 0.1, False),
    ],
)
def test_blast_radius_breaker(eligible: int, matched: int, ratio: float, tripped: bool) -> None:
    groups = [group(f"old-{i:03}", empty_since=logged(days=3)) for i in range(eligible)]
    groups += [
        group(f"live-{i:03}", state=GroupState.STABLE, subscribed=["t"]) for i in range(matched - eligible)
    ]
    # the breaker counts eligible groups before limits: a small limit does not hide a mass deletion
    p = policy(
        {"emptyGroupRetention": "1d"}, limits={"maxDeletionRatio": ratio, "maxGroupDeletionsPerRun": 1}
    )
    plan = decide(p, snapshot(*groups), NOW)
    assert plan.summary.blast_radius_exceeded is tripped
    assert plan.summary.groups_eligible == eligible
    if tripped:
        assert plan.actions == ()
        breaker = [s for s in plan.skipped if s.reason_code is SkipReason.BLAST_RADIUS_EXCEEDED]
        assert len(breaker) == eligible
        assert f"{eligible} of {matched} selected groups are eligible" in breaker[0].detail
        assert f"maxDeletionRatio {ratio}" in breaker[0].detail
    else:
        assert len(plan.actions) == min(eligible, 1)


def test_breaker_also_stops_offset_deletions() -> None:
    groups = [
        group("gone", empty_since=logged(days=3)),
        group("svc", state=GroupState.STABLE, subscribed=[], offsets=[offset("t", 0, logged(days=3))]),
    ]
    p = policy(
        {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d"}, limits={"maxDeletionRatio": 0.4}
    )
    plan = decide(p, snapshot(*groups), NOW)
    assert plan.actions == ()
    assert plan.summary.blast_radius_exceeded
    svc = next(s for s in plan.skipped if s.group_id == "svc")
    assert (svc.reason_code, svc.partitions) == (SkipReason.BLAST_RADIUS_EXCEEDED, (tp("t", 0),))


def test_default_ratio_is_half() -> None:
    groups = [*empty_groups({"a": 30, "b": 30}), group("live", state=GroupState.STABLE, subscribed=[])]
    document = manifest({"emptyGroupRetention": "1d"})
    del document["spec"]["limits"]
    plan = decide(parse_policy(document), snapshot(*groups), NOW)
    assert plan.summary.blast_radius_exceeded  # 2 of 3 > 0.5
    plan = decide(parse_policy(document), snapshot(*groups, group("live-2", state=GroupState.STABLE)), NOW)
    assert not plan.summary.blast_radius_exceeded  # 2 of 4
