"""The one retry policy of the Kafka request paths (connectivity/retry.py) and the per-coordinator retry
loop of the admin session that uses it (no broker: one try is scripted per call)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import kafka.errors as Errors
import pytest

from groupwarden.adapters.kafka_admin_session import AdminSession
from groupwarden.cleanup.execute import classify
from groupwarden.cleanup.gateway import KafkaError
from groupwarden.connectivity.retry import (
    DONE_BY_EARLIER_ATTEMPT,
    NOT_RESENT,
    RetryPolicy,
    is_retriable_name,
)
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.core.plan import ResultKind

pytestmark = pytest.mark.unit

LOADING = KafkaError("COORDINATOR_LOAD_IN_PROGRESS", 14, retriable=True)
MOVED = KafkaError("NOT_COORDINATOR", 16, retriable=True)
REFUSED = KafkaError("KafkaConnectionError", retriable=True, message="111 ECONNREFUSED")
RESET = KafkaError("KafkaConnectionError", retriable=True, message="reset", unanswered=True)
NOT_FOUND = KafkaError("GROUP_ID_NOT_FOUND", 69)
NON_EMPTY = KafkaError("NON_EMPTY_GROUP", 68)
DENIED = KafkaError("GROUP_AUTHORIZATION_FAILED", 30)


def middle() -> float:
    return 0.5  # no jitter


def test_backoff_doubles_to_its_cap_and_never_passes_the_deadline() -> None:
    deadline = RetryPolicy(timeout_s=5.0).start(now=100.0, rng=middle)
    delays = []
    now = 100.0
    while (delay := deadline.next_delay(now)) is not None:
        delays.append(delay)
        now += delay
    assert delays[:5] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0])
    assert all(d <= 1.0 for d in delays)
    assert now == pytest.approx(105.0)  # the last pause ends at the deadline: one last try there
    assert deadline.next_delay(105.0) is None and deadline.expired(105.0)


def test_a_caller_retrying_without_pausing_keeps_the_capped_backoff() -> None:
    # 2.0**n overflows a float after ~1,000 tries; the backoff stays at its cap instead.
    deadline = RetryPolicy(timeout_s=5.0).start(now=100.0, rng=middle)
    delays = [deadline.next_delay(100.0) for _ in range(2_000)]
    assert delays[-1] == pytest.approx(1.0)


def test_jitter_stays_within_twenty_percent() -> None:
    low = RetryPolicy(timeout_s=60).start(0, rng=lambda: 0.0).next_delay(0)
    high = RetryPolicy(timeout_s=60).start(0, rng=lambda: 0.999999).next_delay(0)
    assert low == pytest.approx(0.08) and high == pytest.approx(0.12, rel=1e-4)


def test_a_zero_timeout_gives_no_retry_and_bad_policies_are_refused() -> None:
    assert RetryPolicy(timeout_s=0).start(0).next_delay(0) is None
    with pytest.raises(ValueError):
        RetryPolicy(timeout_s=1, initial_backoff_s=2, max_backoff_s=1)
    with pytest.raises(ValueError):
        RetryPolicy(timeout_s=1, jitter=1.5)
    assert RetryPolicy.from_api_timeout_ms(60_000).timeout_s == 60


def test_retriable_names_are_the_failover_errors() -> None:
    for name in ("COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"):
        assert is_retriable_name(name)
    for name in ("NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE"):
        assert is_retriable_name(name)
    # A new leader's end offset before its high watermark caught up (seen right after an election).
    assert is_retriable_name("OFFSET_NOT_AVAILABLE")
    for name in ("GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP", "GROUP_AUTHORIZATION_FAILED"):
        assert not is_retriable_name(name)


def test_a_deletion_done_by_an_earlier_attempt_counts_as_deleted() -> None:
    assert classify(KafkaError(DONE_BY_EARLIER_ATTEMPT)) is ResultKind.DELETED
    assert classify(KafkaError(NOT_RESENT, retriable=True)) is ResultKind.FAILED


class ScriptedSession(AdminSession):
    """The retry loop of `per_coordinator` with each try's answers scripted per group (a list of
    answers per group, one per try; a group without answers left keeps its last) and a clock
    that only the backoff moves."""

    def __init__(self, script: Mapping[str, list[object]], timeout_ms: int = 5000) -> None:
        settings = ConnectionSettings(bootstrap_servers=("127.0.0.1:1",), api_timeout_ms=timeout_ms)
        super().__init__(settings)
        self.script = {g: list(a) for g, a in script.items()}
        self.now = 0.0
        self.clock = lambda: self.now
        self.tries: list[list[str]] = []
        self.refreshes = 0

    async def _attempt(
        self,
        group_ids: list[str],
        build: Callable[[list[str]], Any],
        read: Callable[[list[str], Any], Any],
        size: int = 1000,
        in_flight: int = 1,
    ) -> tuple[dict[str, Any], set[str]]:
        self.tries.append(list(group_ids))
        answers = {
            g: self.script[g].pop(0) if len(self.script[g]) > 1 else self.script[g][0] for g in group_ids
        }
        for answer in answers.values():
            if isinstance(answer, Exception):  # the lookup failed in transit: nothing was sent
                raise answer
        # A transport failure is no answer; a broker error (retriable or not) is.
        reached = {g for g, a in answers.items() if not (isinstance(a, KafkaError) and a.code == -1)}
        return answers, reached

    async def sleep(self, seconds: float) -> None:
        self.now += seconds

    async def refresh_metadata(self) -> None:
        self.refreshes += 1


def run(
    session: ScriptedSession, groups: list[str], before_send: Callable[[], str | None] | None = None
) -> Any:
    return asyncio.run(
        session.per_coordinator(groups, lambda ids: None, lambda r: r, before_send=before_send)
    )


def test_retriable_errors_are_retried_until_answered_and_other_errors_answer_at_once() -> None:
    session = ScriptedSession({"a": [LOADING, REFUSED, MOVED, "ok-a"], "b": [DENIED], "c": ["ok-c"]})
    assert run(session, ["a", "b", "c"]) == {"a": "ok-a", "b": DENIED, "c": "ok-c"}
    assert session.tries == [["a", "b", "c"], ["a"], ["a"], ["a"]]
    assert session.refreshes == 3  # metadata refreshed before every re-try


def test_retries_stop_at_the_deadline_with_the_last_error() -> None:
    session = ScriptedSession({"a": [LOADING]}, timeout_ms=2000)
    assert run(session, ["a"]) == {"a": LOADING}
    assert session.now == pytest.approx(2.0, abs=0.3)
    assert 5 <= len(session.tries) <= 12


def test_a_resent_deletion_that_finds_the_group_gone_was_done_by_the_earlier_attempt() -> None:
    session = ScriptedSession({"moved": [MOVED, NOT_FOUND], "loading": [LOADING, None], "gone": [NOT_FOUND]})
    result = run(session, ["moved", "loading", "gone"], before_send=lambda: None)
    assert result["moved"].name == DONE_BY_EARLIER_ATTEMPT
    assert classify(result["moved"]) is ResultKind.DELETED
    assert result["loading"] is None  # deleted by the re-send
    assert result["gone"] == NOT_FOUND  # the first answer: it was not there


def test_a_refused_connection_never_reached_the_broker_so_not_found_stays_not_found() -> None:
    session = ScriptedSession({"a": [REFUSED, NOT_FOUND]})
    assert run(session, ["a"], before_send=lambda: None) == {"a": NOT_FOUND}


def test_a_deletion_whose_answer_was_lost_is_never_sent_again_and_stays_unknown() -> None:
    session = ScriptedSession({"lost": [RESET, NOT_FOUND], "moved": [MOVED, None]})
    result = run(session, ["lost", "moved"], before_send=lambda: None)
    assert result["lost"] == RESET and classify(result["lost"]) is ResultKind.UNKNOWN
    assert session.tries == [["lost", "moved"], ["moved"]]
    # A read whose answer was lost is simply asked again.
    assert run(ScriptedSession({"lost": [RESET, "ok"]}), ["lost"]) == {"lost": "ok"}


def test_the_guard_is_asked_before_every_send_and_stops_the_resends() -> None:
    asked: list[int] = []

    def guard() -> str | None:
        asked.append(1)
        return "this replica lost the leader Lease" if len(asked) > 2 else None

    session = ScriptedSession({"a": [MOVED, LOADING, MOVED, None]})
    result = run(session, ["a"], before_send=guard)
    assert len(session.tries) == 2 and len(asked) == 3
    assert result["a"].name == NOT_RESENT and "lost the leader Lease" in result["a"].message
    assert "COORDINATOR_LOAD_IN_PROGRESS" in result["a"].message  # its last answer
    assert classify(result["a"]) is ResultKind.FAILED and result["a"].retriable


def test_a_guard_that_says_stop_at_once_sends_nothing() -> None:
    session = ScriptedSession({"a": [None]})
    result = run(session, ["a"], before_send=lambda: "the policy was deleted")
    assert session.tries == [] and result["a"].name == NOT_RESENT


def test_a_lookup_that_fails_in_transit_is_retried_then_fails_the_whole_call() -> None:
    refused = Errors.KafkaConnectionError("111 ECONNREFUSED")
    session = ScriptedSession({"a": [refused, "ok"]})
    assert run(session, ["a"]) == {"a": "ok"}
    session = ScriptedSession({"a": [refused]}, timeout_ms=1000)
    with pytest.raises(Errors.KafkaConnectionError):
        run(session, ["a"])
    assert session.now == pytest.approx(1.0, abs=0.2)
    # Once some groups were answered, the others keep the transport error instead.
    session = ScriptedSession({"a": ["ok"], "b": [MOVED, refused]}, timeout_ms=1000)
    result = run(session, ["a", "b"])
    assert result["a"] == "ok" and result["b"].name == "KafkaConnectionError"
