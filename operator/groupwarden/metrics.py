"""Prometheus metrics of the operator, labelled by policy namespace/name.

A dedicated registry (not the client's global one) so tests and embedders can have several, and
so the endpoint exports exactly these series plus the process collector.

Per-policy series are exported by the leader only: a replica that loses (or never had) the leader
Lease drops them, so a standby's last values never look like a second opinion to an alert rule.
Every label is bounded by the number of policies (a condition's reason is one of the fixed
`core.status.Reason` values), never by the number of groups.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.process_collector import ProcessCollector

from groupwarden.core.plan import ActionOutcome, OutcomeSummary, PlanSummary
from groupwarden.core.policy import PolicyRef
from groupwarden.core.status import ConditionType, PolicyStatus, Reason

_POLICY = ("namespace", "name")
# The new per-policy series also carry the Kafka cluster (the policy's bootstrap servers as written).
# Not `cluster`: Prometheus setups commonly add a `cluster` label for the Kubernetes cluster.
_POLICY_CLUSTER = (*_POLICY, "kafka_cluster")
# The conditions exported (Reconciling is a transition state; Ready and Stalled are what to page on;
# ClocksPersisted on the policies that decide with first-observed times).
EXPORTED_CONDITIONS = (ConditionType.READY, ConditionType.STALLED, ConditionType.CLOCKS_PERSISTED)
# A successful pass: the run did what the spec asks (Ready=True after having looked at Kafka).
SUCCESS_REASONS = frozenset({Reason.SUCCEEDED.value, Reason.DRY_RUN.value})
# The results of a deletion that need a person: the broker refused it, or its answer was lost.
ATTENTION_OUTCOMES = ("Failed", "Unknown")


@dataclass
class _PolicySeries:
    """The label values of one policy's labelled series, so they can all be removed again."""

    kafka_cluster: str = ""
    conditions: dict[str, tuple[str, str]] = field(default_factory=dict)  # type -> (status, reason)
    results: set[str] = field(default_factory=set)
    group_types: set[str] = field(default_factory=set)
    outcomes: set[str] = field(default_factory=set)


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self._series: dict[tuple[str, str], _PolicySeries] = {}
        # Whether this replica exports per-policy series (the controller sets it from the Lease;
        # True for embedders and unit tests that use the class without leadership).
        self.leading = True
        self.reconcile_duration = Histogram(
            "groupwarden_reconcile_duration_seconds",
            "Duration of one policy run (credentials, gather, decide, execute).",
            _POLICY,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.cluster_pass_duration = Histogram(
            "groupwarden_cluster_pass_duration_seconds",
            "Duration of one cluster pass (one gather and decide for every policy of a cluster, "
            "then the due Enforce plans).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.runs = Counter(
            "groupwarden_runs",
            "Policy runs by result (the Ready condition's reason).",
            (*_POLICY, "result"),
            registry=self.registry,
        )
        self.groups_deleted = Counter(
            "groupwarden_groups_deleted", "Consumer groups deleted.", _POLICY, registry=self.registry
        )
        # Additive: the same deletions by group type (classic, consumer, simple, share, streams),
        # so share/streams cleanups are visible without changing the series above.
        self.groups_deleted_by_type = Counter(
            "groupwarden_groups_deleted_by_type",
            "Groups deleted, by group type.",
            (*_POLICY, "group_type"),
            registry=self.registry,
        )
        self.offsets_deleted = Counter(
            "groupwarden_offsets_deleted", "Partition offsets deleted.", _POLICY, registry=self.registry
        )
        self.actions_skipped = Counter(
            "groupwarden_actions_skipped",
            "Planned deletions the broker refused because a consumer came back.",
            _POLICY,
            registry=self.registry,
        )
        self.groups_eligible = Gauge(
            "groupwarden_groups_eligible",
            "Groups eligible for deletion in the last run.",
            _POLICY,
            registry=self.registry,
        )
        self.offsets_eligible = Gauge(
            "groupwarden_offsets_eligible",
            "Partition offsets eligible for deletion in the last run.",
            _POLICY,
            registry=self.registry,
        )
        self.groups_matched = Gauge(
            "groupwarden_groups_matched",
            "Groups the policy's selector matched in the last run.",
            _POLICY,
            registry=self.registry,
        )
        self.skipped = Gauge(
            "groupwarden_skipped",
            "Items deliberately not acted on in the last run (limits, safety, races).",
            _POLICY,
            registry=self.registry,
        )
        self.leader = Gauge(
            "groupwarden_leader",
            "1 when this replica holds the leader Lease and acts.",
            registry=self.registry,
        )
        self.policies = Gauge(
            "groupwarden_policies", "Policies watched by this replica.", registry=self.registry
        )
        self.kafka_connections = Gauge(
            "groupwarden_kafka_connections", "Open Kafka client connections (pooled).", registry=self.registry
        )
        # Additive (alerting): the policy's conditions, its last success, its interval and cluster.
        self.policy_condition = Gauge(
            "groupwarden_policy_condition",
            "1 for the policy's current status and reason of each exported condition (Ready, Stalled).",
            (*_POLICY_CLUSTER, "condition", "status", "reason"),
            registry=self.registry,
        )
        self.policy_condition_transition = Gauge(
            "groupwarden_policy_condition_last_transition_timestamp_seconds",
            "When the condition last changed its status (the status's lastTransitionTime).",
            (*_POLICY_CLUSTER, "condition"),
            registry=self.registry,
        )
        self.policy_last_success = Gauge(
            "groupwarden_policy_last_success_timestamp_seconds",
            "When the policy's last successful run (Succeeded or DryRun) finished.",
            _POLICY_CLUSTER,
            registry=self.registry,
        )
        self.policy_interval = Gauge(
            "groupwarden_policy_interval_seconds",
            "The policy's spec.interval: how often it is due to run.",
            _POLICY_CLUSTER,
            registry=self.registry,
        )
        self.actions_failed = Counter(
            "groupwarden_actions_failed",
            "Deletions that need attention, by outcome: Failed (refused for another reason than a "
            "consumer coming back) or Unknown (sent, unanswered: the broker may have executed it).",
            (*_POLICY_CLUSTER, "outcome"),
            registry=self.registry,
        )

    def set_leader(self, leader: bool) -> None:
        """This replica gained or lost the leader Lease; a replica that is not the leader exports
        no per-policy series."""
        self.leading = leader
        self.leader.set(1 if leader else 0)
        if not leader:
            for namespace, name in list(self._series):
                self.forget(PolicyRef(namespace, name))

    def start_policy(self, ref: PolicyRef, kafka_cluster: str, group_types: Sequence[str] = ()) -> None:
        """Creates the policy's counters at 0 when the leader first sees it: Prometheus's
        increase() cannot count the first increment of a series that is born non-zero, so the
        deletions of a policy's first runs would be missing from every rate and alert."""
        if not self.leading:
            return
        labels = (ref.namespace, ref.name)
        series = self._series_of(labels, kafka_cluster)
        for counter in (self.groups_deleted, self.offsets_deleted, self.actions_skipped):
            counter.labels(*labels)
        for kind in group_types:  # the kinds the policy selects (spec.selector.groupTypes)
            series.group_types.add(kind)
            self.groups_deleted_by_type.labels(*labels, kind)
        for name in ATTENTION_OUTCOMES:
            series.outcomes.add(name)
            self.actions_failed.labels(*labels, kafka_cluster, name)

    def observe_status(
        self,
        ref: PolicyRef,
        kafka_cluster: str,
        interval_seconds: float | None,
        status: PolicyStatus,
        succeeded_at: datetime | None = None,
    ) -> None:
        """The policy's status as this replica wrote it (or, when it becomes the leader, as the
        object shows it): conditions, interval, and the last success when this status is one."""
        if not self.leading:
            return
        labels = (ref.namespace, ref.name)
        series = self._series_of(labels, kafka_cluster)
        by_type = {c.type: c for c in status.conditions}
        for kind in EXPORTED_CONDITIONS:
            current = by_type.get(kind.value)
            previous = series.conditions.pop(kind.value, None)
            if previous is not None and (current is None or previous != (current.status, current.reason)):
                self.policy_condition.remove(*labels, kafka_cluster, kind.value, *previous)
            if current is None:
                with contextlib.suppress(KeyError):
                    self.policy_condition_transition.remove(*labels, kafka_cluster, kind.value)
                continue
            series.conditions[kind.value] = (current.status, current.reason)
            condition = (kafka_cluster, kind.value, current.status, current.reason)
            self.policy_condition.labels(*labels, *condition).set(1)
            self.policy_condition_transition.labels(*labels, kafka_cluster, kind.value).set(
                current.last_transition_time.timestamp()
            )
        if interval_seconds is not None:
            self.policy_interval.labels(*labels, kafka_cluster).set(interval_seconds)
        else:
            with contextlib.suppress(KeyError):
                self.policy_interval.remove(*labels, kafka_cluster)
        if succeeded_at is not None:
            self.policy_last_success.labels(*labels, kafka_cluster).set(succeeded_at.timestamp())

    def _series_of(self, labels: tuple[str, str], kafka_cluster: str) -> _PolicySeries:
        series = self._series.get(labels)
        if series is not None and series.kafka_cluster != kafka_cluster:
            # The policy moved to another cluster: its cluster-labelled series start afresh.
            self._forget_cluster_series(labels, series)
            series.kafka_cluster = kafka_cluster
        if series is None:
            series = self._series[labels] = _PolicySeries(kafka_cluster=kafka_cluster)
        return series

    def _forget_cluster_series(self, labels: tuple[str, str], series: _PolicySeries) -> None:
        cluster = series.kafka_cluster
        for kind, (status, reason) in series.conditions.items():
            self.policy_condition.remove(*labels, cluster, kind, status, reason)
            with contextlib.suppress(KeyError):
                self.policy_condition_transition.remove(*labels, cluster, kind)
        series.conditions.clear()
        for metric in (self.policy_interval, self.policy_last_success):
            with contextlib.suppress(KeyError):
                metric.remove(*labels, cluster)
        for outcome in series.outcomes:
            self.actions_failed.remove(*labels, cluster, outcome)
        series.outcomes.clear()

    def observe_run(
        self,
        ref: PolicyRef,
        result: str,
        duration_seconds: float,
        plan: PlanSummary | None,
        done: OutcomeSummary,
        outcomes: Sequence[ActionOutcome] = (),
        kafka_cluster: str = "",
    ) -> None:
        if not self.leading:
            return  # a run that ended after the Lease was lost: the next leader reports
        labels = (ref.namespace, ref.name)
        series = self._series_of(labels, kafka_cluster)
        self.reconcile_duration.labels(*labels).observe(duration_seconds)
        self.runs.labels(*labels, result).inc()
        series.results.add(result)
        self.groups_deleted.labels(*labels).inc(done.groups_deleted)
        for outcome in outcomes:
            if outcome.groups_deleted:
                kind = outcome.action.group_kind.value
                series.group_types.add(kind)
                self.groups_deleted_by_type.labels(*labels, kind).inc(outcome.groups_deleted)
        for name, count in zip(ATTENTION_OUTCOMES, (done.failed, done.unknown), strict=True):
            # Created at 0 on the first run, so increase() sees the first failure of a policy.
            series.outcomes.add(name)
            self.actions_failed.labels(*labels, kafka_cluster, name).inc(count)
        self.offsets_deleted.labels(*labels).inc(done.offsets_deleted)
        self.actions_skipped.labels(*labels).inc(done.skipped_became_active)
        if plan is not None:
            self.groups_eligible.labels(*labels).set(plan.groups_eligible)
            self.offsets_eligible.labels(*labels).set(plan.offsets_eligible)
            self.groups_matched.labels(*labels).set(plan.groups_matched)
            self.skipped.labels(*labels).set(plan.skipped + done.skipped_became_active)

    def forget(self, ref: PolicyRef) -> None:
        """Drops a deleted policy's series (no stale gauges for policies that are gone)."""
        labels = (ref.namespace, ref.name)
        for metric in (
            self.reconcile_duration,
            self.groups_deleted,
            self.offsets_deleted,
            self.actions_skipped,
            self.groups_eligible,
            self.offsets_eligible,
            self.groups_matched,
            self.skipped,
        ):
            with contextlib.suppress(KeyError):
                metric.remove(*labels)
        series = self._series.pop(labels, None)
        if series is None:
            return
        for result in series.results:
            self.runs.remove(*labels, result)
        for kind in series.group_types:
            self.groups_deleted_by_type.remove(*labels, kind)
        self._forget_cluster_series(labels, series)

    def serve(self, port: int, address: str = "0.0.0.0") -> Callable[[], None]:
        """Starts the /metrics endpoint in a thread; returns the function that stops it."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return server.shutdown
