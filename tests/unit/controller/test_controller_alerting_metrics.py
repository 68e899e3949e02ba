"""The series the alert rules stand on (deploy/prometheus/groupwarden-alerts.yaml): the policy's
conditions with their reason, its last success, interval and Kafka cluster, failed/unknown
deletions, and leadership (a replica that is not the leader exports no per-policy series)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest
from controller_harness import DAY_MS, Harness, make_harness, observe_quietly, policy_body, run_async
from prometheus_client import CollectorRegistry

from groupwarden.controller.leadership import Leadership
from groupwarden.core.plan import OutcomeSummary
from groupwarden.core.policy import PolicyRef
from groupwarden.core.status import Condition, LastRun, PolicyStatus
from groupwarden.metrics import OperatorMetrics
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

POLICY = {"namespace": "team", "name": "p"}
CLUSTER = {**POLICY, "kafka_cluster": "kafka:9092"}
RULES = {"emptyGroupRetention": "1d"}
LIMITS = {"maxDeletionRatio": 1}


def policy_series(registry: CollectorRegistry) -> list[tuple[str, dict[str, str]]]:
    """Every sample that carries a policy's labels."""
    return [
        (sample.name, dict(sample.labels))
        for family in registry.collect()
        for sample in family.samples
        if "name" in sample.labels
    ]


def conditions(h: Harness) -> dict[str, tuple[str, str]]:
    """condition type -> (status, reason) of the exported `groupwarden_policy_condition` series."""
    found = {}
    for name, labels in policy_series(h.metrics.registry):
        if name == "groupwarden_policy_condition":
            assert h.metrics.registry.get_sample_value(name, labels) == 1
            found[labels["condition"]] = (labels["status"], labels["reason"])
    return found


def stale_cluster(count: int) -> FakeKafka:
    fake = FakeKafka(topics={"orders"})
    old = fake.now_ms - 3 * DAY_MS
    for i in range(count):
        fake.add_group(f"ci-{i}", offsets={("orders", 0): 1}, committed_at_ms=old, empty_since_ms=old)
    return fake


def test_a_run_exports_its_conditions_interval_cluster_and_last_success(tmp_path: Path) -> None:
    h = make_harness(tmp_path, stale_cluster(2))

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, interval="90s"))
        await h.reconcile("p")

    run_async(scenario)
    sample = h.metrics.registry.get_sample_value
    assert conditions(h) == {"Ready": ("True", "DryRun"), "Stalled": ("False", "DryRun")}
    assert sample("groupwarden_policy_interval_seconds", CLUSTER) == 90
    assert sample("groupwarden_policy_last_success_timestamp_seconds", CLUSTER) == h.now().timestamp()
    transition = h.condition("p")["lastTransitionTime"]
    assert (
        sample(
            "groupwarden_policy_condition_last_transition_timestamp_seconds",
            {**CLUSTER, "condition": "Ready"},
        )
        == datetime.fromisoformat(transition).timestamp()
    )
    for outcome in ("Failed", "Unknown"):  # present at 0, so the first failure is an increase
        assert sample("groupwarden_actions_failed_total", {**CLUSTER, "outcome": outcome}) == 0


def test_the_breaker_is_a_stalled_condition_with_its_reason_and_no_success(tmp_path: Path) -> None:
    h = make_harness(tmp_path, stale_cluster(4))

    async def scenario() -> None:
        body = policy_body("p", rules=RULES, mode="Enforce", limits={"maxDeletionRatio": 0.25})
        await observe_quietly(h, body)
        await h.reconcile("p")

    run_async(scenario)
    assert h.condition("p")["reason"] == "BlastRadiusExceeded"
    assert conditions(h) == {
        "Ready": ("False", "BlastRadiusExceeded"),
        "Stalled": ("True", "BlastRadiusExceeded"),
    }
    assert (
        h.metrics.registry.get_sample_value("groupwarden_policy_last_success_timestamp_seconds", CLUSTER)
        is None
    )


def test_a_changed_reason_replaces_the_series_one_per_condition(tmp_path: Path) -> None:
    """The reason is a label: the old value's series goes, so `== 1` never matches two states."""
    fake = stale_cluster(1)
    h = make_harness(tmp_path, fake)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        await h.reconcile("p")
        fake.unavailable = True
        await h.reconcile("p")

    run_async(scenario)
    assert conditions(h) == {"Ready": ("False", "KafkaUnavailable"), "Stalled": ("False", "KafkaUnavailable")}
    # The earlier success stays: "no success for N intervals" is measured from it.
    assert h.metrics.registry.get_sample_value("groupwarden_policy_last_success_timestamp_seconds", CLUSTER)


def test_label_cardinality_is_bounded_by_policies_not_groups(tmp_path: Path) -> None:
    few, many = stale_cluster(2), stale_cluster(200)
    counts = []
    for fake in (few, many):
        h = make_harness(tmp_path, fake)

        async def scenario(h: Harness = h) -> None:
            await observe_quietly(h, policy_body("p", rules=RULES, mode="Enforce", limits=LIMITS))
            await h.reconcile("p")
            await h.reconcile("p")

        run_async(scenario)
        series = policy_series(h.metrics.registry)
        counts.append(len(series))
        assert not any(key in labels for _, labels in series for key in ("group", "topic", "partition"))
    assert counts[0] == counts[1]


def test_failed_and_unknown_deletions_are_counted_by_outcome() -> None:
    metrics = OperatorMetrics()
    ref = PolicyRef("team", "p")
    done = OutcomeSummary(failed=1, unknown=1)  # what summarize_outcomes makes of the two results
    metrics.observe_run(ref, "PartialFailure", 0.1, None, done, kafka_cluster="kafka:9092")
    metrics.observe_run(ref, "PartialFailure", 0.1, None, done, kafka_cluster="kafka:9092")
    sample = metrics.registry.get_sample_value
    assert sample("groupwarden_actions_failed_total", {**CLUSTER, "outcome": "Failed"}) == 2
    assert sample("groupwarden_actions_failed_total", {**CLUSTER, "outcome": "Unknown"}) == 2


def test_a_policy_moved_to_another_cluster_keeps_no_series_of_the_old_one() -> None:
    metrics = OperatorMetrics()
    ref = PolicyRef("team", "p")
    now = datetime.now(UTC)
    ready = Condition(type="Ready", status="True", reason="DryRun", last_transition_time=now)
    status = PolicyStatus(conditions=[ready])
    metrics.observe_status(ref, "old:9092", 60, status, succeeded_at=now)
    metrics.observe_status(ref, "new:9092", 60, status)
    clusters = {
        labels["kafka_cluster"] for _, labels in policy_series(metrics.registry) if "kafka_cluster" in labels
    }
    assert clusters == {"new:9092"}


class Switch:
    """A Leadership a test can flip."""

    def __init__(self, leader: bool) -> None:
        self.is_leader = leader
        self._event = asyncio.Event()

    async def wait_until_leader(self) -> None:
        while not self.is_leader:
            await self._event.wait()


def test_only_the_leader_exports_policy_series_and_a_new_leader_starts_from_the_status(
    tmp_path: Path,
) -> None:
    switch = Switch(leader=True)
    leadership: Leadership = switch
    h = make_harness(tmp_path, stale_cluster(1), leadership=leadership)
    finished = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
    earlier = {
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Succeeded",
                "lastTransitionTime": "2026-11-26T11:00:00Z",
            },
            {
                "type": "Stalled",
                "status": "False",
                "reason": "Succeeded",
                "lastTransitionTime": "2026-11-26T11:00:00Z",
            },
        ],
        "lastRun": LastRun(
            start_time=finished,
            finish_time=finished,
            duration_seconds=1,
            mode="Enforce",
            timestamp_source="observed",
        ).model_dump(mode="json", by_alias=True),
    }
    sample = h.metrics.registry.get_sample_value

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, status=earlier))
        # Seen as the leader: the object's status is exported before this replica's first run.
        assert conditions(h) == {"Ready": ("True", "Succeeded"), "Stalled": ("False", "Succeeded")}
        assert sample("groupwarden_policy_last_success_timestamp_seconds", CLUSTER) == finished.timestamp()
        await h.reconcile("p")
        assert sample("groupwarden_runs_total", {**POLICY, "result": "DryRun"}) == 1

        switch.is_leader = False
        h.controller.leadership_changed(False)
        assert policy_series(h.metrics.registry) == []
        assert sample("groupwarden_leader", {}) == 0
        await h.reconcile("p")  # a run that ends after the Lease was lost exports nothing
        assert policy_series(h.metrics.registry) == []

        switch.is_leader = True
        h.controller.leadership_changed(True)
        assert sample("groupwarden_leader", {}) == 1
        assert conditions(h)["Ready"][0] == "True"  # from the status, at once

    run_async(scenario)


def test_a_replica_that_has_not_won_the_lease_exports_no_policy_series(tmp_path: Path) -> None:
    switch = Switch(leader=False)
    leadership: Leadership = switch
    h = make_harness(tmp_path, stale_cluster(1), leadership=leadership)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES))

    run_async(scenario)
    assert h.metrics.registry.get_sample_value("groupwarden_leader", {}) == 0
    assert policy_series(h.metrics.registry) == []
    assert h.metrics.registry.get_sample_value("groupwarden_policies", {}) == 1


def test_the_leader_creates_a_policys_counters_at_zero_before_its_first_run(tmp_path: Path) -> None:
    """increase() in Prometheus misses the first increment of a series born non-zero."""
    h = make_harness(tmp_path, stale_cluster(1))

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))

    run_async(scenario)
    sample = h.metrics.registry.get_sample_value
    assert sample("groupwarden_groups_deleted_total", POLICY) == 0
    assert sample("groupwarden_offsets_deleted_total", POLICY) == 0
    assert sample("groupwarden_actions_failed_total", {**CLUSTER, "outcome": "Unknown"}) == 0
    for kind in ("classic", "consumer", "simple"):  # the default groupTypes
        assert sample("groupwarden_groups_deleted_by_type_total", {**POLICY, "group_type": kind}) == 0
    assert sample("groupwarden_groups_deleted_by_type_total", {**POLICY, "group_type": "share"}) is None
