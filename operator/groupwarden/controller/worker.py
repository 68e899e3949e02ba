"""One worker task per policy: run on create / spec change / leadership, then every spec.interval.

- A spec change (metadata.generation) wakes the worker and stops a run in flight before its next
  deletion step; the new spec runs right away.
- Deletion of the policy stops its worker (and a run in flight, before its next deletion step).
- suspend and invalid specs wait for the next spec change: no timer, no retry storm.
- Kafka / Secret / authorization failures and bugs of ours (`InternalError`, or an exception
  while publishing the result) retry with exponential backoff, capped at the interval.
- Only the leader runs anything; a worker that starts (or a replica that takes over) resumes the
  cadence from status.nextRunTime instead of running everything at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Protocol

from groupwarden.cleanup.steps import AbortReason
from groupwarden.connectivity.stopping import stopping
from groupwarden.controller.connections import ConnectionPool
from groupwarden.controller.leadership import Leadership
from groupwarden.controller.publish import PolicyRunState, Publisher
from groupwarden.controller.reconcile import Reconciler
from groupwarden.controller.registry import PolicyEntry, PolicyRegistry
from groupwarden.controller.report import COMPLETED_REASONS, RunReport
from groupwarden.core.policy import PolicyRef
from groupwarden.core.status import ConditionType
from groupwarden.metrics import OperatorMetrics

log = logging.getLogger(__name__)

RETRY_BASE = timedelta(seconds=5)
RETRY_CAP = timedelta(minutes=5)


def retry_delay(failures: int, interval: timedelta) -> timedelta:
    """5s, 10s, 20s ... capped at min(interval, 5m) (never more often than once a second)."""
    cap = max(timedelta(seconds=1), min(interval, RETRY_CAP))
    backoff: timedelta = RETRY_BASE * (1 << max(0, min(failures - 1, 16)))
    return min(backoff, cap)


class WorkerHost(Protocol):
    """What a worker uses of the `Controller` that owns it (and nothing more): the registry and
    leadership it checks, the reconciler and publisher of a run, the pool it releases, the
    metrics, the clock, and `forget` for a policy that turned out to be gone."""

    @property
    def registry(self) -> PolicyRegistry: ...
    @property
    def pool(self) -> ConnectionPool: ...
    @property
    def reconciler(self) -> Reconciler: ...
    @property
    def publisher(self) -> Publisher: ...
    @property
    def leadership(self) -> Leadership: ...
    @property
    def metrics(self) -> OperatorMetrics: ...
    @property
    def clock(self) -> Callable[[], datetime]: ...
    def forget(self, ref: PolicyRef) -> None: ...


class PolicyWorker:
    def __init__(self, ref: PolicyRef, controller: WorkerHost, entry: PolicyEntry) -> None:
        self.ref = ref
        self.uid = entry.uid
        self._controller = controller
        self.wake = asyncio.Event()
        self.removed = False
        self.running_generation: int | None = None
        self.memory = PolicyRunState.for_entry(entry)
        self.task: asyncio.Task[None] | None = None
        # The status write of a pass waiting out a failover (kafka_wait.py); the run's own
        # result is written after it, never overtaken by it.
        self.waiting_write: asyncio.Task[None] | None = None

    def stop_reason(self) -> AbortReason | None:
        """RunGuard: read from Kafka threads (plain attribute reads: safe under the GIL)."""
        if stopping():
            return AbortReason.STOPPING
        if self.removed:
            return AbortReason.POLICY_DELETED
        entry = self._controller.registry.get(self.ref)
        if entry is None or entry.uid != self.uid:
            return AbortReason.POLICY_DELETED
        if entry.generation != self.running_generation:
            return AbortReason.SPEC_CHANGED
        if not self._controller.leadership.is_leader:
            return AbortReason.LEADERSHIP_LOST
        return None

    async def run_forever(self) -> None:
        controller = self._controller
        try:
            while not self.removed:
                await controller.leadership.wait_until_leader()
                entry = controller.registry.get(self.ref)
                if self.removed or entry is None:
                    break
                delay = self._seconds_until_due(entry)
                if delay is None or delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.wake.wait(), delay)
                    self.wake.clear()
                    continue  # re-check leadership, removal and the due time
                try:
                    await self._run_and_publish(entry)
                except Exception as error:
                    self._after_crash(entry, error)
        finally:
            for connection in controller.pool.release(self.ref):
                # A stopping process closes its clients once the calls in flight have ended
                # (Controller.shutdown): closing one now would lose the answer of a sent request.
                if not stopping():
                    await asyncio.to_thread(connection.reset)

    def announce_wait(self, message: str) -> None:
        """On the loop, during this policy's run: say Reconciling/WaitingForKafka (one write at a
        time; a notice that comes while one is being written is dropped: the next one follows)."""
        if self.waiting_write is not None and not self.waiting_write.done():
            return
        controller = self._controller
        entry = controller.registry.get(self.ref)
        if self.removed or entry is None or entry.generation != self.running_generation:
            return
        self.waiting_write = asyncio.get_running_loop().create_task(
            controller.publisher.mark_waiting(entry, self.memory, message, controller.clock()),
            name=f"policy {self.ref} waiting for Kafka",
        )

    async def _settle_waiting_write(self) -> None:
        task, self.waiting_write = self.waiting_write, None
        if task is not None:
            with contextlib.suppress(Exception):  # Publisher._write logs its own failures
                await task

    def _after_crash(self, entry: PolicyEntry, error: Exception) -> None:
        """A bug after the run (status, events, metrics) must not end this policy's worker: log it
        (type and frames; the text could hold data) and retry with backoff."""
        frames = "".join(traceback.format_tb(error.__traceback__))
        log.error("policy %s: internal error after its run: %s\n%s", self.ref, type(error).__name__, frames)
        self.memory.failures += 1
        interval = entry.policy.spec.interval if entry.policy else RETRY_CAP
        self.memory.next_due = self._controller.clock() + retry_delay(self.memory.failures, interval)

    def _seconds_until_due(self, entry: PolicyEntry) -> float | None:
        memory = self.memory
        now = self._controller.clock()
        if memory.generation != entry.generation:
            memory.generation = entry.generation
            memory.next_due = _resume_time(entry, now)
        if memory.next_due is None:
            return None
        return max(0.0, (memory.next_due - now).total_seconds())

    async def _run_and_publish(self, entry: PolicyEntry) -> None:
        controller, memory = self._controller, self.memory
        self.wake.clear()
        self.running_generation = entry.generation
        previous = memory.previous_status(entry)
        policy = entry.policy
        new_generation = previous.observed_generation != entry.generation
        if new_generation and policy is not None and not policy.spec.suspend:
            await controller.publisher.mark_reconciling(entry, memory, controller.clock())
        report = await controller.reconciler.reconcile(entry, self)
        await self._settle_waiting_write()
        now = controller.clock()
        memory.next_due = self._next_due(report, entry, now)
        latest = controller.registry.get(self.ref) or entry
        leader = controller.leadership.is_leader
        write = not self.removed and (leader or bool(report.outcomes))
        exists = await controller.publisher.publish(
            report, latest, memory, memory.next_due, write_status=write
        )
        controller.metrics.kafka_connections.set(controller.pool.open_count())
        if not exists or report.aborted is AbortReason.GONE:
            # The watch missed the deletion (a DELETED event can be lost across a re-list).
            log.info("policy %s no longer exists: stopping its work", self.ref)
            controller.forget(self.ref)

    def _next_due(self, report: RunReport, entry: PolicyEntry, now: datetime) -> datetime | None:
        memory = self.memory
        if report.aborted is not None and report.aborted is not AbortReason.UNCONFIRMED:
            return now  # the spec changed (or leadership moved): start over at once
        if report.retried or report.aborted is AbortReason.UNCONFIRMED:
            memory.failures += 1
            interval = entry.policy.spec.interval if entry.policy else RETRY_CAP
            return now + retry_delay(memory.failures, interval)
        memory.failures = 0
        if report.reason in COMPLETED_REASONS and entry.policy is not None:
            return now + entry.policy.spec.interval
        return None  # suspended / invalid: wait for a spec change


def _resume_time(entry: PolicyEntry, now: datetime) -> datetime | None:
    """When a generation this process has not run yet is due: now, unless the status shows a
    completed run of this very generation with a future nextRunTime (restart, failover)."""
    status = entry.status
    ready = next((c for c in status.conditions if c.type == ConditionType.READY.value), None)
    if (
        status.observed_generation == entry.generation
        and ready is not None
        and ready.reason in {r.value for r in COMPLETED_REASONS}
        and status.next_run_time is not None
        and status.next_run_time > now
    ):
        return status.next_run_time
    return now
