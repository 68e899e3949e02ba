"""The operator's controller: the policy registry plus one `PolicyWorker` per policy (`worker`).
The kopf handlers (`handlers`) call `observe` / `forget` / `leadership_changed`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from groupwarden.controller.connections import ConnectionPool
from groupwarden.controller.leadership import Leadership
from groupwarden.controller.publish import Publisher, seed_metrics
from groupwarden.controller.reconcile import Reconciler
from groupwarden.controller.registry import Change, PolicyEntry, PolicyRegistry, entry_from_body
from groupwarden.controller.worker import PolicyWorker
from groupwarden.core.policy import PolicyRef
from groupwarden.metrics import OperatorMetrics


class Controller:
    """The registry plus a worker per policy. kopf handlers call `observe` / `forget`."""

    def __init__(
        self,
        registry: PolicyRegistry,
        pool: ConnectionPool,
        reconciler: Reconciler,
        publisher: Publisher,
        leadership: Leadership,
        metrics: OperatorMetrics,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.registry = registry
        self.pool = pool
        self.reconciler = reconciler
        self.publisher = publisher
        self.leadership = leadership
        self.metrics = metrics
        self.clock = clock
        self.workers: dict[PolicyRef, PolicyWorker] = {}
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop the workers run on
        # Told first when the operator stops (commands/run.py: the process-wide stop, so every
        # Kafka retry gives up and nothing new is sent) ...
        self.on_stop: Callable[[], None] = lambda: None
        # ... and awaited once the workers are stopped, before the clients are closed: what is
        # in flight gets its answer (bounded; commands/run.py).
        self.drain: Callable[[], Awaitable[None]] = _nothing_in_flight
        self._stopped = False

    def observe(self, body: Mapping[str, Any]) -> None:
        """A watch event (ADDED/MODIFIED or the initial listing) for one policy."""
        if self._stopped:  # an event kopf still delivers while it stops starts no worker
            return
        self._loop = asyncio.get_running_loop()
        entry = entry_from_body(body)
        if (body.get("metadata") or {}).get("deletionTimestamp"):
            self.forget(entry.ref)  # being deleted (someone else's finalizer holds it): stop now
            return
        change = self.registry.upsert(entry)
        worker = self.workers.get(entry.ref)
        if worker is not None and worker.uid != entry.uid:
            self._stop_worker(entry.ref)  # deleted and re-created between two events
            worker = None
        if worker is None:
            worker = PolicyWorker(entry.ref, self, entry)
            worker.task = asyncio.get_running_loop().create_task(
                worker.run_forever(), name=f"policy {entry.ref}"
            )
            self.workers[entry.ref] = worker
            if self.leadership.is_leader:
                seed_metrics(self.metrics, entry)
        if change is not Change.UNCHANGED:
            worker.wake.set()
        self.metrics.policies.set(len(self.registry))

    def announce_kafka_wait(self, entry: PolicyEntry, message: str) -> None:
        """From a Kafka thread: a pass for `entry` is waiting out a failover (kafka_wait.py); its
        worker writes the Reconciling status on the loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        loop.call_soon_threadsafe(self._announce_wait, entry.ref, message)

    def _announce_wait(self, ref: PolicyRef, message: str) -> None:
        worker = self.workers.get(ref)
        if worker is not None and self.leadership.is_leader:
            worker.announce_wait(message)

    def forget(self, ref: PolicyRef) -> None:
        """The policy was deleted: stop its worker, drop its metrics."""
        self.registry.remove(ref)
        self._stop_worker(ref)
        self.metrics.forget(ref)
        self.metrics.policies.set(len(self.registry))

    def _stop_worker(self, ref: PolicyRef) -> None:
        worker = self.workers.pop(ref, None)
        if worker is not None:
            worker.removed = True
            worker.wake.set()

    def leadership_changed(self, leader: bool) -> None:
        self.metrics.set_leader(leader)  # a replica that is not the leader drops its policy series
        if not leader:
            self.pool.forget_observations()
        # A new term opens the observation store again (continuing the clocks of the meantime).
        self.reconciler.observations.leadership_changed(leader)
        if leader:
            for entry in self.registry:
                seed_metrics(self.metrics, entry)
        for worker in self.workers.values():
            if not leader:
                # What we wrote may be overtaken by the next leader: start from the object again.
                worker.memory.written = None
                worker.memory.generation = None
            worker.wake.set()

    async def shutdown(self) -> None:
        """Stop: `on_stop`, every worker cancelled (a run in flight ends before its next
        deletion step), `drain` (the Kafka calls in flight), then every client closed."""
        self._stopped = True
        self.on_stop()
        connections = self.pool.all_connections()  # a stopped worker releases its own unclosed
        tasks = [w.task for w in self.workers.values() if w.task is not None]
        for worker in list(self.workers.values()):
            worker.removed = True
            if worker.task is not None:
                worker.task.cancel()
        self.workers.clear()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.drain()
        for connection in dict.fromkeys([*connections, *self.pool.all_connections()]):
            await asyncio.to_thread(connection.reset)


async def _nothing_in_flight() -> None:
    return None
