"""The reconcile orchestration with FakeKafka and in-memory status/event sinks: no kopf, no API server."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import confluent_kafka
import kafka.errors
import pytest
from controller_harness import DAY_MS, make_harness, observe_quietly, policy_body, run_async

from groupwarden.adapters.client_errors import client_errors_translated
from groupwarden.cleanup.gateway import (
    KafkaAuthenticationFailed,
    KafkaError,
    KafkaTlsHandshakeFailed,
    KafkaUnavailable,
)
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.controller.registry import entry_from_body
from groupwarden.core.policy import ConsumerGroupPolicy, PolicyRef
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.core.tenancy import Refusal, TenancyRules
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

RULES = {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d", "simpleGroupOffsetRetention": "1d"}
LIMITS = {"maxDeletionRatio": 1}


def cluster() -> FakeKafka:
    fake = FakeKafka(topics={"orders", "payments", "gone"})
    old = fake.now_ms - 3 * DAY_MS
    fake.add_group("ci-old", offsets={("orders", 0): 5}, committed_at_ms=old, empty_since_ms=old)
    fake.add_group("ci-new", offsets={("orders", 0): 5})  # Empty since now: not eligible
    fake.add_group("svc", subscribed=["orders"], offsets={("orders", 0): 1})  # active: never touched
    fake.add_group(
        "ci-moved",
        subscribed=["payments"],
        offsets={("gone", 0): 1, ("gone", 1): 2, ("payments", 0): 3},
        committed_at_ms=old,
    )
    fake.add_group("ci-solo", GroupKind.SIMPLE, offsets={("orders", 1): 9}, committed_at_ms=old)
    return fake


def test_dry_run_reports_the_plan_and_deletes_nothing(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        await h.reconcile("p")
        await h.reconcile("p")

    run_async(scenario)
    assert set(h.fake.groups) == {"ci-old", "ci-new", "svc", "ci-moved", "ci-solo"}
    assert h.fake.calls["delete_groups"] == 0 and h.fake.calls["delete_offsets"] == 0
    status = h.status_of("p")
    ready = h.condition("p")
    assert (ready["status"], ready["reason"]) == ("True", "DryRun")
    assert h.condition("p", "Stalled")["status"] == "False"
    assert status["observedGeneration"] == 1
    planned = {(a["action"], a["group"]) for a in status["plan"]}
    # ci-solo: every offset of the simple group is eligible, so the group itself goes.
    assert planned == {("DeleteGroup", "ci-old"), ("DeleteOffsets", "ci-moved"), ("DeleteGroup", "ci-solo")}
    moved = next(a for a in status["plan"] if a["group"] == "ci-moved")
    assert moved["partitions"] == [{"topic": "gone", "partition": 0}, {"topic": "gone", "partition": 1}]
    assert status["summary"]["groupsEligible"] == 2 and status["summary"]["offsetsEligible"] == 2
    assert status["eligible"] == "2/2" and status["deleted"] == "0/0"
    assert status["lastRun"]["mode"] == "DryRun" and status["lastRun"]["timestampSource"] == "offsetsLog"
    assert status["nextRunTime"] is not None
    # Planned once: the second, identical run posts nothing new.
    assert h.events.reasons() == ["Planned"]


def test_enforce_deletes_exactly_the_eligible_items_and_totals_accumulate(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())
    previous = {"totals": {"groupsDeleted": 7, "offsetsDeleted": 40}}  # written by an earlier process

    async def scenario() -> None:
        await observe_quietly(
            h, policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce", status=previous)
        )
        await h.reconcile("p")
        await h.reconcile("p")  # nothing left: totals stay

    run_async(scenario)
    assert set(h.fake.groups) == {"ci-new", "svc", "ci-moved"}
    assert set(h.fake.groups["ci-moved"].offsets) == {TopicPartition("payments", 0)}
    assert set(h.fake.groups["svc"].offsets) == {TopicPartition("orders", 0)}
    status = h.status_of("p")
    assert status["totals"] == {"groupsDeleted": 9, "offsetsDeleted": 42}
    assert status["plan"] == []
    assert (h.condition("p")["status"], h.condition("p")["reason"]) == ("True", "Succeeded")
    reasons = h.events.reasons()
    assert reasons.count("GroupDeleted") == 2 and reasons.count("OffsetsDeleted") == 1
    moved = next(e for e in h.events.events if "ci-moved" in e.message)
    assert "gone[0,1]" in moved.message and "2 partitions" in moved.message
    sample = h.metrics.registry.get_sample_value
    assert sample("groupwarden_groups_deleted_total", {"namespace": "team", "name": "p"}) == 2
    assert sample("groupwarden_offsets_deleted_total", {"namespace": "team", "name": "p"}) == 2
    assert sample("groupwarden_runs_total", {"namespace": "team", "name": "p", "result": "Succeeded"}) == 2


def test_a_consumer_coming_back_between_plan_and_delete_is_skipped(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())
    h.fake.before("delete_groups", lambda fake: fake.join("ci-old", ["orders"]))

    async def scenario() -> None:
        await observe_quietly(
            h, policy_body("p", rules={"emptyGroupRetention": "1d"}, limits=LIMITS, mode="Enforce")
        )
        await h.reconcile("p")

    run_async(scenario)
    assert "ci-old" in h.fake.groups
    skipped = [e for e in h.events.events if e.reason == "ActionSkipped"]
    assert len(skipped) == 1 and skipped[0].type == "Warning" and "NON_EMPTY_GROUP" in skipped[0].message
    assert h.condition("p")["reason"] == "Succeeded"
    assert h.status_of("p")["summary"]["skipped"] >= 1
    assert h.status_of("p")["totals"] == {"groupsDeleted": 0, "offsetsDeleted": 0}


def test_kafka_outage_is_retried_with_backoff_and_recovers(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())
    h.fake.unavailable = True
    ref = PolicyRef("team", "p")

    async def scenario() -> list[timedelta]:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        delays = []
        for _ in range(3):
            await h.reconcile("p")
            memory = h.controller.workers[ref].memory
            assert memory.next_due is not None
            delays.append(memory.next_due - h.now())
        assert (h.condition("p")["status"], h.condition("p")["reason"]) == ("False", "KafkaUnavailable")
        assert h.condition("p", "Reconciling")["status"] == "True"
        assert h.condition("p", "Stalled")["status"] == "False"
        h.fake.unavailable = False
        await h.reconcile("p")
        return delays

    delays = run_async(scenario)
    assert delays == [timedelta(seconds=5), timedelta(seconds=10), timedelta(seconds=20)]
    assert h.condition("p")["reason"] == "DryRun"
    # One Warning for the outage (not one per retry); the client was replaced after each failure.
    assert h.events.reasons().count("KafkaUnavailable") == 1
    assert h.fake.closed


def test_invalid_spec_stalls_without_touching_kafka_and_others_keep_working(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())
    bad = policy_body("bad", rules=RULES, selector={"include": ["ci-[x"]})

    async def scenario() -> None:
        await observe_quietly(h, bad)
        await observe_quietly(h, policy_body("good", rules=RULES, limits=LIMITS))
        await h.reconcile("bad")
        await h.reconcile("bad")
        await h.reconcile("good")

    run_async(scenario)
    ready, stalled = h.condition("bad"), h.condition("bad", "Stalled")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert stalled["status"] == "True" and "unclosed '['" in stalled["message"]
    assert h.events.reasons(PolicyRef("team", "bad")) == ["InvalidSpec"]  # once, not per retry
    assert h.controller.workers[PolicyRef("team", "bad")].memory.next_due is None  # no timer
    assert h.condition("good")["reason"] == "DryRun"


def test_suspended_policy_makes_no_kafka_calls(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, mode="Enforce", suspend=True))
        await h.reconcile("p")

    run_async(scenario)
    assert sum(h.fake.calls.values()) == 0
    assert (h.condition("p")["status"], h.condition("p")["reason"]) == ("True", "Suspended")
    assert h.status_of("p")["nextRunTime"] is None
    assert len(h.fake.groups) == 5


def test_overlapping_dry_run_policy_blocks_deletion_and_both_report_the_overlap(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())
    selector = {"include": ["ci-*"]}

    async def scenario() -> None:
        await observe_quietly(
            h, policy_body("enforce", rules=RULES, limits=LIMITS, selector=selector, mode="Enforce")
        )
        await observe_quietly(h, policy_body("watch", "other-team", rules=RULES, selector=selector))
        await h.reconcile("enforce")
        await h.reconcile("watch", "other-team")

    run_async(scenario)
    assert len(h.fake.groups) == 5  # DryRun in any selecting policy blocks every deletion
    assert h.status_of("enforce")["overlappingPolicies"] == ["other-team/watch"]
    assert h.status_of("watch", "other-team")["overlappingPolicies"] == ["team/enforce"]
    assert h.status_of("enforce")["summary"]["groupsEligible"] == 2


def test_spec_change_during_a_run_stops_before_the_next_deletion_step(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())
    body = policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce")

    def edit_spec(_fake: FakeKafka) -> None:  # the watch delivers a new generation mid-run
        h.registry.upsert(entry_from_body(policy_body("p", rules=RULES, limits=LIMITS, generation=2)))

    async def scenario() -> None:
        await observe_quietly(h, body)
        h.fake.before("delete_groups", edit_spec)
        await h.reconcile("p")

    run_async(scenario)
    assert "ci-old" not in h.fake.groups  # the group step had started
    assert h.fake.calls["delete_offsets"] == 0  # the offset steps were not
    status = h.status_of("p")
    assert status["totals"]["groupsDeleted"] == 2  # what happened is still counted
    assert h.condition("p", "Reconciling")["status"] == "True"
    # The AbortReason's value is the visible text (status message, events, log).
    assert "run interrupted (the spec changed)" in h.condition("p", "Ready")["message"]
    assert h.controller.workers[PolicyRef("team", "p")].memory.next_due == h.now()  # runs again at once


def test_a_policy_deleted_behind_the_watch_deletes_nothing_and_is_forgotten(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster())

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce"))
        h.status.gone.add(PolicyRef("team", "p"))  # deleted, but the DELETED event never came
        await h.reconcile("p")

    run_async(scenario)
    assert len(h.fake.groups) == 5 and h.fake.calls["delete_groups"] == 0
    assert (
        PolicyRef("team", "p") not in h.controller.workers and h.registry.get(PolicyRef("team", "p")) is None
    )


# Runtime data an exception may carry (a traceback's source lines show only the code).
SECRET_LOOKING = "sasl.password=hunter2"


class _BrokenTenancy(TenancyRules):
    """A bug outside the Kafka phase (here: in a guard)."""

    def refusal(self, policy: ConsumerGroupPolicy) -> Refusal | None:
        raise ZeroDivisionError(SECRET_LOOKING)


def _raise(error: Exception) -> Callable[[FakeKafka], None]:
    def hook(_fake: FakeKafka) -> None:
        raise error

    return hook


def test_a_bug_in_a_run_is_an_internal_error_retried_and_never_ends_the_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, cluster())
    ref = PolicyRef("team", "p")
    h.fake.before("list_groups", _raise(KeyError("unexpected")))

    async def scenario() -> timedelta | None:
        await observe_quietly(
            h, policy_body("p", rules={"emptyGroupRetention": "1d"}, limits=LIMITS, mode="Enforce")
        )
        await h.reconcile("p")
        memory = h.controller.workers[ref].memory
        due = memory.next_due - h.now() if memory.next_due else None
        ready = h.condition("p")
        assert (ready["status"], ready["reason"]) == ("False", "InternalError")
        assert "KeyError: 'unexpected'" in ready["message"] and "groupwarden bug" in ready["message"]
        assert h.condition("p", "Reconciling")["status"] == "True"
        assert h.condition("p", "Stalled")["status"] == "False"
        assert "ci-old" in h.fake.groups
        await h.reconcile("p")  # the hook fired once: the retry works
        return due

    with caplog.at_level(logging.ERROR):
        due = run_async(scenario)
    assert due == timedelta(seconds=5)  # retried with backoff, like an outage
    assert h.condition("p")["reason"] == "Succeeded" and "ci-old" not in h.fake.groups
    assert h.events.reasons().count("InternalError") == 1
    assert [e.type for e in h.events.events if e.reason == "InternalError"] == ["Warning"]
    assert h.fake.closed  # the client was replaced, whatever broke
    traces = [r.getMessage() for r in caplog.records if "internal error" in r.getMessage()]
    assert len(traces) == 1 and "Traceback" in traces[0] and "KeyError" in traces[0]


@pytest.mark.parametrize(
    ("error", "named"),
    [
        (kafka.errors.KafkaTimeoutError("timed out"), "KafkaTimeoutError"),
        (
            confluent_kafka.KafkaException(confluent_kafka.KafkaError(confluent_kafka.KafkaError._TRANSPORT)),
            "_TRANSPORT",
        ),
        (ConnectionResetError("reset by peer"), "ConnectionResetError"),
    ],
    ids=lambda e: type(e).__name__ if isinstance(e, Exception) else "",
)
def test_a_client_library_error_reaches_the_controller_as_the_ports_outage(
    tmp_path: Path, error: Exception, named: str
) -> None:
    """The adapters translate every client exception once (adapters/client_errors.py): what the
    controller sees is KafkaUnavailable, naming the client's error."""
    h = make_harness(tmp_path, cluster())
    h.fake.before("list_groups", _raise_translated(error))

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        await h.reconcile("p")

    run_async(scenario)
    assert h.condition("p")["reason"] == "KafkaUnavailable"
    assert named in h.condition("p")["message"]


def test_a_client_library_error_no_adapter_translated_is_a_bug_of_ours(tmp_path: Path) -> None:
    """Nothing sorts escaped client exceptions any more: one that gets past an adapter is a
    groupwarden bug (InternalError), not an outage."""
    h = make_harness(tmp_path, cluster())
    h.fake.before("list_groups", _raise(kafka.errors.KafkaTimeoutError("timed out")))

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        await h.reconcile("p")

    run_async(scenario)
    ready = h.condition("p")
    assert ready["reason"] == "InternalError" and "KafkaTimeoutError" in ready["message"]


def _raise_translated(error: Exception) -> Callable[[FakeKafka], None]:
    """What an adapter entry point does with a client exception."""
    settings = settings_from_properties({}, bootstrap_servers="127.0.0.1:9092")

    def hook(_fake: FakeKafka) -> None:
        with client_errors_translated(settings):
            raise error

    return hook


def test_a_bug_outside_the_kafka_phase_is_reported_without_the_exception_text(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, cluster(), options={"tenancy": _BrokenTenancy()})

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        await h.reconcile("p")
        await h.reconcile("p")

    with caplog.at_level(logging.ERROR):
        run_async(scenario)
    ready = h.condition("p")
    assert (ready["reason"], ready["message"]) == (
        "InternalError",
        "internal error (a groupwarden bug; the operator log has the traceback): ZeroDivisionError",
    )
    assert h.events.reasons().count("InternalError") == 1
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "ZeroDivisionError" in logged and "refusal" in logged  # the frames, for the bug report
    assert "hunter2" not in logged + ready["message"]


def test_a_bug_while_publishing_a_result_never_ends_the_worker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, cluster())
    ref = PolicyRef("team", "p")
    publish = h.controller.publisher.publish
    calls: list[str] = []

    async def publish_failing_once(*args: Any, **kwargs: Any) -> bool:
        calls.append("publish")
        if len(calls) == 1:
            raise RuntimeError("a bug in the status builder")
        published = await publish(*args, **kwargs)
        # Counted once written: the scenario cancels the worker after this, and a status still
        # being written when the test looked was the CI failure of 2026-11-26 (loaded machine).
        calls.append("published")
        return published

    h.controller.publisher.publish = publish_failing_once  # type: ignore[method-assign]

    async def until(count: int) -> None:
        for _ in range(500):
            if len(calls) >= count:
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"only {len(calls)} publish calls")

    async def scenario() -> None:
        h.controller.observe(policy_body("p", rules=RULES, limits=LIMITS))
        worker = h.controller.workers[ref]
        await until(1)
        for _ in range(500):  # the worker records the failure and schedules its retry
            if worker.memory.failures:
                break
            await asyncio.sleep(0.01)
        assert worker.task is not None and not worker.task.done()  # alive, waiting for its retry
        assert worker.memory.failures == 1 and worker.memory.next_due == h.now() + timedelta(seconds=5)
        h.fake.advance(5_000)
        worker.wake.set()
        await until(3)  # the second publish, written
        worker.task.cancel()
        await asyncio.gather(worker.task, return_exceptions=True)

    with caplog.at_level(logging.ERROR):
        run_async(scenario)
    assert h.condition("p")["reason"] == "DryRun"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "internal error after its run: RuntimeError" in logged and "publish_failing_once" in logged


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            KafkaAuthenticationFailed("authentication to h:1 (SASL_SSL SCRAM-SHA-512 as 'u') failed"),
            "AuthenticationFailed",
        ),
        (
            KafkaTlsHandshakeFailed("TLS handshake with h:1 failed: not signed by the CA"),
            "TLSHandshakeFailed",
        ),
    ],
    ids=["wrong-password", "foreign-ca"],
)
def test_credential_failures_are_named_stalled_and_backed_off(
    tmp_path: Path, error: Exception, reason: str
) -> None:
    """A wrong password and an untrusted broker certificate need a person, not a retry storm: their
    own reason (TLS is never reported as a password problem), Stalled, and the growing backoff."""
    h = make_harness(tmp_path, cluster())
    h.fake.before("cluster_id", _raise(error), once=False)
    ref = PolicyRef("team", "p")

    async def scenario() -> list[timedelta]:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS))
        delays = []
        for _ in range(3):
            await h.reconcile("p")
            memory = h.controller.workers[ref].memory
            assert memory.next_due is not None
            delays.append(memory.next_due - h.now())
        return delays

    assert run_async(scenario) == [timedelta(seconds=5), timedelta(seconds=10), timedelta(seconds=20)]
    assert (h.condition("p")["status"], h.condition("p")["reason"]) == ("False", reason)
    assert h.condition("p", "Stalled")["status"] == "True"
    assert h.condition("p", "Reconciling")["status"] == "False"
    assert h.events.reasons().count(reason) == 1


@pytest.mark.parametrize(
    ("error", "reason"),
    [(RuntimeError("a bug"), "InternalError"), (KafkaUnavailable("broker gone"), "KafkaUnavailable")],
    ids=["bug", "outage"],
)
def test_a_step_that_raises_keeps_what_the_earlier_steps_deleted(
    tmp_path: Path, error: Exception, reason: str
) -> None:
    h = make_harness(tmp_path, cluster())
    h.fake.before("delete_offsets", _raise(error))  # after the group step deleted ci-old, ci-solo

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce"))
        await h.reconcile("p")

    run_async(scenario)
    ready = h.condition("p")
    assert ready["reason"] == reason
    assert ready["message"].endswith("; deleted 2 groups and 0 offsets before that")
    assert h.status_of("p")["totals"] == {"groupsDeleted": 2, "offsetsDeleted": 0}
    assert {"ci-old", "ci-solo"}.isdisjoint(h.fake.groups) and "ci-moved" in h.fake.groups
    assert h.events.reasons().count("GroupDeleted") == 2


def test_an_unanswered_deletion_is_reported_as_unknown_not_as_failed(tmp_path: Path) -> None:
    """The adapter marks a request that was sent and never answered (connection reset, timeout):
    the status must not claim it failed, and the totals count only confirmed deletions."""
    h = make_harness(tmp_path, cluster())
    lost = KafkaError("KafkaConnectionError", retriable=True, message="socket disconnected", unanswered=True)
    h.fake.fail("ci-old", "delete_group", lost)

    async def scenario() -> None:
        await observe_quietly(h, policy_body("p", rules=RULES, limits=LIMITS, mode="Enforce"))
        await h.reconcile("p")

    run_async(scenario)
    ready = h.condition("p")
    assert (ready["status"], ready["reason"]) == ("False", "PartialFailure")
    assert ready["message"].startswith("1 of 3 actions has an unknown outcome (sent, then KafkaConnection")
    assert "the broker may have executed it;" in ready["message"] and "failed" not in ready["message"]
    assert h.status_of("p")["totals"] == {"groupsDeleted": 1, "offsetsDeleted": 2}  # ci-solo, ci-moved
    assert h.events.reasons().count("OutcomeUnknown") == 1
