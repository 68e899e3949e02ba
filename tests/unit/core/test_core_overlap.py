"""decide_many: overlapping policies merge conservatively (every selecting policy must allow)."""

from __future__ import annotations

from typing import Any

import pytest
from core_factories import NOW, group, logged, offset, policy, snapshot, tp

from groupwarden.core.decide_many import decide_many
from groupwarden.core.engine import decide
from groupwarden.core.plan import Plan, SkipReason
from groupwarden.core.policy import PolicyRef
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition

pytestmark = pytest.mark.unit

SNAPSHOT = snapshot(
    group("ci-1", empty_since=logged(days=3)),
    group("ci-2", empty_since=logged(days=10)),
    group(
        "svc",
        state=GroupState.STABLE,
        subscribed=["live"],
        offsets=[
            offset("gone", 0, logged(days=3)),
            offset("gone", 1, logged(days=10)),
            offset("live", 0, logged(days=30)),
        ],
    ),
    group(
        "solo",
        kind=GroupKind.SIMPLE,
        offsets=[offset("t", 0, logged(days=3)), offset("t", 1, logged(days=10))],
    ),
)
SHORT = {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d", "simpleGroupOffsetRetention": "1d"}
LONG = {"emptyGroupRetention": "7d", "unsubscribedOffsetRetention": "7d", "simpleGroupOffsetRetention": "7d"}


def planned(plan: Plan) -> dict[str, tuple[str, tuple[TopicPartition, ...]]]:
    return {a.group_id: (a.kind.value, a.partitions) for a in plan.actions}


def blocked(plan: Plan) -> dict[str, tuple[tuple[TopicPartition, ...], str]]:
    return {
        s.group_id: (s.partitions, s.detail)
        for s in plan.skipped
        if s.reason_code is SkipReason.OVERLAP_BLOCKED
    }


def test_longest_retention_wins() -> None:
    short, long = policy(SHORT, name="short"), policy(LONG, name="long")
    short_plan, long_plan = decide_many([short, long], SNAPSHOT, NOW)
    assert planned(short_plan) == {
        "ci-2": ("DeleteGroup", ()),
        "svc": ("DeleteOffsets", (tp("gone", 1),)),
        "solo": ("DeleteOffsets", (tp("t", 1),)),
    }
    assert planned(long_plan) == planned(short_plan)
    not_long_enough = blocked(short_plan)
    assert set(not_long_enough) == {"ci-1", "svc", "solo"}
    assert not_long_enough["svc"] == (
        (tp("gone", 0),),
        "offsets are not eligible under policy ns/long (emptyGroupRetention 7d, "
        "unsubscribedOffsetRetention 7d, simpleGroupOffsetRetention 7d)",
    )
    assert not_long_enough["ci-1"][1].startswith("group is not eligible for deletion under policy ns/long")
    # the simple group as a whole is not eligible under "long", so only the partitions both allow go
    assert not_long_enough["solo"][0] == (tp("t", 0),)
    assert short_plan.overlapping_policies == (PolicyRef("ns", "long"),)
    assert long_plan.overlapping_policies == (PolicyRef("ns", "short"),)
    # each plan keeps its own eligibility counts
    assert (short_plan.summary.groups_eligible, short_plan.summary.offsets_eligible) == (3, 2)
    assert short_plan.summary.groups_planned == 1


@pytest.mark.parametrize(
    ("other_kwargs", "why"),
    [
        ({"mode": "DryRun"}, "policy ns/other is in DryRun"),
        ({"suspend": True}, "policy ns/other is suspended"),
        ({"limits": {"maxDeletionRatio": 0.1}}, "policy ns/other tripped its blast-radius breaker"),
    ],
)
def test_dry_run_suspend_or_breaker_in_any_selecting_policy_blocks(
    other_kwargs: dict[str, Any], why: str
) -> None:
    mine, other = policy(SHORT, name="mine"), policy(SHORT, name="other", **other_kwargs)
    plan = decide_many([mine, other], SNAPSHOT, NOW)[0]
    assert plan.actions == ()
    assert {detail for _, detail in blocked(plan).values()} == {why}


def test_a_policy_without_an_applicable_rule_protects_its_groups() -> None:
    guard = policy({}, name="guard", include=["ci-*"])
    plans = decide_many([policy(SHORT, name="cleaner"), guard], SNAPSHOT, NOW)
    assert set(planned(plans[0])) == {"svc", "solo"}
    assert set(blocked(plans[0])) == {"ci-1", "ci-2"}


def test_policies_that_do_not_select_the_same_groups_do_not_interact() -> None:
    ci = policy(SHORT, name="ci", include=["ci-*"])
    dry = policy(SHORT, name="rest", exclude=["ci-*"], mode="DryRun")
    ci_plan, rest_plan = decide_many([ci, dry], SNAPSHOT, NOW)
    assert ci_plan == decide(ci, SNAPSHOT, NOW)
    assert rest_plan == decide(dry, SNAPSHOT, NOW)
    # group kinds count too: a simple-only policy does not overlap classic groups
    simple_only = policy({}, name="simple-only", group_types=["simple"], mode="DryRun")
    plan = decide_many([ci, simple_only], SNAPSHOT, NOW)[0]
    assert plan.overlapping_policies == ()
    assert set(planned(plan)) == {"ci-1", "ci-2"}


def test_own_dry_run_does_not_block_itself_and_own_limits_apply_after_blocks() -> None:
    mine = policy(SHORT, name="mine", include=["ci-*"], mode="DryRun", limits={"maxGroupDeletionsPerRun": 1})
    other = policy({"emptyGroupRetention": "7d"}, name="other", include=["ci-*"])
    plan = decide_many([mine, other], SNAPSHOT, NOW)[0]
    # ci-1 is blocked by "other", so the single group slot goes to ci-2 (blocked items use no slot)
    assert [a.group_id for a in plan.actions if a.kind.value == "DeleteGroup"] == ["ci-2"]
    assert not [s for s in plan.skipped if s.reason_code is SkipReason.LIMIT_REACHED]


def test_single_policy_is_plain_decide() -> None:
    p = policy(SHORT)
    assert decide_many([p], SNAPSHOT, NOW) == [decide(p, SNAPSHOT, NOW)]


def test_each_policy_only_once() -> None:
    with pytest.raises(ValueError, match="only once"):
        decide_many([policy(SHORT), policy(LONG)], SNAPSHOT, NOW)


def test_policies_on_disjoint_groups_plan_as_if_alone_in_one_decide_many() -> None:
    # A cluster pass decides for every policy of the cluster at once: policies selecting
    # different groups must get exactly the plan they would get alone.
    ci = policy(SHORT, name="ci", include=["ci-*"])
    solo = policy(LONG, name="solo", include=["solo", "svc"], mode="DryRun")
    nothing = policy(SHORT, name="nothing", include=["absent-*"])
    plans = decide_many([ci, solo, nothing], SNAPSHOT, NOW)
    for chosen, plan in zip((ci, solo, nothing), plans, strict=True):
        alone = decide(chosen, SNAPSHOT, NOW)
        assert plan == alone
        assert plan.overlapping_policies == ()


def test_fifty_overlapping_policies_explain_a_block_in_bounded_text() -> None:
    # Every skip names at most three refusing policies and how many more: plans grow with
    # policies x groups, never with policies^2 x groups.
    policies = [policy(SHORT, name=f"p{i:02d}", mode="DryRun") for i in range(50)]
    plans = decide_many(policies, SNAPSHOT, NOW)
    for plan in plans:
        assert plan.actions == ()
        blocked = [s for s in plan.skipped if s.reason_code is SkipReason.OVERLAP_BLOCKED]
        assert {s.group_id for s in blocked} == {"ci-1", "ci-2", "svc", "solo"}
        for skip in blocked:
            assert skip.detail.count("is in DryRun") == 3 and skip.detail.endswith("(and 46 more policies)")
        assert len(plan.overlapping_policies) == 49
    # A DryRun peer refuses every partition of a simple group too: nothing of it goes.
    enforce = policy(SHORT, name="enforce")
    [plan, _] = decide_many([enforce, policies[0]], SNAPSHOT, NOW)
    assert plan.actions == ()
    solo = next(s for s in plan.skipped if s.group_id == "solo")
    assert solo.partitions == (TopicPartition("t", 0), TopicPartition("t", 1))
