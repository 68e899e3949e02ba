"""Only one replica acts: leader election on a coordination.k8s.io Lease (client-go's algorithm).

Why not kopf peering: it needs its own cluster-scoped CRDs, and replicas with equal priority
both keep running (kopf only warns), so two replicas of one Deployment would both delete.

- The holder renews every `renew_every`; others take over only after they have seen the Lease
  unchanged for `lease_duration` on *their own* monotonic clock (no trust in clock sync).
- The holder stops acting when it could not renew for `renew_deadline` (< lease_duration), so it
  is idle before anyone else can have taken over; a run in flight checks `is_leader` before each
  deletion step.
- A clean shutdown releases the Lease, so the standby takes over at its next attempt.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from groupwarden.core.lease import LeaseRecord, LeaseStore

log = logging.getLogger(__name__)


class Leadership(Protocol):
    @property
    def is_leader(self) -> bool: ...

    async def wait_until_leader(self) -> None: ...


class AlwaysLeader:
    """Single replica (`--no-leader-election`) and unit tests."""

    is_leader = True

    async def wait_until_leader(self) -> None:
        return None


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LeaseLeadership:
    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        lease_duration: float = 15.0,
        renew_every: float | None = None,
        on_change: Callable[[bool], None] = lambda _leader: None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.identity = identity
        self._store = store
        self._duration = lease_duration
        self._renew_every = renew_every if renew_every is not None else lease_duration / 3
        self._deadline = lease_duration * 2 / 3
        self.on_change = on_change
        self._monotonic = monotonic
        self._wall = wall
        self._leader = False
        self._became = asyncio.Event()
        self._last_renew = float("-inf")
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0

    @property
    def is_leader(self) -> bool:
        # Also false once the renew deadline passed, even before the loop notices.
        return self._leader and self._monotonic() - self._last_renew < self._deadline

    async def wait_until_leader(self) -> None:
        while not self.is_leader:
            await self._became.wait()

    async def run(self) -> None:
        """Campaigns / renews until cancelled; releases the Lease on the way out."""
        attempt: asyncio.Future[bool] | None = None
        try:
            while True:
                # Shielded: cancelling this task (shutdown) must not orphan an attempt still running
                # in its thread; the release below waits for it, or its renewal would overwrite
                # the release (or make it fail on the resource version) and the standby would
                # have to wait out the whole lease.
                attempt = asyncio.ensure_future(asyncio.to_thread(self.attempt))
                try:
                    held = await asyncio.shield(attempt)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    log.warning("leader election: Lease access failed: %s", error)
                    held = self._leader and self.is_leader
                self._set(held)
                await asyncio.sleep(self._renew_every if held else max(1.0, self._renew_every / 2))
        finally:
            if attempt is not None and not attempt.done():
                await asyncio.wait([attempt])
                if not attempt.cancelled() and attempt.exception() is None and attempt.result():
                    self._leader = True  # it renewed (or took) the Lease just now: release it
            if self._leader:
                self._set(False)
                try:
                    await asyncio.shield(asyncio.to_thread(self.release))
                except Exception as error:
                    log.warning("leader election: could not release the Lease: %s", error)

    def _set(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        log.info("leader election: %s %s the leader Lease", self.identity, "holds" if leader else "lost")
        if leader:
            self._became.set()
        else:
            self._became.clear()
        self.on_change(leader)

    def attempt(self) -> bool:
        """One acquire-or-renew step (blocking). True when this replica holds the Lease."""
        now = self._wall()
        seconds = max(1, round(self._duration))
        lease = self._store.get()
        if lease is None:
            mine = LeaseRecord(self.identity, seconds, 0, now, now)
            return self._renewed(self._store.create(mine))
        if lease.holder == self.identity:
            return self._renewed(self._store.update(replace(lease, renew_time=now, duration_seconds=seconds)))
        key = (lease.holder, lease.renew_time, lease.resource_version)
        if key != self._observed:
            self._observed, self._observed_at = key, self._monotonic()
        expired = not lease.holder or self._monotonic() - self._observed_at > lease.duration_seconds
        if not expired:
            return False
        taken = replace(
            lease,
            holder=self.identity,
            duration_seconds=seconds,
            transitions=lease.transitions + 1,
            renew_time=now,
            acquire_time=now,
        )
        return self._renewed(self._store.update(taken))

    def _renewed(self, record: LeaseRecord | None) -> bool:
        if record is None:  # conflict: someone else wrote first
            self._last_renew = float("-inf")
            return False
        self._last_renew = self._monotonic()
        return True

    def release(self, attempts: int = 5) -> bool:
        """Gives the Lease up if this replica holds it; True when it did (or holds nothing). A
        conflict means the Lease changed since it was read (e.g. a renewal of ours that was in
        flight): read it again and retry, a few times."""
        for _ in range(attempts):
            lease = self._store.get()
            if lease is None or lease.holder != self.identity:
                return True
            released = replace(lease, holder=None, duration_seconds=1, renew_time=self._wall())
            if self._store.update(released) is not None:
                log.info("leader election: %s released the leader Lease", self.identity)
                return True
        log.warning("leader election: could not release the Lease after %d conflicts", attempts)
        return False
