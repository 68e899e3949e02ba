"""The per-policy workers, with their real asyncio scheduling (intervals long enough that only
watch events cause runs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest
from controller_harness import Harness, make_harness, policy_body, run_async

from groupwarden.controller.leadership import Leadership
from groupwarden.core.policy import PolicyRef

pytestmark = pytest.mark.unit

REF = PolicyRef("team", "p")


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def generation_seen(h: Harness, generation: int) -> Callable[[], bool]:
    return lambda: (
        h.status.statuses.get(REF, {}).get("observedGeneration") == generation
        and any(c["reason"] == "DryRun" for c in h.status.statuses[REF]["conditions"])
    )


def test_create_and_spec_change_run_at_once_and_deletion_stops_the_worker(tmp_path: Path) -> None:
    h = make_harness(tmp_path)

    async def scenario() -> None:
        h.controller.observe(policy_body("p", rules={"emptyGroupRetention": "1d"}, interval="1h"))
        await until(generation_seen(h, 1))
        runs = h.fake.calls["list_groups"]
        h.controller.observe(
            policy_body("p", rules={"emptyGroupRetention": "2d"}, interval="1h", generation=2)
        )
        await until(generation_seen(h, 2))
        assert h.fake.calls["list_groups"] == runs + 1
        # A status-only update (our own write coming back through the watch) does not run it again.
        h.controller.observe(
            policy_body("p", rules={"emptyGroupRetention": "2d"}, interval="1h", generation=2)
        )
        await asyncio.sleep(0.1)
        assert h.fake.calls["list_groups"] == runs + 1
        task = h.controller.workers[REF].task
        h.controller.forget(REF)
        assert task is not None
        await asyncio.wait_for(task, 5)
        await h.controller.shutdown()

    run_async(scenario)
    assert h.fake.closed  # the last user of the connection is gone: client closed
    assert (
        h.metrics.registry.get_sample_value("groupwarden_groups_matched", {"namespace": "team", "name": "p"})
        is None
    )


class Switch:
    """A Leadership a test can flip."""

    def __init__(self) -> None:
        self.is_leader = False
        self._event = asyncio.Event()

    async def wait_until_leader(self) -> None:
        while not self.is_leader:
            await self._event.wait()

    def set(self, leader: bool) -> None:
        self.is_leader = leader
        if leader:
            self._event.set()
        else:
            self._event.clear()


def test_a_standby_does_nothing_until_it_leads(tmp_path: Path) -> None:
    switch = Switch()
    leadership: Leadership = switch
    h = make_harness(tmp_path, leadership=leadership)

    async def scenario() -> None:
        h.controller.observe(policy_body("p", rules={"emptyGroupRetention": "1d"}, interval="1h"))
        await asyncio.sleep(0.2)
        assert sum(h.fake.calls.values()) == 0 and h.status.writes == 0
        switch.set(True)
        h.controller.leadership_changed(True)
        await until(generation_seen(h, 1))
        await h.controller.shutdown()

    run_async(scenario)
