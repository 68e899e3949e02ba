"""Verdicts kept between passes (core/verdicts.py) never change a plan: for the same facts, a pass
at any later time plans exactly what a pass without remembered verdicts plans."""

from __future__ import annotations

from datetime import timedelta

from core_factories import NOW, group, logged, offset, policy, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from test_core_engine_properties import policies, snapshots

from groupwarden.core.decide_many import decide_many
from groupwarden.core.plan import ActionKind
from groupwarden.core.policy import ConsumerGroupPolicy, RuleName
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind
from groupwarden.core.verdicts import VerdictCache, next_change

# Steps between passes: around the retentions the policies use (1s .. 30d), and backwards.
_STEPS = st.lists(
    st.sampled_from([0, 1, 59, 3600, 43_200, 86_399, 86_400, 86_401, 3 * 86_400, 8 * 86_400, -3600]),
    min_size=1,
    max_size=6,
)


@settings(max_examples=300, deadline=None)
@given(policies(name="p1"), policies(name="p2"), snapshots, _STEPS)
def test_remembered_verdicts_plan_like_fresh_ones(
    p1: ConsumerGroupPolicy, p2: ConsumerGroupPolicy, snap: ClusterSnapshot, steps: list[int]
) -> None:
    memory = VerdictCache()
    now = NOW - timedelta(days=10)
    for seconds in steps:
        now += timedelta(seconds=seconds)
        assert decide_many([p1, p2], snap, now, memory) == decide_many([p1, p2], snap, now)


def test_a_verdict_is_kept_until_a_retention_is_crossed_then_decided_again() -> None:
    p = policy({"simpleGroupOffsetRetention": "1d"}, group_types=["simple"])
    facts = group("s", GroupKind.SIMPLE, offsets=[offset("t", committed=logged(hours=20))])
    snap = snapshot(facts)
    memory = VerdictCache()
    [plan] = decide_many([p], snap, NOW, memory)
    assert plan.actions == ()
    assert next_change(facts, {RuleName.SIMPLE_GROUP_OFFSET_RETENTION: timedelta(days=1)}, NOW) == (
        NOW + timedelta(hours=4)
    )
    [plan] = decide_many([p], snap, NOW + timedelta(hours=3, minutes=59), memory)
    assert plan.actions == ()
    [plan] = decide_many([p], snap, NOW + timedelta(hours=4), memory)
    assert [a.kind for a in plan.actions] == [ActionKind.DELETE_GROUP]
    # The kept candidate's reason is written for the plan asking, not for when it was judged.
    [later] = decide_many([p], snap, NOW + timedelta(days=3), memory)
    assert later.actions[0].reason != plan.actions[0].reason
    assert "3d" in later.actions[0].reason or "3 days" in later.actions[0].reason


def test_other_facts_for_the_same_group_are_judged_again_and_unjudged_groups_are_forgotten() -> None:
    p = policy({"simpleGroupOffsetRetention": "1d"}, group_types=["simple"])
    old = group("s", GroupKind.SIMPLE, offsets=[offset("t", committed=logged(days=2))])
    recommitted = group("s", GroupKind.SIMPLE, offsets=[offset("t", committed=logged(hours=1))])
    memory = VerdictCache()
    [plan] = decide_many([p], snapshot(old), NOW, memory)
    assert len(plan.actions) == 1
    [plan] = decide_many([p], snapshot(recommitted), NOW, memory)
    assert plan.actions == ()
    decide_many([p], snapshot(), NOW, memory)
    decide_many([p], snapshot(), NOW, memory)
    assert len(memory) == 0


def test_a_time_at_the_end_of_datetimes_range_changes_nothing_and_does_not_overflow() -> None:
    """A commit the log dates after year 9999 is clamped to its last millisecond (`log_time`):
    `time + retention` is past datetime's range, so it never changes a verdict (it raised
    OverflowError in every pass, found by tests/unit/fleet/test_fleet_columnar.py)."""
    from groupwarden.offsets_log.views import MAX_LOG_MS, log_time

    p = policy({"emptyGroupRetention": "1h", "simpleGroupOffsetRetention": "1d"}, group_types=["simple"])
    late = log_time(MAX_LOG_MS + 5)
    facts = group(
        "s", GroupKind.SIMPLE, offsets=[offset("t", committed=late), offset("u", committed=logged(hours=20))]
    )
    assert next_change(facts, {RuleName.SIMPLE_GROUP_OFFSET_RETENTION: timedelta(days=1)}, NOW) == (
        NOW + timedelta(hours=4)
    )
    memory = VerdictCache()
    [plan] = decide_many([p], snapshot(facts), NOW, memory)
    assert plan == decide_many([p], snapshot(facts), NOW)[0]
