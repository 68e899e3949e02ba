"""The cluster cycle: runs of one Kafka cluster's policies coalesced into cluster passes.

A policy's worker that is due asks its cluster for a pass and waits. The first request starts a
pass after a short coalescing window, so a burst (ten policies applied at once, a cycle of policies
with the same interval) joins one pass; a request that arrives while a pass runs waits for the
next one, which takes every request that arrived meanwhile. Each pass is one gather and one
`decide_many` over every policy of the cluster (cleanup/cluster_pass.py), then the requesters'
Enforce plans execute in turn. So ten overlapping policies cost one or two passes, not ten, and
the policies of a cluster never delete concurrently (one pass at a time per cluster).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from groupwarden.cleanup.steps import RunGuard
from groupwarden.controller.connections import Connection
from groupwarden.controller.registry import PolicyEntry

log = logging.getLogger(__name__)

# Long enough for the watch events of one `kubectl apply` of many policies to arrive together,
# short against a pass (seconds at 100k groups).
COALESCE_SECONDS = 0.3


@dataclass(eq=False)
class PassRequest:
    """One policy's run, waiting for a pass. `result` is what the pass says for it: the run's
    result, or the exception its part of the pass raised (classified by the reconciler)."""

    entry: PolicyEntry
    connection: Connection
    guard: RunGuard
    future: asyncio.Future[object] = field(
        repr=False, default_factory=lambda: asyncio.get_running_loop().create_future()
    )


# Runs one batch of requests (all of one cluster) and returns, per request, its result or exception.
BatchRunner = Callable[[Sequence[PassRequest]], Awaitable[Sequence[object]]]


class ClusterCycle:
    """Coalesces the run requests of one cluster into passes, one pass at a time."""

    def __init__(self, run_batch: BatchRunner, coalesce_seconds: float = COALESCE_SECONDS) -> None:
        self._run_batch = run_batch
        self._coalesce = coalesce_seconds
        self._waiting: list[PassRequest] = []
        self._runner: asyncio.Task[None] | None = None
        self.passes = 0  # passes run (tests and metrics)

    async def submit(self, entry: PolicyEntry, connection: Connection, guard: RunGuard) -> object:
        """Waits for a pass that starts after this call; returns this request's result (raises
        the exception its part of the pass raised)."""
        request = PassRequest(entry, connection, guard)
        self._waiting.append(request)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run_passes(), name="cluster cycle")
        return await asyncio.shield(request.future)

    async def _run_passes(self) -> None:
        while self._waiting:
            await asyncio.sleep(self._coalesce)
            batch, self._waiting = self._waiting, []
            self.passes += 1
            try:
                results = await self._run_batch(batch)
            except Exception as error:  # the runner outlives any pass
                results = [error] * len(batch)
            for request, result in zip(batch, results, strict=True):
                if request.future.done():
                    continue
                if isinstance(result, BaseException):
                    request.future.set_exception(result)
                else:
                    request.future.set_result(result)

    async def close(self) -> None:
        runner = self._runner
        if runner is not None and not runner.done():
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
