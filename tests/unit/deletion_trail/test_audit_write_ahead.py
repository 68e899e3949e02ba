"""The write-ahead rule: an intent is stored before its destructive call, and a failure to store it
means the call never happens."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from audit_factories import FailingSink, cluster, plan_for

from groupwarden.cleanup.execute import execute_plan
from groupwarden.core.plan import ActionKind, ResultKind
from groupwarden.deletion_trail import (
    AuditRecorder,
    AuditWriteError,
    FileSink,
    LogSink,
    MemorySink,
    NoSigningKey,
    TrailEntry,
    UnsignedRecords,
)
from groupwarden.testing.audit_keys import fixed_signer, read_fixed_trail, trusted_records
from groupwarden.testing.fake_kafka import FakeKafka


def test_a_failing_audit_sink_blocks_every_deletion() -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    assert {a.kind for a in plan.actions} == {ActionKind.DELETE_GROUP, ActionKind.DELETE_OFFSETS}
    recorder = AuditRecorder(
        [MemorySink(), FailingSink(fail_at=1)], snapshot, ["fake:9092"], signer=fixed_signer()
    )

    with pytest.raises(AuditWriteError, match="No space left on device"):
        execute_plan(fake, plan, recorder.before_action(plan))

    assert fake.calls["delete_groups"] == 0 and fake.calls["delete_offsets"] == 0
    assert {"stale-a", "stale-b", "svc"} <= set(fake.groups)


def test_a_failure_on_a_later_intent_blocks_the_whole_group_batch() -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    recorder = AuditRecorder(
        [FailingSink(fail_at=2)], snapshot, ["fake:9092"], signer=fixed_signer()
    )  # 1st intent only

    with pytest.raises(AuditWriteError):
        execute_plan(fake, plan, recorder.before_action(plan))

    # DeleteGroups is one batched call: the first group's intent was written, the second's was not,
    # so the batch never went out.
    assert fake.calls["delete_groups"] == 0
    assert {"stale-a", "stale-b"} <= set(fake.groups)


def test_every_intent_is_durable_before_its_call_and_every_outcome_follows(tmp_path: Path) -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    trail = tmp_path / "audit.jsonl"
    seen_at_write: list[tuple[str, str, bool]] = []

    class Probe:
        def write(self, entry: TrailEntry) -> None:
            # The file sink came first (its batch with one fsync): the record is already on disk
            # while the group still exists.
            record = entry.record
            assert entry.line in trail.read_text().splitlines()
            seen_at_write.append((record["type"], record["group"], record["group"] in fake.groups))

    recorder = AuditRecorder([FileSink(trail), Probe()], snapshot, ["fake:9092"], signer=fixed_signer())
    outcomes = execute_plan(fake, plan, recorder.before_action(plan))
    recorder.record_outcomes(plan, outcomes)

    intents = [(g, exists) for kind, g, exists in seen_at_write if kind == "intent"]
    assert intents and all(exists for _, exists in intents), "an intent was written after its deletion"
    records = trusted_records(trail.read_text().splitlines())
    assert [r["type"] for r in records] == ["intent"] * len(plan.actions) + ["outcome"] * len(plan.actions)
    assert {r["planId"] for r in records} == {recorder.plan_id}
    by_action = {r["actionId"]: r for r in records if r["type"] == "outcome"}
    assert {r["actionId"] for r in records if r["type"] == "intent"} == set(by_action)
    assert {o.action.group_id: o.result for o in outcomes} == {
        "stale-a": ResultKind.DELETED,
        "stale-b": ResultKind.DELETED,
        "svc": ResultKind.DELETED,
    }
    assert {r["group"]: r["result"] for r in by_action.values()} == {
        "stale-a": "Deleted",
        "stale-b": "Deleted",
        "svc": "Deleted",
    }


def test_an_unwritable_audit_file_blocks_deletion(tmp_path: Path) -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    recorder = AuditRecorder(
        [FileSink(tmp_path / "missing-dir" / "audit.jsonl")], snapshot, ["fake:9092"], signer=fixed_signer()
    )
    with pytest.raises(AuditWriteError, match="missing-dir"):
        execute_plan(fake, plan, recorder.before_action(plan))
    assert fake.calls["delete_groups"] == 0 and fake.calls["delete_offsets"] == 0


def test_the_log_sink_emits_one_json_line_per_record(caplog: pytest.LogCaptureFixture) -> None:
    fake: FakeKafka = cluster()
    snapshot, plan = plan_for(fake)
    recorder = AuditRecorder([LogSink()], snapshot, ["fake:9092"], signer=fixed_signer())
    with caplog.at_level(logging.INFO, logger="groupwarden.audit"):
        outcomes = execute_plan(fake, plan, recorder.before_action(plan))
        recorder.record_outcomes(plan, outcomes)
    lines = [r for r in caplog.records if r.name == "groupwarden.audit"]
    assert len(lines) == 2 * len(plan.actions)
    parsed = [json.loads(r.getMessage()) for r in lines]
    assert all(p["auditVersion"] == 2 and p["record"]["auditVersion"] == 2 for p in parsed)
    assert len(trusted_records([r.getMessage() for r in lines])) == len(lines)  # signed, verifiable


def test_without_a_signing_key_nothing_is_deleted_unless_unsigned_records_are_allowed() -> None:
    fake = cluster()
    snapshot, plan = plan_for(fake)
    sink = MemorySink()
    refusing = AuditRecorder([sink], snapshot, ["fake:9092"], signer=NoSigningKey())
    with pytest.raises(AuditWriteError, match="no audit signing key is configured"):
        execute_plan(fake, plan, refusing.before_action(plan))
    assert fake.calls["delete_groups"] == 0 and fake.calls["delete_offsets"] == 0 and sink.lines == []

    unsigned = AuditRecorder([sink], snapshot, ["fake:9092"], signer=UnsignedRecords())
    unsigned.record_outcomes(plan, execute_plan(fake, plan, unsigned.before_action(plan)))
    assert fake.calls["delete_groups"] == 1
    assert {json.loads(line)["auditVersion"] for line in sink.lines} == {1}
    refused = read_fixed_trail(sink.lines).refused
    assert len(refused) == len(sink.lines) and "--trust-unsigned" in refused[0].reason
    assert len(read_fixed_trail(sink.lines, trust_unsigned=True).records) == len(sink.lines)


def test_a_step_that_raises_gets_unknown_outcomes_so_no_intent_is_left_dangling() -> None:
    """The broker went away during the group step: its intents are written, the call raised. The
    trail says Unknown for each (restore: possibly deleted), and no later step ran."""
    from groupwarden.cleanup.gateway import KafkaUnavailable
    from groupwarden.cleanup.steps import ALWAYS_GO, StepsInterrupted, execute_guarded

    fake = cluster()
    snapshot, plan = plan_for(fake)
    sink = MemorySink()
    recorder = AuditRecorder([sink], snapshot, ["fake:9092"], signer=fixed_signer())

    def gone(_fake: FakeKafka) -> None:
        raise KafkaUnavailable("connection refused")

    fake.before("delete_groups", gone)
    with pytest.raises(StepsInterrupted):
        execute_guarded(fake, plan, ALWAYS_GO, recorder=recorder)
    groups = [a.group_id for a in plan.actions if a.kind is ActionKind.DELETE_GROUP]
    outcomes = {r["group"]: r for r in sink.records if r["type"] == "outcome"}
    assert sorted(outcomes) == sorted(groups)
    assert {r["result"] for r in outcomes.values()} == {ResultKind.UNKNOWN.value}
    assert all("KafkaUnavailable: connection refused" in r["error"] for r in outcomes.values())
    assert fake.calls["delete_offsets"] == 0
