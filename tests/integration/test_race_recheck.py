"""Regressions of the race campaign's finding (docs/benchmarks.md, "Race campaign"), on the real broker.

Between a run's gather and its DeleteGroups / OffsetDelete requests, a client may commit (a simple
group's standalone consumer, a service on a topic it no longer subscribes to) or join and leave
again. The broker deletes all of that without complaint: it only refuses what is live at the
request. The re-check before each step (cleanup/recheck.py) reads the step's groups again and
drops what changed. Each test makes the change after the plan, deterministically, and runs the
same executor the CLI and the operator use; the first one also shows the race without the
re-check (the broker deletes the fresh commit), so a broker that started to protect it would show.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

from confluent_kafka import TopicPartition as CkTopicPartition

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.cluster_pass import ClusterPass, gather_and_decide, scope_of
from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.cleanup.recheck import CHANGED, Recheck
from groupwarden.cleanup.steps import ALWAYS_GO, execute_guarded
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ActionKind, ActionOutcome, ResultKind
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from gwtest.kafka import (
    commit_offsets,
    consumer_in_group,
    create_topics,
    describe_offsets_with_tool,
    empty_group,
    produce,
)

RETENTION_S = 1.0


def policy(bootstrap: str, prefix: str, retention_s: float = RETENTION_S) -> ConsumerGroupPolicy:
    retention = f"{int(retention_s)}s"
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "recheck", "namespace": "tests"},
            "spec": {
                "kafka": {"bootstrapServers": bootstrap},
                "selector": {"include": [f"{prefix}*"]},
                "rules": {
                    "emptyGroupRetention": retention,
                    "unsubscribedOffsetRetention": retention,
                    "simpleGroupOffsetRetention": retention,
                },
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def planned(gateway: KafkaGateway, bootstrap: str, prefix: str) -> tuple[ClusterPass, Recheck]:
    """The plan of the groups of `prefix` after their retention passed, and the re-check the CLI
    would hand the executor."""
    time.sleep(RETENTION_S + 0.2)  # the retention is measured on the broker's commit times
    policies = [policy(bootstrap, prefix)]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(gateway, memory, policies, datetime.now(UTC))
    return cluster_pass, Recheck(gateway, memory, cluster_pass.snapshot, policies, scope_of(policies))


def by_group(outcomes: tuple[ActionOutcome, ...]) -> dict[str, ActionOutcome]:
    return {o.action.group_id: o for o in outcomes}


def test_a_standalone_commit_after_the_plan_is_kept(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, prefix = unique_name("recheck-simple"), unique_name("recheck-simple-grp") + "-"
    create_topics(kafka_bootstrap, [topic])
    kept, raced = f"{prefix}kept", f"{prefix}raced"
    for group in (kept, raced):
        commit_offsets(kafka_bootstrap, group, {(topic, 0): 1, (topic, 1): 1})
    gateway = open_gateway(kafka_bootstrap)
    try:
        cluster_pass, recheck = planned(gateway, kafka_bootstrap, prefix)
        [plan] = cluster_pass.plans
        assert {(a.kind, a.group_id) for a in plan.actions} == {
            (ActionKind.DELETE_GROUP, kept),
            (ActionKind.DELETE_GROUP, raced),
        }
        # Both standalone consumers commit again after the plan was made.
        for group in (kept, raced):
            commit_offsets(kafka_bootstrap, group, {(topic, 0): 5, (topic, 1): 6})

        # With the re-check (what apply and the operator run): skipped, nothing lost.
        kept_plan = replace(plan, actions=tuple(a for a in plan.actions if a.group_id == kept))
        outcomes, _ = execute_guarded(gateway, kept_plan, ALWAYS_GO, recheck=recheck)
        outcome = by_group(outcomes)[kept]
        assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE and (outcome.error or "").startswith(
            CHANGED
        )
        assert describe_offsets_with_tool(kafka_bootstrap, kept) == {(topic, 0): 5, (topic, 1): 6}

        # Without it (as before the race campaign): the broker deletes the group and the fresh commit with it.
        raced_plan = replace(plan, actions=tuple(a for a in plan.actions if a.group_id == raced))
        outcomes, _ = execute_guarded(gateway, raced_plan, ALWAYS_GO)
        assert by_group(outcomes)[raced].result is ResultKind.DELETED
        assert describe_offsets_with_tool(kafka_bootstrap, raced) == {}
    finally:
        gateway.close()


def test_a_commit_on_the_dropped_topic_after_the_plan_keeps_its_offsets(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    live, dropped = unique_name("recheck-live"), unique_name("recheck-dropped")
    prefix = unique_name("recheck-svc") + "-"
    create_topics(kafka_bootstrap, [live, dropped])
    produce(kafka_bootstrap, live, 2)
    produce(kafka_bootstrap, dropped, 2)
    group = f"{prefix}svc"
    empty_group(kafka_bootstrap, group, [live, dropped], messages=4, protocol="consumer")
    gateway = open_gateway(kafka_bootstrap)
    try:
        # The service now reads only `live` (KIP-848): `dropped`'s offsets are unsubscribed.
        with consumer_in_group(kafka_bootstrap, group, [live], protocol="consumer") as service:
            cluster_pass, recheck = planned(gateway, kafka_bootstrap, prefix)
            [plan] = cluster_pass.plans
            [action] = plan.actions
            assert action.kind is ActionKind.DELETE_OFFSETS and {p.topic for p in action.partitions} == {
                dropped
            }
            # ... and commits on `dropped` once more (a migration tool, a last batch) after the plan.
            service.consumer.commit(
                offsets=[CkTopicPartition(dropped, 0, 2), CkTopicPartition(dropped, 1, 2)], asynchronous=False
            )
            outcomes, _ = execute_guarded(gateway, plan, ALWAYS_GO, recheck=recheck)
            outcome = by_group(outcomes)[group]
            assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE
            assert (outcome.error or "").startswith(CHANGED)
            offsets = describe_offsets_with_tool(kafka_bootstrap, group)
            assert offsets[(dropped, 0)] == 2 and offsets[(dropped, 1)] == 2
    finally:
        gateway.close()


def test_a_consumer_that_came_and_went_after_the_plan_keeps_its_group(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic, prefix = unique_name("recheck-back"), unique_name("recheck-back-grp") + "-"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 4)
    group = f"{prefix}classic"
    empty_group(kafka_bootstrap, group, [topic], messages=4)
    gateway = open_gateway(kafka_bootstrap)
    try:
        cluster_pass, recheck = planned(gateway, kafka_bootstrap, prefix)
        [plan] = cluster_pass.plans
        assert [(a.kind, a.group_id) for a in plan.actions] == [(ActionKind.DELETE_GROUP, group)]
        before = describe_offsets_with_tool(kafka_bootstrap, group)
        # A consumer restarts, rejoins and leaves again before the request: Empty, but only since now.
        with consumer_in_group(kafka_bootstrap, group, [topic]):
            pass
        outcomes, _ = execute_guarded(gateway, plan, ALWAYS_GO, recheck=recheck)
        outcome = by_group(outcomes)[group]
        assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE and (outcome.error or "").startswith(
            CHANGED
        )
        assert describe_offsets_with_tool(kafka_bootstrap, group) == before
    finally:
        gateway.close()


def test_a_simple_group_whose_last_fresh_partition_aged_still_loses_its_planned_offsets(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Between the plan and the step the group's only fresh partition ages past the retention, so
    the re-check's judgement finds the whole group eligible. Nothing was committed: the planned
    partition is deleted (it used to be skipped as "a commit or a member since the plan"), and
    only it: the group and its other partition stay for the next run."""
    retention_s = 3.0  # leaves the plan's gather (well under a second on the devstack) room
    topic, prefix = unique_name("recheck-aged"), unique_name("recheck-aged-grp") + "-"
    create_topics(kafka_bootstrap, [topic])
    group = f"{prefix}standalone"
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 1, (topic, 1): 1})
    time.sleep(retention_s + 0.2)
    commit_offsets(kafka_bootstrap, group, {(topic, 1): 2})  # partition 1 is fresh at the plan
    fresh_at = time.monotonic()
    gateway = open_gateway(kafka_bootstrap)
    try:
        policies = [policy(kafka_bootstrap, prefix, retention_s)]
        memory = ClusterKnowledge(ObservedTimes())
        cluster_pass = gather_and_decide(gateway, memory, policies, datetime.now(UTC))
        recheck = Recheck(gateway, memory, cluster_pass.snapshot, policies, scope_of(policies))
        [plan] = cluster_pass.plans
        [action] = plan.actions
        assert (action.kind, [(p.topic, p.partition) for p in action.partitions]) == (
            ActionKind.DELETE_OFFSETS,
            [(topic, 0)],
        )
        time.sleep(max(0.0, fresh_at + retention_s + 0.2 - time.monotonic()))  # partition 1 aged too
        outcomes, aborted = execute_guarded(gateway, plan, ALWAYS_GO, recheck=recheck)
        assert aborted is None
        outcome = by_group(outcomes)[group]
        assert (outcome.result, outcome.error) == (ResultKind.DELETED, None)
        assert describe_offsets_with_tool(kafka_bootstrap, group) == {(topic, 1): 2}
    finally:
        gateway.close()
