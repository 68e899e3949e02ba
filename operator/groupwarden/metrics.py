"""Prometheus metrics of the operator, labelled by policy namespace/name.

A dedicated registry (not the client's global one) so tests and embedders can have several, and
so the endpoint exports exactly these series plus the process collector.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.process_collector import ProcessCollector

from groupwarden.core.plan import ActionOutcome, OutcomeSummary, PlanSummary
from groupwarden.core.policy import PolicyRef

_POLICY = ("namespace", "name")


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        ProcessCollector(registry=self.registry)
        self._results: dict[tuple[str, str], set[str]] = {}
        self._types: dict[tuple[str, str], set[str]] = {}
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
        # Additive (issue 14): the same deletions by group type (classic, consumer, simple, share,
        # streams), so share/streams cleanups are visible without changing the series above.
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

    def observe_run(
        self,
        ref: PolicyRef,
        result: str,
        duration_seconds: float,
        plan: PlanSummary | None,
        done: OutcomeSummary,
        outcomes: Sequence[ActionOutcome] = (),
    ) -> None:
        labels = (ref.namespace, ref.name)
        self.reconcile_duration.labels(*labels).observe(duration_seconds)
        self.runs.labels(*labels, result).inc()
        self._results.setdefault(labels, set()).add(result)
        self.groups_deleted.labels(*labels).inc(done.groups_deleted)
        for outcome in outcomes:
            if outcome.groups_deleted:
                kind = outcome.action.group_kind.value
                self._types.setdefault(labels, set()).add(kind)
                self.groups_deleted_by_type.labels(*labels, kind).inc(outcome.groups_deleted)
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
        for result in self._results.pop(labels, set()):
            self.runs.remove(*labels, result)
        for kind in self._types.pop(labels, set()):
            self.groups_deleted_by_type.remove(*labels, kind)

    def serve(self, port: int, address: str = "0.0.0.0") -> Callable[[], None]:
        """Starts the /metrics endpoint in a thread; returns the function that stops it."""
        server, _thread = start_http_server(port, addr=address, registry=self.registry)
        return server.shutdown
