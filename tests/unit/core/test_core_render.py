"""The JSON contract (render.py: keys scripts rely on) and the person-readable table."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from core_factories import NOW, group, logged, observed, offset, policy, snapshot, tp

from groupwarden.core.engine import decide
from groupwarden.core.plan import (
    ActionKind,
    ActionOutcome,
    PartitionOutcome,
    Plan,
    ResultKind,
    summarize_outcomes,
)
from groupwarden.core.render import compact_partitions, plan_to_json, render_table
from groupwarden.core.snapshot import GroupKind, GroupState
from groupwarden.core.timestamps import to_rfc3339

pytestmark = pytest.mark.unit

RFC3339_UTC = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z$")


def sample_plan() -> Plan:
    return decide(
        policy(
            {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d"},
            name="ci-groups",
            namespace="kafka",
            mode="DryRun",
        ),
        snapshot(
            group("ci-1", empty_since=logged(days=3, hours=4)),
            group(
                "svc",
                state=GroupState.STABLE,
                subscribed=["live"],
                offsets=[offset("gone", 0, observed(days=2)), offset("gone", 1, observed(days=2))],
            ),
            group("busy", state=GroupState.PREPARING_REBALANCE),
        ),
        NOW,
    )


def test_json_contract_shape() -> None:
    document = plan_to_json(sample_plan())
    json.dumps(document)  # serialisable as is
    assert {"actions", "skipped", "summary"} <= document.keys()
    delete_group, delete_offsets = document["actions"]
    assert delete_group == {
        "action": "DeleteGroup",
        "group": "ci-1",
        "groupKind": "classic",
        "rule": "emptyGroupRetention",
        "retention": "1d",
        "reason": "group Empty for 3d4h (since 2026-11-19T08:00:00Z, offsetsLog) >= emptyGroupRetention 1d",
        "eligibleSince": "2026-11-19T08:00:00Z",
        "timestampSource": "offsetsLog",
        "age": "3d4h",
        "ageSeconds": 273600,
    }
    assert "partitions" not in delete_group  # DeleteOffsets only
    assert delete_offsets["action"] == "DeleteOffsets"
    assert delete_offsets["partitions"] == [
        {"topic": "gone", "partition": 0},
        {"topic": "gone", "partition": 1},
    ]
    assert delete_offsets["timestampSource"] == "observed"
    assert document["skipped"] == [
        {
            "group": "busy",
            "reason": "Rebalancing",
            "detail": "group is PreparingRebalance",
            "groupKind": "classic",
        }
    ]
    summary = document["summary"]
    assert summary["groupsMatched"] == 3
    assert summary["groupsEligible"] == 1
    assert summary["offsetsEligible"] == 2
    assert summary["blastRadiusExceeded"] is False
    assert document["policy"] == {"namespace": "kafka", "name": "ci-groups"}
    assert document["mode"] == "DryRun"
    assert RFC3339_UTC.match(document["generatedAt"])
    assert "outcomes" not in document


def test_json_with_outcomes() -> None:
    plan = sample_plan()
    group_action, offsets_action = plan.actions
    outcomes = [
        ActionOutcome(group_action, ResultKind.FAILED, "COORDINATOR_NOT_AVAILABLE", retriable=True),
        ActionOutcome.from_partitions(
            offsets_action,
            (
                PartitionOutcome(tp("gone", 0), ResultKind.DELETED),
                PartitionOutcome(
                    tp("gone", 1), ResultKind.SKIPPED_BECAME_ACTIVE, "GROUP_SUBSCRIBED_TO_TOPIC"
                ),
            ),
        ),
    ]
    document = plan_to_json(plan, outcomes)
    first, second = document["outcomes"]
    assert first["result"] == "Failed"
    assert first["error"] == "COORDINATOR_NOT_AVAILABLE"
    assert first["retriable"] is True
    assert first["group"] == "ci-1" and first["action"] == "DeleteGroup"
    assert second["result"] == "Deleted"
    assert second["partitionResults"] == [
        {"topic": "gone", "partition": 0, "result": "Deleted"},
        {
            "topic": "gone",
            "partition": 1,
            "result": "SkippedBecameActive",
            "error": "GROUP_SUBSCRIBED_TO_TOPIC",
        },
    ]
    summary = document["summary"]
    assert (summary["groupsDeleted"], summary["offsetsDeleted"], summary["failed"]) == (0, 1, 1)


@pytest.mark.parametrize(
    ("results", "aggregate"),
    [
        ([ResultKind.DELETED, ResultKind.DELETED], ResultKind.DELETED),
        ([ResultKind.DELETED, ResultKind.FAILED], ResultKind.FAILED),
        ([ResultKind.DELETED, ResultKind.SKIPPED_BECAME_ACTIVE], ResultKind.DELETED),
        ([ResultKind.NOT_FOUND, ResultKind.SKIPPED_BECAME_ACTIVE], ResultKind.SKIPPED_BECAME_ACTIVE),
        ([ResultKind.NOT_FOUND, ResultKind.NOT_FOUND], ResultKind.NOT_FOUND),
    ],
)
def test_partition_results_aggregate(results: list[ResultKind], aggregate: ResultKind) -> None:
    action = sample_plan().actions[1]
    partitions = tuple(PartitionOutcome(tp("gone", i), r) for i, r in enumerate(results))
    assert ActionOutcome.from_partitions(action, partitions).result is aggregate


def test_outcome_summary() -> None:
    group_action, offsets_action = sample_plan().actions
    done = summarize_outcomes(
        [
            ActionOutcome(group_action, ResultKind.DELETED),
            ActionOutcome(offsets_action, ResultKind.DELETED),
            ActionOutcome(group_action, ResultKind.NOT_FOUND),
            ActionOutcome(group_action, ResultKind.SKIPPED_BECAME_ACTIVE, "NON_EMPTY_GROUP"),
            ActionOutcome(group_action, ResultKind.FAILED, "boom", retriable=False),
        ]
    )
    assert (done.groups_deleted, done.offsets_deleted) == (1, 2)
    assert (done.skipped_became_active, done.not_found, done.failed, done.retriable_failures) == (1, 1, 1, 0)
    assert done.has_failures


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime(2026, 11, 19, 1, 2, 3, tzinfo=UTC), "2026-11-19T01:02:03Z"),
        (datetime(2026, 11, 19, 1, 2, 3, 250000, tzinfo=UTC), "2026-11-19T01:02:03.250Z"),
        (datetime(2026, 11, 19, 3, 2, 3, tzinfo=timezone(timedelta(hours=2))), "2026-11-19T01:02:03Z"),
    ],
)
def test_timestamps_are_rfc3339_utc_with_z(value: datetime, text: str) -> None:
    assert to_rfc3339(value) == text


def test_naive_timestamps_are_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        to_rfc3339(datetime(2026, 1, 1))


def test_table_is_aligned_and_readable() -> None:
    text = render_table(sample_plan())
    lines = text.splitlines()
    assert lines[0] == "Plan for kafka/ci-groups (DryRun) at 2026-11-22T12:00:00Z, cluster test-cluster"
    header, first, second = lines[2:5]
    assert header.split() == ["ACTION", "GROUP", "KIND", "AGE", "SOURCE", "PARTITIONS", "REASON"]
    for column in ("GROUP", "KIND", "AGE", "SOURCE", "PARTITIONS", "REASON"):
        position = header.index(column)
        assert first[position - 2 : position] == "  " and first[position] != " "
        assert second[position - 2 : position] == "  " and second[position] != " "
    assert first.startswith(
        "DeleteGroup    ci-1   classic  3d4h  offsetsLog  -           group Empty for 3d4h"
    )
    assert "gone[0,1]" in second and " 2d " in second
    assert "Skipped (1):" in text
    assert re.search(r"busy\s+Rebalancing\s+group is PreparingRebalance", text)
    assert (
        "Summary: 3 of 3 groups matched; eligible: 1 group, 2 offsets; planned: 1 group, 2 offsets; "
        "1 skipped" in text
    )
    assert text.endswith("\n")


def test_table_with_outcomes_and_an_empty_plan() -> None:
    plan = sample_plan()
    outcomes = [ActionOutcome(a, ResultKind.DELETED) for a in plan.actions]
    text = render_table(plan, outcomes)
    assert "RESULT" in text.splitlines()[2]
    # Counts in the singular where they are one; no clause for what did not happen.
    assert "Result: 1 group and 2 offsets deleted\n" in text
    empty = decide(policy({}), snapshot(), NOW)
    empty_text = render_table(empty)
    assert "No actions." in empty_text
    assert "Warning: no retention rule is set" in empty_text


def test_blast_radius_is_loud_in_the_table() -> None:
    plan = decide(
        policy({"emptyGroupRetention": "1d"}, limits={"maxDeletionRatio": 0.4}),
        snapshot(group("a", empty_since=logged(days=2)), group("b", kind=GroupKind.SIMPLE)),
        NOW,
    )
    text = render_table(plan)
    assert "BLAST RADIUS EXCEEDED" in text
    assert plan_to_json(plan)["summary"]["blastRadiusExceeded"] is True
    assert plan_to_json(plan)["actions"] == []


def test_compact_partitions() -> None:
    assert compact_partitions([]) == "-"
    assert compact_partitions([tp("b", 2), tp("a", 1), tp("b", 0)]) == "a[1] b[0,2]"
    long = compact_partitions([tp(f"topic-{i}", 0) for i in range(20)], width=30)
    assert len(long) == 30 and long.endswith("...")


def test_action_kind_values_are_the_contract() -> None:
    assert [k.value for k in ActionKind] == ["DeleteGroup", "DeleteOffsets"]
    assert [r.value for r in ResultKind] == [
        "Deleted",
        "SkippedBecameActive",
        "NotFound",
        "Failed",
        "Unknown",
    ]
