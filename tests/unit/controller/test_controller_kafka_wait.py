"""A pass that waits out a Kafka failover says so (controller/kafka_wait.py): the adapters' retry
notices become a `Reconciling` / `WaitingForKafka` status while the pass runs, the pass's own
result replaces it, and a wait ridden through leaves no Warning. FakeKafka plays the retries a
real failover causes (tests/e2e/test_operator_failover.py shows them on a 3-node cluster)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from controller_harness import DAY_MS, make_harness, observe_quietly, policy_body, run_async

from groupwarden.connectivity.retry import RetryNotice
from groupwarden.controller.kafka_wait import ANNOUNCE_AFTER_S, ANNOUNCE_EVERY_S, WaitAnnouncer
from groupwarden.controller.registry import PolicyEntry, entry_from_body
from groupwarden.core.policy import PolicyRef
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

LOADING = "COORDINATOR_LOAD_IN_PROGRESS"


def notice(waited_s: float, error: str = LOADING) -> RetryNotice:
    return RetryNotice("ListGroups on broker 2", error, waited_s, 60 - waited_s)


def entry(name: str) -> PolicyEntry:
    return entry_from_body(policy_body(name))


def test_short_waits_are_silent_and_long_ones_announced_at_most_every_few_seconds() -> None:
    now = [100.0]
    told: list[tuple[str, str]] = []
    announcer = WaitAnnouncer(
        lambda e, message: told.append((e.ref.name, message)), [entry("a"), entry("b")], lambda: now[0]
    )
    announcer(notice(ANNOUNCE_AFTER_S / 2))  # a coordinator that moved: answered on the next try
    assert told == []
    announcer(notice(ANNOUNCE_AFTER_S + 0.5))
    assert [name for name, _ in told] == ["a", "b"]
    assert LOADING in told[0][1] and "ListGroups on broker 2" in told[0][1]
    assert "default.api.timeout.ms" in told[0][1]
    now[0] += ANNOUNCE_EVERY_S / 2
    announcer(notice(ANNOUNCE_AFTER_S + 5, "NOT_COORDINATOR"))
    assert len(told) == 2  # not again so soon
    now[0] += ANNOUNCE_EVERY_S
    announcer(notice(ANNOUNCE_AFTER_S + 15, "NOT_COORDINATOR"))
    assert len(told) == 4 and "NOT_COORDINATOR" in told[-1][1]  # the newest answer


class RecordingStatus:
    """Every status written, in order (the harness keeps only the latest)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.history: list[tuple[str, Mapping[str, Any]]] = []

    def exists(self, ref: PolicyRef, uid: str) -> bool:
        return bool(self.inner.exists(ref, uid))

    def patch_status(self, ref: PolicyRef, status: Mapping[str, Any]) -> bool:
        self.history.append((ref.name, status))
        return bool(self.inner.patch_status(ref, status))


def reconciling(status: Mapping[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "Reconciling")


def test_a_pass_waiting_out_a_failover_says_reconciling_then_its_result_without_a_warning(
    tmp_path: Path,
) -> None:
    fake = FakeKafka(topics={"orders"})
    old = fake.now_ms - 3 * DAY_MS
    fake.add_group("ci-dead", offsets={("orders", 0): 5}, committed_at_ms=old, empty_since_ms=old)
    h = make_harness(tmp_path, fake)
    recording = RecordingStatus(h.status)
    h.controller.publisher._status = recording

    def failover(kafka: FakeKafka) -> None:
        # What the admin session does while the new coordinator loads its groups.
        assert kafka.retry_observer is not None, "the pass observes retries"
        for waited in (0.2, 1.5, 4.0):
            kafka.retry_observer(notice(waited))

    fake.before("list_groups", failover)

    async def scenario() -> None:
        body = policy_body(
            "a", rules={"emptyGroupRetention": "1d"}, mode="Enforce", limits={"maxDeletionRatio": 1}
        )
        await observe_quietly(h, body)
        await h.reconcile("a")

    run_async(scenario)
    written = [status for name, status in recording.history if name == "a"]
    waiting = [s for s in written if reconciling(s)["reason"] == "WaitingForKafka"]
    assert len(waiting) == 1, written  # 0.2 s: silent; 1.5 s: announced; 4 s: too soon again
    condition = reconciling(waiting[0])
    assert condition["status"] == "True" and LOADING in condition["message"]
    final = written[-1]  # the run's result is written after the waiting status, never before
    assert reconciling(final)["status"] == "False"
    assert h.condition("a")["reason"] == "Succeeded"
    assert "ci-dead" not in fake.groups
    assert "Warning" not in {e.type for e in h.events.events}
    assert fake.retry_observer is None  # nobody is told after the pass


def test_no_status_is_written_for_a_wait_that_does_not_last(tmp_path: Path) -> None:
    fake = FakeKafka(topics={"orders"})
    h = make_harness(tmp_path, fake)
    recording = RecordingStatus(h.status)
    h.controller.publisher._status = recording

    def short_wait(kafka: FakeKafka) -> None:
        assert kafka.retry_observer is not None
        kafka.retry_observer(notice(0.3))

    fake.before("list_groups", short_wait)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("a"))
        await h.reconcile("a")

    run_async(scenario)
    reasons = [reconciling(s)["reason"] for _, s in recording.history]
    assert "WaitingForKafka" not in reasons
