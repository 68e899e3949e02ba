"""The one retry policy of the Kafka request paths (cleanup/retry.py) and the per-coordinator retry
loop of the admin session that uses it (no broker: one try is scripted per call)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from groupwarden.adapters.kafka_admin_session import AdminSession
from groupwarden.cleanup.connection import ConnectionSettings
from groupwarden.cleanup.execute import classify
from groupwarden.cleanup.gateway import KafkaError
from groupwarden.cleanup.retry import (
    ANSWER_LOST,
    DONE_BY_EARLIER_ATTEMPT,
    NOT_RESENT,
    RetryPolicy,
    is_retriable_name,
)
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
    for name in ("GROUP_ID_NOT_FOUND", "NON_EMPTY_GROUP", "GROUP_AUTHORIZATION_FAILED"):
        assert not is_retriable_name(name)


def test_a_deletion_done_by_an_earlier_attempt_counts_as_deleted() -> None:
    assert classify(KafkaError(DONE_BY_EARLIER_ATTEMPT)) is ResultKind.DELETED
    assert classify(KafkaError(ANSWER_LOST, unanswered=True)) is ResultKind.UNKNOWN
    assert classify(KafkaError(NOT_RESENT, retriable=True)) is ResultKind.FAILED
    assert classify(KafkaError(NOT_RESENT, retriable=True, unanswered=True)) is ResultKind.UNKNOWN


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
        self, group_ids: list[str], build: Callable[[list[str]], Any], parse: Callable[[Any], Any]
    ) -> tuple[dict[str, Any], set[str]]:
        self.tries.append(list(group_ids))
        answers = {
            g: self.script[g].pop(0) if len(self.script[g]) > 1 else self.script[g][0] for g in group_ids
        }
        reached = {g for g, a in answers.items() if not (isinstance(a, KafkaError) and a is REFUSED)}
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
    session = ScriptedSession({"lost": [RESET, NOT_FOUND], "moved": [MOVED, NOT_FOUND], "gone": [NOT_FOUND]})
    result = run(session, ["lost", "moved", "gone"], before_send=lambda: None)
    assert result["lost"].name == DONE_BY_EARLIER_ATTEMPT
    assert result["moved"].name == DONE_BY_EARLIER_ATTEMPT
    assert result["gone"] == NOT_FOUND  # the first answer: it was not there


def test_a_refused_connection_never_reached_the_broker_so_not_found_stays_not_found() -> None:
    session = ScriptedSession({"a": [REFUSED, NOT_FOUND]})
    assert run(session, ["a"], before_send=lambda: None) == {"a": NOT_FOUND}


def test_a_lost_answer_stays_unknown_unless_a_resend_tells() -> None:
    session = ScriptedSession({"never": [RESET, MOVED], "active": [RESET, NON_EMPTY], "now": [RESET, None]})
    result = run(
        ScriptedSession({"never": [RESET, MOVED]}, timeout_ms=1000), ["never"], before_send=lambda: None
    )
    assert result["never"].unanswered and classify(result["never"]) is ResultKind.UNKNOWN
    result = run(session, ["active", "now"], before_send=lambda: None)
    assert result["active"].name == ANSWER_LOST and classify(result["active"]) is ResultKind.UNKNOWN
    assert result["now"] is None  # deleted by the re-send


def test_the_guard_is_asked_before_every_send_and_stops_the_resends() -> None:
    asked: list[int] = []

    def guard() -> str | None:
        asked.append(1)
        return "this replica lost the leader Lease" if len(asked) > 2 else None

    session = ScriptedSession({"a": [RESET, MOVED, MOVED, None]})
    result = run(session, ["a"], before_send=guard)
    assert len(session.tries) == 2 and len(asked) == 3
    assert result["a"].name == NOT_RESENT and "lost the leader Lease" in result["a"].message
    assert classify(result["a"]) is ResultKind.UNKNOWN  # its first answer was lost


def test_a_guard_that_says_stop_at_once_sends_nothing() -> None:
    session = ScriptedSession({"a": [None]})
    result = run(session, ["a"], before_send=lambda: "the policy was deleted")
    assert session.tries == [] and result["a"].name == NOT_RESENT
    assert classify(result["a"]) is ResultKind.FAILED
