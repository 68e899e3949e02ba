"""Leader election on a Lease (client-go's algorithm) against an in-memory compare-and-swap store."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from groupwarden.controller.leadership import LeaseLeadership
from groupwarden.core.lease import LeaseRecord

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class MemoryLeaseStore:
    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0

    def get(self) -> LeaseRecord | None:
        return self.record

    def create(self, record: LeaseRecord) -> LeaseRecord | None:
        if self.record is not None:
            return None
        return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord | None:
        if self.record is None or record.resource_version != self.record.resource_version:
            return None
        return self._store(record)

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        self.version += 1
        self.record = replace(record, resource_version=str(self.version))
        return self.record


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(store: MemoryLeaseStore, identity: str, clock: Clock) -> LeaseLeadership:
    return LeaseLeadership(store, identity, lease_duration=15, monotonic=clock, wall=lambda: T0)


def test_only_one_replica_holds_the_lease_and_the_other_takes_over_after_it_expires() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.attempt() is True
    assert b.attempt() is False
    clock.now += 10
    assert a.attempt() is True  # renewed
    assert b.attempt() is False  # b saw the renewal: its own 15s start again
    clock.now += 14
    assert b.attempt() is False
    clock.now += 2  # a silent for 16s on b's clock
    assert b.attempt() is True
    assert store.record is not None and store.record.holder == "b" and store.record.transitions == 1
    assert a.attempt() is False  # a's renewal loses: the Lease is b's now


def test_a_leader_that_cannot_renew_stops_acting_before_anyone_can_take_over() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a = elector(store, "a", clock)
    assert a.attempt() is True
    a._set(True)
    assert a.is_leader
    clock.now += 9.9
    assert a.is_leader
    clock.now += 0.2  # renew deadline (2/3 of the lease) passed without a renewal
    assert not a.is_leader


def test_release_lets_the_standby_take_over_at_once() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.attempt() is True
    a.release()
    assert b.attempt() is True


class ConflictOnce(MemoryLeaseStore):
    """The first update after `arm()` loses a race: someone writes the Lease just before it."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def arm(self) -> None:
        self.armed = True

    def update(self, record: LeaseRecord) -> LeaseRecord | None:
        if self.armed and self.record is not None:
            self.armed = False
            self._store(replace(self.record, renew_time=T0))  # a renewal that was in flight
            return super().update(record)  # now on a stale resource version: conflict
        return super().update(record)


def test_release_retries_when_the_lease_changed_since_it_was_read() -> None:
    store, clock = ConflictOnce(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.attempt() is True
    store.arm()
    assert a.release() is True
    assert store.record is not None and store.record.holder is None
    assert b.attempt() is True


def test_a_shutdown_during_a_renewal_still_releases_the_lease() -> None:
    """The renewal runs in a thread; cancelling the election must wait for it, then release: a
    renewal landing after the release would make the standby wait out the whole lease."""
    import asyncio
    import threading

    class SlowRenewals(MemoryLeaseStore):
        """A renewal takes 0.3 s to commit; a read meanwhile sees the Lease before it."""

        def __init__(self) -> None:
            super().__init__()
            self.renewing = threading.Event()
            self.renewed = threading.Event()

        def get(self) -> LeaseRecord | None:
            seen = self.record
            if self.renewing.is_set() and not self.renewed.is_set():
                self.renewed.wait(1)  # the renewal commits after this read
            return seen

        def update(self, record: LeaseRecord) -> LeaseRecord | None:
            if record.holder is not None and self.record is not None:  # a renewal
                self.renewing.set()
                threading.Event().wait(0.3)
                stored = super().update(record)
                self.renewed.set()
                return stored
            return super().update(record)

    async def scenario() -> LeaseRecord | None:
        store = SlowRenewals()
        a = LeaseLeadership(store, "a", lease_duration=3, renew_every=0.01)
        task = asyncio.create_task(a.run())
        while not store.renewing.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not a.is_leader
        return store.record

    record = asyncio.run(scenario())
    assert record is not None and record.holder is None
