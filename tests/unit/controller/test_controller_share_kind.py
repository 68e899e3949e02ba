"""The operator shows each group's type: status.plan[].groupKind and the deletion event's wording."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from groupwarden.controller.events import outcome_events
from groupwarden.controller.status_builder import planned_actions
from groupwarden.core.plan import Action, ActionKind, ActionOutcome, ResultKind
from groupwarden.core.policy import RuleName
from groupwarden.core.snapshot import GroupKind, TimestampSource

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def action(kind: GroupKind) -> Action:
    return Action(
        ActionKind.DELETE_GROUP,
        f"{kind.value}-1",
        kind,
        RuleName.EMPTY_GROUP_RETENTION,
        timedelta(days=1),
        "group Empty for 2d",
        NOW - timedelta(days=2),
        TimestampSource.OBSERVED,
        timedelta(days=2),
    )


def test_status_plan_names_the_group_kind() -> None:
    planned = planned_actions((action(GroupKind.SHARE), action(GroupKind.CLASSIC)))
    assert [p.model_dump(mode="json", by_alias=True)["groupKind"] for p in planned] == ["share", "classic"]


def test_the_deletion_event_says_streams_group() -> None:
    [event] = outcome_events([ActionOutcome(action(GroupKind.STREAMS), ResultKind.DELETED)])
    assert event.message.startswith("Deleted streams group streams-1:")


def test_the_deletion_event_says_share_group() -> None:
    events = outcome_events(
        [
            ActionOutcome(action(GroupKind.SHARE), ResultKind.DELETED),
            ActionOutcome(action(GroupKind.CONSUMER), ResultKind.DELETED),
        ]
    )
    assert [e.message.split(":")[0] for e in events] == [
        "Deleted share group share-1",
        "Deleted consumer group consumer-1",
    ]


def test_deletions_are_counted_by_group_type_and_forgotten_with_the_policy() -> None:
    from groupwarden.core.plan import OutcomeSummary
    from groupwarden.core.policy import PolicyRef
    from groupwarden.metrics import OperatorMetrics

    metrics = OperatorMetrics()
    ref = PolicyRef("team", "p")
    outcomes = [
        ActionOutcome(action(GroupKind.SHARE), ResultKind.DELETED),
        ActionOutcome(action(GroupKind.STREAMS), ResultKind.DELETED),
        ActionOutcome(action(GroupKind.CLASSIC), ResultKind.SKIPPED_BECAME_ACTIVE),
    ]
    metrics.observe_run(ref, "Succeeded", 0.1, None, OutcomeSummary(groups_deleted=2), outcomes)
    sample = metrics.registry.get_sample_value
    labels = {"namespace": "team", "name": "p"}
    assert sample("groupwarden_groups_deleted_total", labels) == 2  # unchanged series
    assert sample("groupwarden_groups_deleted_by_type_total", {**labels, "group_type": "share"}) == 1
    assert sample("groupwarden_groups_deleted_by_type_total", {**labels, "group_type": "streams"}) == 1
    assert sample("groupwarden_groups_deleted_by_type_total", {**labels, "group_type": "classic"}) is None
    metrics.forget(ref)
    assert sample("groupwarden_groups_deleted_by_type_total", {**labels, "group_type": "share"}) is None


def test_status_plan_and_plan_json_name_a_streams_groups_internal_topics() -> None:
    from dataclasses import replace

    from groupwarden.core.render import action_to_json

    topics = ("app-store-changelog", "app-store-repartition")
    streams = replace(action(GroupKind.STREAMS), internal_topics=topics)
    planned = planned_actions((streams, action(GroupKind.CLASSIC)))
    dumped = [p.model_dump(mode="json", by_alias=True) for p in planned]
    assert [d["internalTopics"] for d in dumped] == [list(topics), None]
    assert action_to_json(streams)["internalTopics"] == list(topics)
    assert "internalTopics" not in action_to_json(action(GroupKind.CLASSIC))  # additive: absent
