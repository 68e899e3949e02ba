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

from groupwarden.audit import AuditSink, MemorySink
from groupwarden.cli import build_parser
from groupwarden.commands import exit_codes
from groupwarden.commands.plan import run_with_gateway
from groupwarden.core.policy import load_policy_file
from groupwarden.testing.fake_kafka import FakeKafka

DAY_MS = 86_400_000


class RefusingSink:
    """Stores records until the `refuse_at`-th (1-based), which it refuses (a full disk)."""

    def __init__(self, refuse_at: int) -> None:
        self.refuse_at = refuse_at
        self.records: list[dict[str, Any]] = []

    def write(self, record: dict[str, Any]) -> None:
        if len(self.records) + 1 >= self.refuse_at:
            raise OSError(28, "No space left on device")
        self.records.append(record)


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
    tmp_path: Path, fake: FakeKafka, sinks: list[AuditSink], capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, Any], str]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "groupwarden.io/v1alpha1",
                "kind": "ConsumerGroupPolicy",
                "metadata": {"name": "cleanup", "namespace": "team-a"},
                "spec": {
                    "kafka": {"bootstrapServers": "fake:9092"},
                    "rules": {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d"},
                    "mode": "Enforce",
                    "limits": {"maxDeletionRatio": 1.0},
                },
            }
        )
    )
    args = build_parser().parse_args(["apply", "-f", str(policy), "--yes", "-o", "json"])
    policies = load_policy_file(policy)
    code = run_with_gateway(args, policies, datetime.now(UTC), fake, execute=True, audit_sinks=sinks)
    captured = capsys.readouterr()
    document: dict[str, Any] = json.loads(captured.out) if captured.out.strip() else {}
    return code, document, captured.err


def _results(document: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(o["action"], o["group"], o["result"]) for o in document["outcomes"]]


def _trail(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(r["type"], r["group"]) for r in records]


def test_apply_writes_each_steps_intent_before_and_its_outcome_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, sink = _cluster(), MemorySink()
    code, document, _ = _apply(tmp_path, fake, [sink], capsys)

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


def test_a_refused_outcome_record_stops_apply_after_the_first_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, sink = _cluster(), RefusingSink(refuse_at=2)  # the 1st step's outcome is refused
    code, document, err = _apply(tmp_path, fake, [sink], capsys)

    assert code == exit_codes.PARTIAL_FAILURE
    assert (
        "error: audit trail not writable after a deletion, no further action was executed: "
        "cannot write the audit record of DeleteGroup 'stale'" in err
    )
    assert "deleted 1 groups and 0 offsets before that" in err
    # What the done step deleted is still printed; the next step never ran.
    assert _results(document) == [("DeleteGroup", "stale", "Deleted")]
    assert fake.calls["delete_offsets"] == 0
    assert "stale" not in fake.groups and ("old", 0) in {
        (tp.topic, tp.partition) for tp in fake.groups["svc"].offsets
    }
    assert _trail(sink.records) == [("intent", "stale")]


def test_a_refused_intent_record_stops_apply_before_that_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, sink = _cluster(), RefusingSink(refuse_at=3)  # the 2nd step's intent is refused
    code, document, err = _apply(tmp_path, fake, [sink], capsys)

    assert code == exit_codes.PARTIAL_FAILURE
    assert (
        "error: audit trail not writable, the action was not executed: "
        "cannot write the audit record of DeleteOffsets 'svc'" in err
    )
    assert "deleted 1 groups and 0 offsets before that" in err
    assert _results(document) == [("DeleteGroup", "stale", "Deleted")]
    assert fake.calls["delete_offsets"] == 0
    assert _trail(sink.records) == [("intent", "stale"), ("outcome", "stale")]


def test_a_refused_first_intent_deletes_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, sink = _cluster(), RefusingSink(refuse_at=1)
    code, document, err = _apply(tmp_path, fake, [sink], capsys)

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
    # The broker goes away right after the DeleteGroups call: the OffsetDelete step raises.
    fake.before("delete_groups", lambda f: setattr(f, "unavailable", True))
    code, document, err = _apply(tmp_path, fake, [sink], capsys)

    assert code == exit_codes.PARTIAL_FAILURE
    assert "error: Kafka unavailable: FakeKafka is unavailable" in err
    assert "deleted 1 groups and 0 offsets before that" in err
    assert _results(document) == [("DeleteGroup", "stale", "Deleted")]
    # The interrupted step's intent is on the trail without an outcome (restore treats it as unknown).
    assert _trail(sink.records) == [("intent", "stale"), ("outcome", "stale"), ("intent", "svc")]
