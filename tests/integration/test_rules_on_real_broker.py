"""Each retention rule, per group kind, on the real broker: real consumers make the groups,
`groupwarden plan/apply` acts, Kafka's own tool confirms. Retentions are seconds, not days."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gwtest.cli import plan_json, write_policy
from gwtest.kafka import (
    commit_offsets,
    consumer_group_state_with_tool,
    consumer_in_group,
    create_topics,
    describe_offsets_with_tool,
    produce,
)
from gwtest.wait import wait_for

# Long enough that the steps a test takes inside the retention (a CLI start and a read of the whole
# __consumer_offsets log per plan, on a machine shared with the parallel suite) fit with room; with
# 8 s and 6 s these tests declared themselves "too slow" on a loaded machine.
EMPTY_RETENTION_S = 20
SIMPLE_RETENTION_S = 20


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def actions_for(plan: dict, group: str) -> list[dict]:
    return [a for a in plan["actions"] if a["group"] == group]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_empty_group_retention_deletes_the_group_from_when_it_became_empty(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    topic, group = unique_name("orders"), unique_name(f"ci-{protocol}")
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 4)
    with consumer_in_group(kafka_bootstrap, group, [topic], protocol=protocol, expected_messages=4):
        pass
    left_at = time.time()
    wait_for(
        lambda: consumer_group_state_with_tool(kafka_bootstrap, group) == "Empty",
        timeout=30,
        what=f"{group} Empty",
    )
    policy = write_policy(
        tmp_path / "p.yaml",
        "empty",
        kafka_bootstrap,
        [group],
        rules={"emptyGroupRetention": f"{EMPTY_RETENTION_S}s"},
        mode="Enforce",
    )

    # Decided as of a moment inside the retention (--now), whatever the CLI's own run takes on a
    # loaded machine: the broker's Empty-since is real, only the clock of the decision is pinned.
    inside = datetime.fromtimestamp(left_at + EMPTY_RETENTION_S - 5, UTC).isoformat()
    early = plan_json(policy, "--now", inside)
    assert actions_for(early, group) == [], "a group Empty for less than the retention must stay"

    time.sleep(max(0.0, left_at + EMPTY_RETENTION_S + 0.5 - time.time()))
    plan = plan_json(policy)
    [action] = actions_for(plan, group)
    assert action["action"] == "DeleteGroup"
    assert action["timestampSource"] == "offsetsLog"
    # The base is the moment the group became Empty (classic currentStateTimestamp / KIP-848 member removal).
    assert left_at - 5 <= parse_time(action["eligibleSince"]) <= left_at + 1, action

    applied = plan_json(policy, "--yes", command="apply")
    assert [o["result"] for o in applied["outcomes"] if o["group"] == group] == ["Deleted"]
    assert consumer_group_state_with_tool(kafka_bootstrap, group) is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_unsubscribed_offsets_are_deleted_and_subscribed_ones_kept(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    live, dropped, group = unique_name("live"), unique_name("dropped"), unique_name(f"svc-{protocol}")
    create_topics(kafka_bootstrap, [live, dropped])
    produce(kafka_bootstrap, live, 4)
    produce(kafka_bootstrap, dropped, 4)
    # The service used to read both topics ...
    with consumer_in_group(kafka_bootstrap, group, [live, dropped], protocol=protocol, expected_messages=8):
        pass
    committed_at = time.time()
    # ... and its new version reads only `live`, and keeps running.
    with consumer_in_group(kafka_bootstrap, group, [live], protocol=protocol) as member:
        policy = write_policy(
            tmp_path / "p.yaml",
            "unsub",
            kafka_bootstrap,
            [group],
            rules={"unsubscribedOffsetRetention": "2s", "emptyGroupRetention": "1s"},
            mode="Enforce",
        )
        time.sleep(max(0.0, committed_at + 2.5 - time.time()))
        plan = plan_json(policy)
        [action] = actions_for(plan, group)
        assert action["action"] == "DeleteOffsets"
        assert sorted((p["topic"], p["partition"]) for p in action["partitions"]) == [
            (dropped, 0),
            (dropped, 1),
        ]
        assert action["timestampSource"] == "offsetsLog"

        applied = plan_json(policy, "--yes", command="apply")
        [outcome] = [o for o in applied["outcomes"] if o["group"] == group]
        assert outcome["result"] == "Deleted"
        assert describe_offsets_with_tool(kafka_bootstrap, group) == {(live, 0): 2, (live, 1): 2}
        assert (
            consumer_group_state_with_tool(kafka_bootstrap, group) == "Stable"
        )  # the active group itself is untouched
        member.poll_some(0.2)


def test_simple_group_offsets_expire_per_partition_then_the_group_goes(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("audit"), unique_name("standalone")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 10})
    first_commit = time.time()
    time.sleep(SIMPLE_RETENTION_S + 1.5)
    commit_offsets(kafka_bootstrap, group, {(topic, 1): 20})
    second_commit = time.time()
    policy = write_policy(
        tmp_path / "p.yaml",
        "simple",
        kafka_bootstrap,
        [group],
        rules={"simpleGroupOffsetRetention": f"{SIMPLE_RETENTION_S}s"},
        mode="Enforce",
    )

    plan = plan_json(policy)
    [action] = actions_for(plan, group)
    assert action["action"] == "DeleteOffsets"
    assert action["partitions"] == [{"topic": topic, "partition": 0}]
    assert first_commit - 2 <= parse_time(action["eligibleSince"]) <= first_commit + 1
    plan_json(policy, "--yes", command="apply")
    assert describe_offsets_with_tool(kafka_bootstrap, group) == {(topic, 1): 20}

    assert time.time() - second_commit < SIMPLE_RETENTION_S, "the plan and apply came after the retention"
    time.sleep(max(0.0, second_commit + SIMPLE_RETENTION_S + 0.5 - time.time()))
    plan = plan_json(policy)
    assert [a["action"] for a in actions_for(plan, group)] == ["DeleteGroup"]
    plan_json(policy, "--yes", command="apply")
    assert consumer_group_state_with_tool(kafka_bootstrap, group) is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_an_active_group_is_never_deleted(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, protocol: str
) -> None:
    topic, group = unique_name("events"), unique_name(f"active-{protocol}")
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 2)
    with consumer_in_group(kafka_bootstrap, group, [topic], protocol=protocol, expected_messages=2):
        policy = write_policy(
            tmp_path / "p.yaml",
            "active",
            kafka_bootstrap,
            [group],
            rules={
                "emptyGroupRetention": "1s",
                "unsubscribedOffsetRetention": "1s",
                "simpleGroupOffsetRetention": "1s",
            },
            mode="Enforce",
        )
        time.sleep(1.5)
        applied = plan_json(policy, "--yes", command="apply")
        assert actions_for(applied, group) == []
        assert applied["summary"]["groupsMatched"] == 1
        assert consumer_group_state_with_tool(kafka_bootstrap, group) == "Stable"
