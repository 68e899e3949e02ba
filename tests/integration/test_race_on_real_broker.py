"""A consumer that comes back between the decision and the deletion loses nothing.

The window is real: gather + decide run against the broker, then a real consumer rejoins, then the
plan is executed through the real adapter. The broker answers NON_EMPTY_GROUP /
GROUP_SUBSCRIBED_TO_TOPIC, which must surface as SkippedBecameActive with every offset intact.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.execute import execute_plan
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ActionKind, ResultKind
from groupwarden.core.policy import parse_policy
from gwtest.kafka import consumer_in_group, create_topics, describe_offsets_with_tool, kafka_tool, produce
from gwtest.wait import wait_for

ROUNDS = int(os.environ.get("GROUPWARDEN_RACE_ROUNDS", "24"))


def policy(bootstrap: str, prefix: str, **rules: str):  # type: ignore[no-untyped-def]
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "race", "namespace": "tests"},
            "spec": {
                "kafka": {"bootstrapServers": bootstrap},
                "selector": {"include": [f"{prefix}*"]},
                "rules": rules,
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def group_state(bootstrap: str, group: str) -> str | None:
    """The group's state as Kafka's own tool reports it (the oracle), None when it does not exist.
    `--describe` of the one group: `--list --state` would describe every group of the shared broker
    (hundreds by the time this module runs, seconds per call)."""
    out = kafka_tool(
        "kafka-consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group, "--state"
    )
    if "does not exist" in out or "not found" in out:
        return None
    rows = [line.split() for line in out.splitlines() if line.strip()]
    header = next((i for i, cols in enumerate(rows) if "STATE" in cols), None)
    if header is None or header + 1 >= len(rows):
        return None
    return rows[header + 1][rows[header].index("STATE")]


def is_empty(bootstrap: str, group: str) -> bool:
    """Cheap wait condition (the admin client, no JVM): the group left by its consumer is Empty."""
    from confluent_kafka import ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(20)
    return bool(described.state == ConsumerGroupState.EMPTY)


def test_rejoining_consumers_are_never_deleted(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    seed = int(os.environ.get("GROUPWARDEN_RACE_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    topic, prefix = unique_name("race"), unique_name("race-grp") + "-"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 4)
    gateway = open_gateway(kafka_bootstrap)
    memory = ClusterKnowledge(ObservedTimes())
    results: list[tuple[str, bool, ResultKind]] = []
    try:
        for round_number in range(ROUNDS):
            group = f"{prefix}{round_number}"
            protocol = rng.choice(["classic", "consumer"])
            rejoin = rng.random() < 0.6
            with consumer_in_group(kafka_bootstrap, group, [topic], protocol=protocol, expected_messages=4):
                pass
            wait_for(lambda g=group: is_empty(kafka_bootstrap, g), timeout=30, what="Empty")
            emptied = time.monotonic()
            assert group_state(kafka_bootstrap, group) == "Empty"  # the oracle agrees
            before = describe_offsets_with_tool(kafka_bootstrap, group)
            time.sleep(max(0.0, 1.2 - (time.monotonic() - emptied)))  # the 1 s retention passes

            now = datetime.now(UTC)
            snapshot = gather_snapshot(gateway, memory, now, lambda g, grp=group: g == grp)
            plan = decide(policy(kafka_bootstrap, group, emptyGroupRetention="1s"), snapshot, now)
            assert [a.kind for a in plan.actions] == [ActionKind.DELETE_GROUP], plan
            if rejoin:
                with consumer_in_group(kafka_bootstrap, group, [topic], protocol=protocol):
                    [outcome] = execute_plan(gateway, plan)
                    assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE, (seed, outcome)
                    assert outcome.error and "NON_EMPTY_GROUP" in outcome.error
                # Nothing lost: the group and all its offsets are still there.
                assert describe_offsets_with_tool(kafka_bootstrap, group) == before
            else:
                [outcome] = execute_plan(gateway, plan)
                assert outcome.result is ResultKind.DELETED, (seed, outcome)
                assert group_state(kafka_bootstrap, group) is None
            results.append((group, rejoin, outcome.result))
    finally:
        gateway.close()

    wrongful = [r for r in results if r[1] and r[2] is ResultKind.DELETED]
    assert wrongful == [], f"seed {seed}: groups deleted while a consumer was back: {wrongful}"
    assert len(results) == ROUNDS >= 20
    assert any(r[1] for r in results) and any(not r[1] for r in results), f"seed {seed} drew one side only"


def test_resubscribed_topic_offsets_are_kept(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    live, dropped, group = unique_name("live"), unique_name("dropped"), unique_name("race-svc")
    create_topics(kafka_bootstrap, [live, dropped])
    produce(kafka_bootstrap, live, 2)
    produce(kafka_bootstrap, dropped, 2)
    with consumer_in_group(kafka_bootstrap, group, [live, dropped], expected_messages=4):
        pass
    gateway = open_gateway(kafka_bootstrap)
    try:
        with consumer_in_group(kafka_bootstrap, group, [live]):
            time.sleep(1.2)
            now = datetime.now(UTC)
            snapshot = gather_snapshot(gateway, ClusterKnowledge(ObservedTimes()), now, lambda g: g == group)
            plan = decide(policy(kafka_bootstrap, group, unsubscribedOffsetRetention="1s"), snapshot, now)
            [action] = plan.actions
            assert action.kind is ActionKind.DELETE_OFFSETS and {p.topic for p in action.partitions} == {
                dropped
            }
        before = describe_offsets_with_tool(kafka_bootstrap, group)
        # The service is rolled back to the version that reads both topics before the deletion runs.
        with consumer_in_group(kafka_bootstrap, group, [live, dropped]):
            [outcome] = execute_plan(gateway, plan)
            assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE, outcome
            assert all(p.result is ResultKind.SKIPPED_BECAME_ACTIVE for p in outcome.partitions)
            assert describe_offsets_with_tool(kafka_bootstrap, group) == before
    finally:
        gateway.close()
