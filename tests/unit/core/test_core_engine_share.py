"""Share groups (KIP-932) in the engine: selected only when a policy names `share`, deleted when Empty
past emptyGroupRetention, never an OffsetDelete (the broker refuses it while the group has members)."""

from __future__ import annotations

from typing import Any

import pytest
from core_factories import NOW, group, observed, offset, policy, snapshot

from groupwarden.core.engine import decide
from groupwarden.core.plan import ActionKind, SkipReason
from groupwarden.core.policy import ALL_GROUP_TYPES, GroupType, PolicyError, parse_policy
from groupwarden.core.snapshot import GroupFacts, GroupKind, GroupState

SHARE = GroupKind.SHARE
EMPTY_1D = {"emptyGroupRetention": "1d"}
BOTH_1D = {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d"}


def share_group(state: GroupState = GroupState.EMPTY, **kwargs: Any) -> GroupFacts:
    return group("sg", kind=SHARE, protocol="share", state=state, **kwargs)


def test_the_default_selection_still_excludes_share_groups() -> None:
    assert GroupType.SHARE not in ALL_GROUP_TYPES
    old_enough = share_group(empty_since=observed(days=3), offsets=[offset("t", 0, observed(days=3))])
    plan = decide(policy(EMPTY_1D), snapshot(old_enough), NOW)
    assert plan.actions == ()
    [skip] = plan.skipped
    assert skip.reason_code is SkipReason.UNSUPPORTED_GROUP_TYPE
    assert "groupTypes" in skip.detail
    assert plan.summary.groups_matched == 0


def test_an_empty_share_group_past_retention_is_deleted_when_the_policy_names_share() -> None:
    facts = share_group(empty_since=observed(days=3), offsets=[offset("t", 0, observed(days=3))])
    plan = decide(policy(EMPTY_1D, group_types=["share"]), snapshot(facts), NOW)
    [action] = plan.actions
    assert action.kind is ActionKind.DELETE_GROUP
    assert action.group_kind is SHARE
    assert "Empty for 3d" in action.reason
    assert plan.summary.groups_matched == 1


def test_the_later_of_empty_since_and_the_start_offsets_change_is_the_base() -> None:
    # An admin reset the start offsets after the group emptied: the clock runs from the reset.
    facts = share_group(empty_since=observed(days=3), offsets=[offset("t", 0, observed(hours=12))])
    plan = decide(policy(EMPTY_1D, group_types=["share"]), snapshot(facts), NOW)
    assert plan.actions == ()
    facts = share_group(empty_since=observed(days=3), offsets=[offset("t", 0, observed(days=2))])
    [action] = decide(policy(EMPTY_1D, group_types=["share"]), snapshot(facts), NOW).actions
    assert action.eligible_since == observed(days=2).at
    assert "share-partition start offset change" in action.reason


def test_a_young_or_active_share_group_is_untouched() -> None:
    young = share_group(empty_since=observed(hours=3))
    active = share_group(
        GroupState.STABLE, members=1, subscribed=["t"], offsets=[offset("t", 0, observed(days=9))]
    )
    plan = decide(policy(BOTH_1D, group_types=["share"]), snapshot(young), NOW)
    assert plan.actions == () and plan.skipped == ()
    plan = decide(policy(BOTH_1D, group_types=["share"]), snapshot(active), NOW)
    assert plan.actions == () and plan.skipped == ()


def test_unsubscribed_state_of_a_stable_share_group_is_reported_never_planned() -> None:
    facts = share_group(
        GroupState.STABLE,
        members=1,
        subscribed=["t"],
        offsets=[offset("t", 0, observed(days=9)), offset("gone", 0, observed(days=9)), offset("gone", 1)],
    )
    plan = decide(policy(BOTH_1D, group_types=["share"]), snapshot(facts), NOW)
    assert plan.actions == ()
    [skip] = plan.skipped
    assert skip.reason_code is SkipReason.BROKER_REQUIRES_EMPTY
    assert [tp.topic for tp in skip.partitions] == ["gone"]  # the undated partition is not claimed old
    assert "NON_EMPTY_GROUP" in skip.detail


def test_an_empty_share_group_with_members_or_dead_is_skipped() -> None:
    odd = share_group(members=1, empty_since=observed(days=3))
    dead = share_group(GroupState.DEAD, empty_since=observed(days=3))
    plan = decide(policy(EMPTY_1D, group_types=["share"]), snapshot(odd, dead), NOW)
    assert plan.actions == ()
    assert {s.reason_code for s in plan.skipped} == {SkipReason.UNEXPECTED_STATE, SkipReason.DEAD}


def test_a_share_policy_selects_no_other_kind() -> None:
    classic = group("c", empty_since=observed(days=3))
    share = share_group(empty_since=observed(days=3))
    plan = decide(policy(EMPTY_1D, group_types=["share"]), snapshot(classic, share), NOW)
    assert [(a.group_id, a.group_kind) for a in plan.actions] == [("sg", SHARE)]


def test_group_types_accepts_share_and_refuses_unknown_types() -> None:
    document = policy(EMPTY_1D, group_types=["share", "consumer"]).model_dump(mode="json", by_alias=True)
    assert parse_policy(document).spec.selector.group_types == [GroupType.SHARE, GroupType.CONSUMER]
    document["spec"]["selector"]["groupTypes"] = ["queue"]
    with pytest.raises(PolicyError, match="got 'queue'"):
        parse_policy(document)
