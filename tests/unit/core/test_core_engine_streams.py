"""Streams groups (KIP-1071) in the engine: selected only when a policy names `streams`; Empty past
emptyGroupRetention -> DeleteGroup; a Stable group's offsets of topics that are not source topics of
its current topology -> DeleteOffsets (repartition topics it reads count as subscribed)."""

from __future__ import annotations

from typing import Any

from core_factories import NOW, group, logged, observed, offset, policy, snapshot, tp

from groupwarden.core.engine import decide
from groupwarden.core.plan import ActionKind, SkipReason
from groupwarden.core.policy import ALL_GROUP_TYPES, GroupType
from groupwarden.core.snapshot import GroupFacts, GroupKind, GroupState

STREAMS = GroupKind.STREAMS
RULES = {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d"}


def streams_group(state: GroupState = GroupState.EMPTY, **kwargs: Any) -> GroupFacts:
    return group("app", kind=STREAMS, protocol="streams", state=state, **kwargs)


def test_the_default_selection_excludes_streams_groups() -> None:
    assert GroupType.STREAMS not in ALL_GROUP_TYPES
    plan = decide(policy(RULES), snapshot(streams_group(empty_since=observed(days=3))), NOW)
    assert plan.actions == ()
    assert [s.reason_code for s in plan.skipped] == [SkipReason.UNSUPPORTED_GROUP_TYPE]


def test_an_empty_streams_group_past_retention_is_deleted() -> None:
    facts = streams_group(empty_since=observed(days=3), offsets=[offset("in", 0, logged(days=4))])
    [action] = decide(policy(RULES, group_types=["streams"]), snapshot(facts), NOW).actions
    assert (action.kind, action.group_kind) == (ActionKind.DELETE_GROUP, STREAMS)
    assert action.eligible_since == observed(days=3).at  # the later of Empty-since and the last commit


def test_a_stable_streams_group_loses_only_offsets_of_topics_its_topology_no_longer_reads() -> None:
    facts = streams_group(
        GroupState.STABLE,
        members=1,
        subscribed=["in", "app-repartition"],
        offsets=[
            offset("in", 0, logged(days=9)),
            offset("app-repartition", 0, logged(days=9)),
            offset("old-in", 0, logged(days=9)),
            offset("old-in", 1, logged(hours=2)),
        ],
    )
    [action] = decide(policy(RULES, group_types=["streams"]), snapshot(facts), NOW).actions
    assert (action.kind, action.partitions) == (ActionKind.DELETE_OFFSETS, (tp("old-in", 0),))


def test_unknown_topology_or_not_ready_means_nothing() -> None:
    unknown = streams_group(
        GroupState.STABLE, members=1, subscribed=None, offsets=[offset("x", 0, logged(days=9))]
    )
    not_ready = streams_group(
        GroupState.UNKNOWN, members=1, subscribed=[], offsets=[offset("x", 0, logged(days=9))]
    )
    plan = decide(policy(RULES, group_types=["streams"]), snapshot(unknown), NOW)
    assert plan.actions == () and [s.reason_code for s in plan.skipped] == [SkipReason.SUBSCRIPTIONS_UNKNOWN]
    plan = decide(policy(RULES, group_types=["streams"]), snapshot(not_ready), NOW)
    assert plan.actions == () and [s.reason_code for s in plan.skipped] == [SkipReason.UNKNOWN_STATE]
