"""Our status is kstatus-compatible: the rules Flux, Argo CD and `kubectl wait`-style tools apply
(sigs.k8s.io/cli-utils/pkg/kstatus, generic resource rules) give the expected health for the
status objects the operator's status builder writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

import pytest

from groupwarden.controller.report import RunReport
from groupwarden.controller.status_builder import (
    build_status,
    reconciling_status,
    status_document,
    waiting_status,
)
from groupwarden.core.plan import Plan, PlanSummary
from groupwarden.core.policy import Mode, PolicyRef
from groupwarden.core.status import PolicyStatus, Reason, Totals

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
REF = PolicyRef("team-a", "ci-groups")


class KStatus(StrEnum):
    CURRENT = "Current"
    IN_PROGRESS = "InProgress"
    FAILED = "Failed"


def kstatus(obj: dict[str, Any]) -> KStatus:
    """kstatus' generic rules, in its order: a status for an older generation is InProgress;
    Reconciling=True is InProgress; Stalled=True is Failed; otherwise Current."""
    status = obj.get("status") or {}
    generation = obj.get("metadata", {}).get("generation")
    if generation is not None and status.get("observedGeneration") != generation:
        return KStatus.IN_PROGRESS
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    if conditions.get("Reconciling", {}).get("status") == "True":
        return KStatus.IN_PROGRESS
    if conditions.get("Stalled", {}).get("status") == "True":
        return KStatus.FAILED
    return KStatus.CURRENT


def _plan(mode: Mode) -> Plan:
    summary = PlanSummary(
        groups_total=10, groups_matched=4, groups_eligible=2, offsets_eligible=0,
        groups_planned=2, offsets_planned=0, skipped=0,
    )  # fmt: skip
    return Plan(policy=REF, generated_at=NOW, mode=mode, actions=(), skipped=(), summary=summary)


def _report(reason: Reason, generation: int = 3, plan: Plan | None = None) -> RunReport:
    return RunReport(
        ref=REF,
        uid="uid-1",
        generation=generation,
        reason=reason,
        message=f"{reason.value} message",
        started_at=NOW - timedelta(seconds=2),
        finished_at=NOW,
        plan=plan,
    )


def _object(status: PolicyStatus, generation: int = 3) -> dict[str, Any]:
    return {"metadata": {"generation": generation}, "status": status_document(status)}


def _status(report: RunReport, previous: PolicyStatus | None = None) -> PolicyStatus:
    return build_status(report, previous or PolicyStatus(), Totals(), NOW + timedelta(minutes=5))


RUN_KSTATUS = [
    (_report(Reason.SUCCEEDED, plan=_plan(Mode.ENFORCE)), KStatus.CURRENT),
    (_report(Reason.DRY_RUN, plan=_plan(Mode.DRY_RUN)), KStatus.CURRENT),
    (_report(Reason.SUSPENDED), KStatus.CURRENT),
    (_report(Reason.KAFKA_UNAVAILABLE), KStatus.IN_PROGRESS),  # retried with backoff by itself
    (_report(Reason.INVALID_SPEC), KStatus.FAILED),  # a person has to fix the spec
    (_report(Reason.SECRET_NOT_FOUND), KStatus.FAILED),
    (_report(Reason.AUTHORIZATION_FAILED), KStatus.FAILED),
    (_report(Reason.AUTHENTICATION_FAILED), KStatus.FAILED),  # wrong password: a person fixes it
    (_report(Reason.TLS_HANDSHAKE_FAILED), KStatus.FAILED),  # a CA that did not sign the broker's cert
    (_report(Reason.BLAST_RADIUS_EXCEEDED, plan=_plan(Mode.ENFORCE)), KStatus.FAILED),
    (_report(Reason.FORBIDDEN), KStatus.FAILED),  # the operator's allowlist or credentials rule
    (_report(Reason.RETENTION_BELOW_MINIMUM), KStatus.FAILED),
    (_report(Reason.AUDIT_UNAVAILABLE, plan=_plan(Mode.ENFORCE)), KStatus.IN_PROGRESS),  # retried
    (_report(Reason.INTERNAL_ERROR), KStatus.IN_PROGRESS),  # a bug of ours: retried, loud in the log
    # Some actions failed (not races): the run completed and the next is due after the interval,
    # so kstatus says Current while Ready=False (and ActionFailed Warnings) say what failed.
    (_report(Reason.PARTIAL_FAILURE, plan=_plan(Mode.ENFORCE)), KStatus.CURRENT),
]


def test_every_run_reason_has_its_kstatus_checked() -> None:
    # Reconciling and WaitingForKafka are in-between states (written during a run), checked by
    # the new-generation and failover tests below.
    in_between = {Reason.RECONCILING, Reason.WAITING_FOR_KAFKA}
    assert {report.reason for report, _ in RUN_KSTATUS} == set(Reason) - in_between


@pytest.mark.parametrize(
    ("report", "expected"),
    RUN_KSTATUS,
    ids=lambda v: v.reason.value if isinstance(v, RunReport) else str(v),
)
def test_status_of_a_run_has_the_expected_kstatus(report: RunReport, expected: KStatus) -> None:
    obj = _object(_status(report))
    assert kstatus(obj) is expected
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    # Ready (what Argo CD's health check and Flux's HelmRelease/Kustomization waits read) agrees.
    healthy = expected is KStatus.CURRENT and report.reason is not Reason.PARTIAL_FAILURE
    assert ready["status"] == ("True" if healthy else "False")
    assert all(c["observedGeneration"] == 3 for c in obj["status"]["conditions"])


def test_a_new_generation_is_in_progress_until_its_run_ends() -> None:
    done = _status(_report(Reason.SUCCEEDED, generation=3, plan=_plan(Mode.ENFORCE)))
    # The spec changed (generation 4): the old status is not Current any more...
    assert kstatus(_object(done, generation=4)) is KStatus.IN_PROGRESS
    # ...and the status written when the run for generation 4 starts says Reconciling...
    started = reconciling_status(done, 4, NOW)
    assert kstatus(_object(started, generation=4)) is KStatus.IN_PROGRESS
    # ...until the run's own status lands.
    finished = _status(_report(Reason.SUCCEEDED, generation=4, plan=_plan(Mode.ENFORCE)), started)
    assert kstatus(_object(finished, generation=4)) is KStatus.CURRENT


def test_a_run_waiting_out_a_failover_is_in_progress_and_its_result_is_current() -> None:
    done = _status(_report(Reason.SUCCEEDED, plan=_plan(Mode.ENFORCE)))
    waiting = waiting_status(
        done, 3, "waiting for Kafka: ListGroups on broker 2: COORDINATOR_LOAD_IN_PROGRESS", NOW
    )
    assert kstatus(_object(waiting)) is KStatus.IN_PROGRESS
    conditions = {c["type"]: (c["status"], c["reason"]) for c in _object(waiting)["status"]["conditions"]}
    assert conditions["Reconciling"] == ("True", "WaitingForKafka")
    assert conditions["Stalled"][0] == "False"  # nobody has to act: it rides through
    assert waiting.totals == done.totals and waiting.last_run == done.last_run  # the last run's, kept
    ridden_through = _status(_report(Reason.SUCCEEDED, plan=_plan(Mode.ENFORCE)), waiting)
    assert kstatus(_object(ridden_through)) is KStatus.CURRENT


def test_recovery_from_a_kafka_outage_returns_to_current() -> None:
    outage = _status(_report(Reason.KAFKA_UNAVAILABLE))
    assert kstatus(_object(outage)) is KStatus.IN_PROGRESS
    recovered = _status(_report(Reason.SUCCEEDED, plan=_plan(Mode.ENFORCE)), outage)
    assert kstatus(_object(recovered)) is KStatus.CURRENT
    stalled = {c["type"]: c["status"] for c in _object(recovered)["status"]["conditions"]}
    assert stalled == {"Ready": "True", "Reconciling": "False", "Stalled": "False"}
