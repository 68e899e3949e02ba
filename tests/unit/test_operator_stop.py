"""A stopping operator (connectivity/stopping.py, the SIGTERM of `groupwarden run`): every retry gives
up at once, nothing new is sent, and the process waits a bounded time for what is in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from groupwarden.adapters import kafka_audit_topic
from groupwarden.adapters.kafka_admin_session import AdminSession
from groupwarden.cleanup.gateway import KafkaUnavailable
from groupwarden.cleanup.steps import AbortReason
from groupwarden.commands.run import KafkaThreads
from groupwarden.connectivity import stopping
from groupwarden.connectivity.retry import RetryPolicy
from groupwarden.connectivity.settings import ConnectionSettings

pytestmark = pytest.mark.unit


@pytest.fixture
def stopped() -> Iterator[None]:
    stopping.request_stop()
    try:
        yield
    finally:
        stopping.reset()


def test_no_retry_is_given_once_the_process_stops() -> None:
    deadline = RetryPolicy(timeout_s=60).start(now=0.0)
    assert deadline.next_delay(0.0) is not None
    stopping.request_stop()
    try:
        assert deadline.next_delay(1.0) is None
        assert not stopping.pause(10)  # returns at once
    finally:
        stopping.reset()
    assert stopping.pause(0.01)


@pytest.mark.usefixtures("stopped")
def test_a_stopping_session_starts_no_call() -> None:
    session = AdminSession(ConnectionSettings(bootstrap_servers=("127.0.0.1:1",)))
    began = time.monotonic()
    with pytest.raises(KafkaUnavailable, match="the operator is stopping"):
        session.run(lambda: None)  # type: ignore[arg-type, return-value]
    assert time.monotonic() - began < 1  # no bootstrap attempted
    assert session._net_client is None


class SlowProducer:
    """A producer whose records are never acknowledged (the cluster is down)."""

    def __init__(self) -> None:
        self.flushes: list[float] = []

    def flush(self, timeout: float) -> int:
        self.flushes.append(timeout)
        time.sleep(timeout)
        return 1


def test_an_audit_flush_gives_up_when_the_process_stops() -> None:
    producer = SlowProducer()
    threading.Timer(0.3, stopping.request_stop).start()
    began = time.monotonic()
    try:
        assert kafka_audit_topic._flush(producer, 65) == 1  # type: ignore[arg-type]
    finally:
        stopping.reset()
    assert time.monotonic() - began < 2
    assert max(producer.flushes) <= kafka_audit_topic.FLUSH_SLICE_S


def test_the_kafka_threads_say_when_nothing_runs_any_more() -> None:
    threads = KafkaThreads(2)
    release = threading.Event()
    try:
        future = threads.submit(release.wait, 5)
        time.sleep(0.05)
        assert threads.running == 1
        assert not threads.wait_idle(0.1)
        release.set()
        assert threads.wait_idle(2) and future.result() is True
        assert threads.running == 0
    finally:
        release.set()
        threads.shutdown(wait=True)


def test_the_run_guard_of_a_stopping_process_says_so() -> None:
    from groupwarden.controller.worker import PolicyWorker

    worker = PolicyWorker.__new__(PolicyWorker)  # the guard reads nothing else first
    stopping.request_stop()
    try:
        assert worker.stop_reason() is AbortReason.STOPPING
    finally:
        stopping.reset()
    assert AbortReason.STOPPING.value == "the operator is stopping"
