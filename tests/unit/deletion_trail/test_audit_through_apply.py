"""`groupwarden apply` runs through the operator's guarded step executor (cleanup/steps.py): the
same steps (one batched DeleteGroups, then each group's OffsetDelete), the same write-ahead audit
per step (intent before, outcome after) and the same stop on a refused record, with an always-go
guard. Driven through the command's own code path on the in-memory FakeKafka."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from audit_factories import DAY_MS, POLICY_DOCUMENT, FailingSink

from groupwarden.commands import exit_codes
from groupwarden.commands.plan import PlanOptions, plan_or_apply
from groupwarden.core.policy import load_policy_file
from groupwarden.deletion_trail import AuditSink, MemorySink
from groupwarden.testing.audit_keys import fixed_signer
from groupwarden.testing.fake_kafka import FakeKafka

# `apply --yes -o json --no-ledger-cache`
APPLY_JSON = PlanOptions(output="json", confirmed=True)


def _cluster() -> FakeKafka:
    """`stale`: an Empty classic group (DeleteGroup); `svc`: active, with offsets of a topic it no
    longer reads (DeleteOffsets). Two steps: the group batch, then svc's offsets."""
    fake = FakeKafka(topics=["t", "old"])
    fake.add_group("stale", subscribed=["t"], offsets={("t", 0): 5})
    fake.leave("stale")
    fake.add_group("svc", subscribed=["t"], offsets={("t", 0): 1, ("old", 0): 11})
    fake.advance(3 * DAY_MS)
    return fake


def _apply(
    tmp_path: Path, fake: FakeKafka, sink: AuditSink, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any], str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump(POLICY_DOCUMENT))
    now = datetime.now(UTC)
    code = plan_or_apply(
        APPLY_JSON,
        load_policy_file(policy),
        now,
        fake,
        execute=True,
        audit_sinks=[sink],
        signer=fixed_signer(),
    )
    captured = capsys.readouterr()
    return code, json.loads(captured.out), captured.err


def _results(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(o["action"], o["group"], o["result"]) for o in document["outcomes"]]


def _trail(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["type"], r["group"]) for r in records]


def _offsets_of(fake: FakeKafka, group: str) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in fake.groups[group].offsets}


def test_apply_writes_each_steps_intent_before_and_its_outcome_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, sink = _cluster(), MemorySink()
    code, document, _ = _apply(tmp_path, fake, sink, capsys)

    assert code == exit_codes.OK
    assert _results(document) == [("DeleteGroup", "stale", "Deleted"), ("DeleteOffsets", "svc", "Deleted")]
    # Step by step (the operator's order), not all intents first and all outcomes at the end.
    assert _trail(sink.records) == [
        ("intent", "stale"),
        ("outcome", "stale"),
        ("intent", "svc"),
        ("outcome", "svc"),
    ]
    assert fake.calls["delete_groups"] == 1 and fake.calls["delete_offsets"] == 1


@pytest.mark.parametrize(
    ("fail_at", "message"),
    [
        # The first step's outcome is refused: its deletion happened, nothing after it does.
        (2, "audit trail not writable after a deletion, no further action was executed: "),
        # The second step's intent is refused: that step never runs.
        (3, "audit trail not writable, the action was not executed: "),
    ],
)
def test_a_refused_record_stops_apply_after_the_first_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fail_at: int, message: str
) -> None:
    fake, sink = _cluster(), FailingSink(fail_at)
    code, document, err = _apply(tmp_path, fake, sink, capsys)

    assert code == exit_codes.PARTIAL_FAILURE
    assert f"error: {message}cannot write the audit record of " in err
    assert "No space left on device; deleted 1 group and 0 offsets before that" in err
    # What the done step deleted is still printed; the next step never ran.
    assert _results(document) == [("DeleteGroup", "stale", "Deleted")]
    assert fake.calls["delete_offsets"] == 0
    assert "stale" not in fake.groups and ("old", 0) in _offsets_of(fake, "svc")
    assert _trail(sink.records) == [("intent", "stale"), ("outcome", "stale")][: fail_at - 1]


def test_a_refused_first_intent_deletes_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = _cluster()
    code, document, err = _apply(tmp_path, fake, FailingSink(fail_at=1), capsys)

    assert code == exit_codes.PARTIAL_FAILURE
    assert "error: audit trail not writable, the action was not executed" in err
    assert "before that" not in err
    assert document["outcomes"] == []
    assert fake.calls["delete_groups"] == 0 and fake.calls["delete_offsets"] == 0
    assert {"stale", "svc"} <= set(fake.groups)


def test_an_outage_between_steps_reports_what_the_earlier_steps_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, sink = _cluster(), MemorySink()
    # The broker goes away after the DeleteGroups call, right after the OffsetDelete step's re-check
    # (its last read is an OffsetFetch): the step's intent is written, then its request raises.
    fake.before(
        "delete_groups", lambda f: f.before("fetch_offsets", lambda g: setattr(g, "unavailable", True))
    )
    code, document, err = _apply(tmp_path, fake, sink, capsys)

    assert code == exit_codes.PARTIAL_FAILURE
    assert "error: Kafka unavailable: FakeKafka is unavailable; deleted 1 group and 0 offsets" in err
    assert _results(document) == [("DeleteGroup", "stale", "Deleted")]
    # The interrupted step's intent is followed by an Unknown outcome (the call raised: whether the
    # broker executed it is not known; restore treats it as possibly deleted).
    assert _trail(sink.records) == [
        ("intent", "stale"),
        ("outcome", "stale"),
        ("intent", "svc"),
        ("outcome", "svc"),
    ]
    assert sink.records[-1]["result"] == "Unknown"
    assert "FakeKafka is unavailable" in sink.records[-1]["error"]


def test_two_overlapping_enforce_policies_delete_each_item_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Both policies find `stale` and svc's `old` offsets eligible: the first deletes them, the
    # second is decided again without them (as a gather after the first would see it).
    fake = _cluster()
    second = {**POLICY_DOCUMENT, "metadata": {"name": "second", "namespace": "team-b"}}
    policy = tmp_path / "policies.yaml"
    policy.write_text(yaml.safe_dump_all([POLICY_DOCUMENT, second]))
    sink = MemorySink()
    code = plan_or_apply(
        APPLY_JSON,
        load_policy_file(policy),
        datetime.now(UTC),
        fake,
        execute=True,
        audit_sinks=[sink],
        signer=fixed_signer(),
    )
    document = json.loads(capsys.readouterr().out)
    assert code == exit_codes.OK
    first, again = document["plans"]
    assert sorted(_results(first)) == [
        ("DeleteGroup", "stale", "Deleted"),
        ("DeleteOffsets", "svc", "Deleted"),
    ]
    assert again["actions"] == [] and again["outcomes"] == []
    assert fake.calls["delete_groups"] == 1 and fake.calls["delete_offsets"] == 1
    assert [r["type"] for r in sink.records].count("intent") == 2
