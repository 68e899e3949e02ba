"""RunReport -> PolicyStatus (the CRD's status schema, core/status.py). Pure: no I/O, no clock.

kstatus semantics (what Flux / Argo CD compute health from):
- Ready: True when the last run did what the spec asks (Succeeded, DryRun, Suspended).
- Reconciling: True while a new generation is being applied or a transient failure is retried.
- Stalled: True when a person has to act (invalid spec, missing Secret, denied, breaker tripped).
lastTransitionTime only moves when a condition's status changes.
"""

from __future__ import annotations

from datetime import datetime

from groupwarden.controller.report import RunReport
from groupwarden.core.plan import Action, ActionKind
from groupwarden.core.policy import Mode
from groupwarden.core.snapshot import TimestampSource
from groupwarden.core.status import (
    STATUS_PLAN_LIMIT,
    ClocksReason,
    Condition,
    ConditionType,
    LastRun,
    PlannedAction,
    PlannedPartition,
    PolicyStatus,
    Reason,
    RunSummary,
    Totals,
)

_TRUE, _FALSE, _UNKNOWN = "True", "False", "Unknown"

# reason -> (Ready, Reconciling, Stalled)
_CONDITIONS: dict[Reason, tuple[str, str, str]] = {
    Reason.SUCCEEDED: (_TRUE, _FALSE, _FALSE),
    Reason.DRY_RUN: (_TRUE, _FALSE, _FALSE),
    Reason.SUSPENDED: (_TRUE, _FALSE, _FALSE),
    Reason.RECONCILING: (_UNKNOWN, _TRUE, _FALSE),
    Reason.WAITING_FOR_KAFKA: (_UNKNOWN, _TRUE, _FALSE),
    Reason.PARTIAL_FAILURE: (_FALSE, _FALSE, _FALSE),
    Reason.KAFKA_UNAVAILABLE: (_FALSE, _TRUE, _FALSE),
    Reason.AUTHORIZATION_FAILED: (_FALSE, _FALSE, _TRUE),
    Reason.AUTHENTICATION_FAILED: (_FALSE, _FALSE, _TRUE),
    Reason.TLS_HANDSHAKE_FAILED: (_FALSE, _FALSE, _TRUE),
    Reason.INVALID_SPEC: (_FALSE, _FALSE, _TRUE),
    Reason.SECRET_NOT_FOUND: (_FALSE, _FALSE, _TRUE),
    Reason.BLAST_RADIUS_EXCEEDED: (_FALSE, _FALSE, _TRUE),
    Reason.FORBIDDEN: (_FALSE, _FALSE, _TRUE),
    Reason.RETENTION_BELOW_MINIMUM: (_FALSE, _FALSE, _TRUE),
    # The trail could not be written, so nothing was deleted; retried like an outage.
    Reason.AUDIT_UNAVAILABLE: (_FALSE, _TRUE, _FALSE),
    # A groupwarden bug, not the cluster: retried (it may depend on data that changes), and loud.
    Reason.INTERNAL_ERROR: (_FALSE, _TRUE, _FALSE),
}


def seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def conditions_for(
    reason: Reason, message: str, generation: int, now: datetime, previous: list[Condition]
) -> list[Condition]:
    ready, reconciling, stalled = _CONDITIONS[reason]
    before = {c.type: c for c in previous}
    result: list[Condition] = []
    for kind, status in (
        (ConditionType.READY, ready),
        (ConditionType.RECONCILING, reconciling),
        (ConditionType.STALLED, stalled),
    ):
        old = before.get(kind.value)
        since = old.last_transition_time if old is not None and old.status == status else seconds(now)
        # A False Reconciling/Stalled carries the run's reason too: one place to read the story.
        result.append(
            Condition(
                type=kind.value,
                status=status,
                reason=reason.value,
                message=message[:1024],
                last_transition_time=since,
                observed_generation=generation,
            )
        )
    # Conditions of their own (ClocksPersisted) are not about the run's reason: kept as they were.
    result.extend(c for c in previous if c.type not in _RUN_CONDITIONS)
    return result


_RUN_CONDITIONS = frozenset(
    {ConditionType.READY.value, ConditionType.RECONCILING.value, ConditionType.STALLED.value}
)


def with_clocks(
    conditions: list[Condition], report: RunReport, generation: int, now: datetime
) -> list[Condition]:
    """`conditions` with ClocksPersisted set from the run's clock keeping; dropped when the run
    dated everything from the offsets log; left as it was by a run that did not read Kafka."""
    kind = ConditionType.CLOCKS_PERSISTED.value
    clocks = report.clocks
    if clocks is None:
        if report.timestamp_source == TimestampSource.OFFSETS_LOG.value:
            return [c for c in conditions if c.type != kind]
        return conditions
    old = next((c for c in conditions if c.type == kind), None)
    status = _TRUE if clocks.persisted else _FALSE
    since = old.last_transition_time if old is not None and old.status == status else seconds(now)
    reason = ClocksReason.STORED if clocks.persisted else ClocksReason.STORE_UNAVAILABLE
    condition = Condition(
        type=kind,
        status=status,
        reason=reason.value,
        message=clocks.message[:1024],
        last_transition_time=since,
        observed_generation=generation,
    )
    return [*(c for c in conditions if c.type != kind), condition]


def reconciling_status(previous: PolicyStatus, generation: int, now: datetime) -> PolicyStatus:
    """Written when a run for a new generation starts (kstatus: InProgress until it ends)."""
    status = previous.model_copy(deep=True)
    status.conditions = conditions_for(
        Reason.RECONCILING, f"applying generation {generation}", generation, now, previous.conditions
    )
    return status


def waiting_status(previous: PolicyStatus, generation: int, message: str, now: datetime) -> PolicyStatus:
    """Written while a pass waits out a failover (controller/kafka_wait.py): Reconciling, with
    what Kafka answers; the rest of the status (plan, totals, lastRun) stays the last run's."""
    status = previous.model_copy(deep=True)
    status.conditions = conditions_for(
        Reason.WAITING_FOR_KAFKA, message, generation, now, previous.conditions
    )
    return status


def build_status(
    report: RunReport, previous: PolicyStatus, totals: Totals, next_run: datetime | None
) -> PolicyStatus:
    status = previous.model_copy(deep=True)
    status.observed_generation = report.generation
    status.conditions = with_clocks(
        conditions_for(
            report.reason, report.message, report.generation, report.finished_at, previous.conditions
        ),
        report,
        report.generation,
        report.finished_at,
    )
    status.totals = totals
    status.next_run_time = seconds(next_run) if next_run is not None else None
    if report.reason in (
        Reason.SUSPENDED,
        Reason.INVALID_SPEC,
        Reason.FORBIDDEN,
        Reason.RETENTION_BELOW_MINIMUM,
    ):
        status.plan = []
    plan = report.plan
    if plan is None:
        return status
    done = report.done
    status.last_run = LastRun(
        start_time=seconds(report.started_at),
        finish_time=seconds(report.finished_at),
        duration_seconds=round(report.duration_seconds, 3),
        mode=plan.mode.value,
        timestamp_source=report.timestamp_source or "",
    )
    summary = plan.summary
    status.summary = RunSummary(
        groups_matched=summary.groups_matched,
        groups_eligible=summary.groups_eligible,
        groups_deleted=done.groups_deleted,
        offsets_eligible=summary.offsets_eligible,
        offsets_deleted=done.offsets_deleted,
        skipped=summary.skipped + done.skipped_became_active,
    )
    status.plan = planned_actions(plan.actions) if plan.mode is Mode.DRY_RUN else []
    status.overlapping_policies = [str(ref) for ref in plan.overlapping_policies]
    status.eligible = f"{summary.groups_eligible}/{summary.offsets_eligible}"
    status.deleted = f"{done.groups_deleted}/{done.offsets_deleted}"
    return status


def planned_actions(actions: tuple[Action, ...]) -> list[PlannedAction]:
    return [
        PlannedAction(
            action=a.kind.value,
            group=a.group_id,
            group_kind=a.group_kind.value,
            partitions=[PlannedPartition(topic=p.topic, partition=p.partition) for p in a.partitions]
            if a.kind is ActionKind.DELETE_OFFSETS
            else [],
            internal_topics=list(a.internal_topics) or None,
            reason=a.reason,
            eligible_since=seconds(a.eligible_since),
            timestamp_source=a.timestamp_source.value,
        )
        for a in actions[:STATUS_PLAN_LIMIT]
    ]


def status_document(status: PolicyStatus) -> dict[str, object]:
    """JSON for a merge patch of the status subresource: None fields become null (= removed)."""
    return status.model_dump(mode="json", by_alias=True)
