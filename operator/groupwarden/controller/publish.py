"""A finished run -> status patch, Events, metrics and one log line. Kubernetes calls block, so
they run in the default thread pool (never in the Kafka pool: a slow cluster must not delay them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from groupwarden.controller.events import LastAnnounced, events_for, outcome_events
from groupwarden.controller.ports import EventPoster, StatusWriter
from groupwarden.controller.registry import PolicyEntry
from groupwarden.controller.report import RunReport
from groupwarden.controller.status_builder import (
    build_status,
    reconciling_status,
    status_document,
    waiting_status,
)
from groupwarden.core.plan import ActionOutcome
from groupwarden.core.status import ConditionType, PolicyStatus, Totals
from groupwarden.metrics import SUCCESS_REASONS, OperatorMetrics

log = logging.getLogger(__name__)


@dataclass
class PolicyRunState:
    """What one policy's worker keeps between runs (dies with the worker): the status it last
    wrote, the events it last posted, its consecutive failures and when the policy runs next."""

    events: LastAnnounced
    # The status this process last wrote: newer than what the watch may have delivered so far.
    written: PolicyStatus | None = None
    failures: int = 0  # consecutive retried failures (backoff)
    # generation -> the worker decided when that generation runs next.
    generation: int | None = None
    next_due: datetime | None = None

    @classmethod
    def for_entry(cls, entry: PolicyEntry) -> PolicyRunState:
        return cls(events=LastAnnounced.from_status(entry.status))

    def previous_status(self, entry: PolicyEntry) -> PolicyStatus:
        return self.written if self.written is not None else entry.status


def cumulative(previous: Totals | None, seen: Totals | None, groups: int, offsets: int) -> Totals:
    """Totals only grow: the larger of what we wrote and what the object shows (another replica
    may have written since), plus this run."""
    a = previous or Totals()
    b = seen or Totals()
    return Totals(
        groups_deleted=max(a.groups_deleted, b.groups_deleted) + groups,
        offsets_deleted=max(a.offsets_deleted, b.offsets_deleted) + offsets,
    )


class Publisher:
    def __init__(self, status: StatusWriter, events: EventPoster, metrics: OperatorMetrics) -> None:
        self._status = status
        self._events = events
        self._metrics = metrics

    def post_outcomes(self, entry: PolicyEntry, outcomes: Sequence[ActionOutcome]) -> None:
        """Blocking (called from the Kafka thread right after a deletion step)."""
        for event in outcome_events(outcomes):
            self._events.post(entry.ref, entry.uid, event.type, event.reason, event.message)

    async def mark_reconciling(self, entry: PolicyEntry, memory: PolicyRunState, now: datetime) -> None:
        status = reconciling_status(memory.previous_status(entry), entry.generation, now)
        observe_status(self._metrics, entry, status)
        await self._write(entry, status, memory)

    async def mark_waiting(
        self, entry: PolicyEntry, memory: PolicyRunState, message: str, now: datetime
    ) -> None:
        """A pass waits out a Kafka failover (controller/kafka_wait.py): Reconciling, no Event."""
        status = waiting_status(memory.previous_status(entry), entry.generation, message, now)
        observe_status(self._metrics, entry, status)
        await self._write(entry, status, memory)

    async def publish(
        self,
        report: RunReport,
        entry: PolicyEntry,
        memory: PolicyRunState,
        next_run: datetime | None,
        write_status: bool = True,
    ) -> bool:
        """Returns False when the policy object is gone (404 on the status write)."""
        done = report.done
        self._metrics.observe_run(
            report.ref,
            report.reason.value,
            report.duration_seconds,
            report.plan.summary if report.plan else None,
            done,
            report.outcomes,
            kafka_cluster=entry.kafka_cluster,
        )
        log.log(
            logging.WARNING if report.retried else logging.INFO,
            "policy %s generation %d: %s: %s (%.2fs)",
            report.ref,
            report.generation,
            report.reason.value,
            report.message,
            report.duration_seconds,
        )
        for event in events_for(report, memory.events):
            await asyncio.to_thread(
                self._events.post, report.ref, report.uid, event.type, event.reason, event.message
            )
        if not write_status:
            return True
        previous = memory.previous_status(entry)
        seen = entry.status.totals
        totals = cumulative(previous.totals, seen, done.groups_deleted, done.offsets_deleted)
        status = build_status(report, previous, totals, next_run)
        succeeded = report.reason.value in SUCCESS_REASONS and report.aborted is None
        observe_status(self._metrics, entry, status, report.finished_at if succeeded else None)
        return await self._write(entry, status, memory)

    async def _write(self, entry: PolicyEntry, status: PolicyStatus, memory: PolicyRunState) -> bool:
        try:
            exists = await asyncio.to_thread(self._status.patch_status, entry.ref, status_document(status))
        except Exception as error:
            # Keep our view anyway: the next write carries these totals (they must not be lost).
            log.warning("policy %s: status write failed: %s", entry.ref, error)
            exists = True
        if exists:
            memory.written = status
        return exists


def observe_status(
    metrics: OperatorMetrics, entry: PolicyEntry, status: PolicyStatus, succeeded_at: datetime | None = None
) -> None:
    """The policy's conditions, interval and cluster as metrics (only a leader exports them)."""
    interval = entry.policy.spec.interval.total_seconds() if entry.policy is not None else None
    metrics.observe_status(entry.ref, entry.kafka_cluster, interval, status, succeeded_at)


def seed_metrics(metrics: OperatorMetrics, entry: PolicyEntry) -> None:
    """A replica that becomes the leader (or sees a policy for the first time as the leader)
    exports what the object's status says until its own first run of the policy: the alert rules
    then see the policy at once, including a last success written by an earlier leader."""
    status = entry.status
    ready = next((c for c in status.conditions if c.type == ConditionType.READY.value), None)
    succeeded_at = None
    if ready is not None and ready.status == "True" and ready.reason in SUCCESS_REASONS and status.last_run:
        succeeded_at = status.last_run.finish_time
    kinds = [t.value for t in entry.policy.spec.selector.group_types] if entry.policy is not None else []
    metrics.start_policy(entry.ref, entry.kafka_cluster, kinds)
    observe_status(metrics, entry, status, succeeded_at)
