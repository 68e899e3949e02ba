"""The one loop that runs a pass's Enforce plans (cleanup/pass_deletions.py), on FakeKafka: what a
failed deletion stops is decided by what failed. An unavailable cluster stops every later deletion
of the pass on it; a refused audit record stops the later deletions that write to the same sink;
anything else stops the pass."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import UTC, datetime
from typing import Any

import pytest

from groupwarden.cleanup.cluster_pass import ClusterPass, gather_and_decide
from groupwarden.cleanup.gateway import KafkaUnavailable
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.cleanup.pass_deletions import (
    Enforcement,
    PassStops,
    PolicyDeletions,
    StopCause,
    execute_pass,
)
from groupwarden.cleanup.steps import AbortReason, AuditBlocked, StepsInterrupted
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ResultKind
from groupwarden.core.policy import ConsumerGroupPolicy, PolicyRef, parse_policy
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.deletion_trail import AuditRecorder, AuditSink, MemorySink
from groupwarden.testing.audit_keys import fixed_signer
from groupwarden.testing.fake_kafka import FakeKafka
from gwtest.audit_sinks import RefusingSink

pytestmark = pytest.mark.unit

DAY_MS = 86_400_000
A, B, C = PolicyRef("team-a", "a"), PolicyRef("team-b", "b"), PolicyRef("team-c", "c")


def policy(ref: PolicyRef, prefix: str, mode: str = "Enforce") -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": ref.name, "namespace": ref.namespace},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": {"include": [f"{prefix}-*"]},
                "rules": {"emptyGroupRetention": "1d"},
                "mode": mode,
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def cluster() -> FakeKafka:
    """Two Empty, old groups per policy (`a-*`, `b-*`, `c-*`): each plan is one DeleteGroups step."""
    fake = FakeKafka(topics=["t"])
    for prefix in ("a", "b", "c"):
        for i in (1, 2):
            fake.add_group(f"{prefix}-{i}", subscribed=["t"], offsets={("t", 0): i})
            fake.leave(f"{prefix}-{i}")
    fake.advance(3 * DAY_MS)
    return fake


def decided(fake: FakeKafka, *policies: ConsumerGroupPolicy) -> ClusterPass:
    now = datetime.fromtimestamp(fake.now_ms / 1000, UTC)
    return gather_and_decide(fake, ClusterKnowledge(ObservedTimes()), policies, now)


def enforcement(ref: PolicyRef, sink: AuditSink, key: Hashable, **extra: Any) -> Enforcement:
    def recorder(snapshot: ClusterSnapshot) -> AuditRecorder:
        return AuditRecorder([sink], snapshot, ["fake:9092"], signer=fixed_signer())

    return Enforcement(ref, recorder, key, **extra)


def raising(error: Exception) -> Callable[[FakeKafka], None]:
    def hook(_fake: FakeKafka) -> None:
        raise error

    return hook


def deleted(result: PolicyDeletions) -> list[str]:
    return sorted(o.action.group_id for o in result.outcomes if o.result is ResultKind.DELETED)


ALL = {"a-1", "a-2", "b-1", "b-2", "c-1", "c-2"}


def test_without_failures_every_policy_deletes_its_groups_in_turn() -> None:
    fake = cluster()
    sink = MemorySink()
    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(B, "b"), policy(C, "c")),
        fake,
        [enforcement(ref, sink, "s") for ref in (A, B, C)],
    )
    assert [deleted(ran[ref]) for ref in (A, B, C)] == [["a-1", "a-2"], ["b-1", "b-2"], ["c-1", "c-2"]]
    assert all(r.stopped is None and r.aborted is None for r in ran.values())
    assert not ALL & set(fake.groups)
    assert [r["type"] for r in sink.records] == ["intent", "intent", "outcome", "outcome"] * 3


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        (KafkaUnavailable("broker gone"), StopCause.CLUSTER_UNAVAILABLE),
        # The adapters translate client exceptions into the port's: one that gets here untranslated
        # is a bug of ours, and stops every later deletion as well.
        (ConnectionResetError("reset by peer"), StopCause.UNEXPECTED),
    ],
    ids=["port-error", "client-error-let-through"],
)
def test_an_unavailable_cluster_stops_every_later_deletion_on_it_whatever_the_sink(
    error: Exception, cause: StopCause
) -> None:
    fake = cluster()
    fake.before("delete_groups", raising(error))  # once: the cluster is back for B and C
    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(B, "b"), policy(C, "c")),
        fake,
        [
            enforcement(A, MemorySink(), "s1"),
            enforcement(B, MemorySink(), "s1"),
            enforcement(C, MemorySink(), "s2"),
        ],
    )
    first = ran[A].stopped
    assert first is not None and ran[A].failed_here
    assert (first.cause, first.policy, first.error) == (cause, A, error)
    assert isinstance(first.raised, StepsInterrupted)
    for ref in (B, C):
        assert ran[ref].stopped is first and not ran[ref].failed_here and ran[ref].outcomes == ()
    assert fake.calls["delete_groups"] == 1  # neither B nor C was even tried
    assert set(fake.groups) >= ALL


def test_a_refused_audit_record_stops_the_later_deletions_of_that_sink_only() -> None:
    fake = cluster()
    shared = RefusingSink({"a-1"})  # A's record is refused; B's would have been taken
    other = MemorySink()
    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(B, "b"), policy(C, "c")),
        fake,
        [enforcement(A, shared, "s1"), enforcement(B, shared, "s1"), enforcement(C, other, "s2")],
    )
    stop = ran[A].stopped
    assert (
        stop is not None and stop.cause is StopCause.AUDIT_BLOCKED and isinstance(stop.raised, AuditBlocked)
    )
    assert ran[B].stopped is stop and ran[B].outcomes == ()
    assert ran[C].stopped is None and deleted(ran[C]) == ["c-1", "c-2"]  # its own sink is fine
    assert {"a-1", "a-2", "b-1", "b-2"} <= set(fake.groups) and not {"c-1", "c-2"} & set(fake.groups)
    assert shared.records == []  # A's intents are refused before its step: nothing of A or B written


def test_an_unexpected_error_stops_the_pass() -> None:
    fake = cluster()
    bug = RuntimeError("a bug of ours")
    fake.before("delete_groups", raising(bug))
    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(B, "b"), policy(C, "c")),
        fake,
        [
            enforcement(A, MemorySink(), "s1"),
            enforcement(B, MemorySink(), "s2"),
            enforcement(C, MemorySink(), "s3"),
        ],
    )
    stop = ran[A].stopped
    assert stop is not None and (stop.cause, stop.error) == (StopCause.UNEXPECTED, bug)
    assert ran[B].stopped is stop and ran[C].stopped is stop
    assert fake.calls["delete_groups"] == 1 and set(fake.groups) >= ALL


def test_an_error_before_the_steps_is_a_failed_deletion_too() -> None:
    fake = cluster()

    def broken_recorder(_snapshot: ClusterSnapshot) -> AuditRecorder:
        raise ValueError("no recorder")

    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(B, "b")),
        fake,
        [Enforcement(A, broken_recorder, "s1"), enforcement(B, MemorySink(), "s2")],
    )
    stop = ran[A].stopped
    assert stop is not None and stop.cause is StopCause.UNEXPECTED and isinstance(stop.raised, ValueError)
    assert ran[B].stopped is stop and fake.calls["delete_groups"] == 0


def test_the_stops_of_one_pass_hold_across_its_calls() -> None:
    """The operator gathers once per connection: one pass may make several calls."""
    fake = cluster()
    stops = PassStops()
    shared = RefusingSink({"a-1"})
    execute_pass(decided(fake, policy(A, "a")), fake, [enforcement(A, shared, "s1")], stops=stops)
    fake.before("delete_groups", raising(KafkaUnavailable("gone")))  # C's step meets an outage
    ran = execute_pass(
        decided(fake, policy(B, "b"), policy(C, "c")),
        fake,
        [enforcement(B, shared, "s1"), enforcement(C, MemorySink(), "s2")],
        stops=stops,
    )
    b_stop, c_stop = ran[B].stopped, ran[C].stopped
    assert b_stop is not None and (b_stop.cause, b_stop.policy) == (StopCause.AUDIT_BLOCKED, A)
    assert c_stop is not None and (c_stop.cause, c_stop.policy) == (StopCause.CLUSTER_UNAVAILABLE, C)
    later = execute_pass(
        decided(fake, policy(A, "a")), fake, [enforcement(A, MemorySink(), "s9")], stops=stops
    )
    assert later[A].stopped is c_stop and fake.calls["delete_groups"] == 1


def test_plans_that_do_not_delete_are_reported_after_a_stop_and_a_guard_stop_stops_no_other() -> None:
    fake = cluster()
    fake.before("delete_groups", raising(KafkaUnavailable("gone")))
    dry = PolicyRef("team-d", "dry")
    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(dry, "b", mode="DryRun")),
        fake,
        [enforcement(A, MemorySink(), "s"), enforcement(dry, MemorySink(), "s")],
    )
    assert ran[dry].stopped is None and [a.group_id for a in ran[dry].plan.actions] == ["b-1", "b-2"]

    fake = cluster()
    confirmations: list[PolicyRef] = []

    def gone() -> AbortReason:
        confirmations.append(A)
        return AbortReason.GONE

    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(B, "b")),
        fake,
        [enforcement(A, MemorySink(), "s", confirm=gone), enforcement(B, MemorySink(), "s")],
    )
    assert (ran[A].aborted, ran[A].stopped, ran[A].outcomes) == (AbortReason.GONE, None, ())
    assert confirmations == [A] and deleted(ran[B]) == ["b-1", "b-2"]


def test_a_later_policy_is_decided_without_what_an_earlier_one_deleted() -> None:
    fake = cluster()
    both = PolicyRef("team-b", "both")
    ran = execute_pass(
        decided(fake, policy(A, "a"), policy(both, "*")),
        fake,
        [enforcement(A, MemorySink(), "s"), enforcement(both, MemorySink(), "s")],
    )
    assert deleted(ran[A]) == ["a-1", "a-2"]
    assert deleted(ran[both]) == ["b-1", "b-2", "c-1", "c-2"]
