"""Write-ahead audit + `groupwarden restore` on the real broker: a policy deletes a group's offsets
through `groupwarden apply --audit-file`, `groupwarden restore` puts them back, and a real consumer
of the group resumes exactly at the recorded offsets (no reprocessing, nothing skipped)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.testing.audit_keys import trusted_records
from gwtest.cli import run_cli, write_policy
from gwtest.kafka import (
    commit_offsets,
    consumer_in_group,
    create_topics,
    describe_offsets_with_tool,
    first_offsets,
    produce,
)
from gwtest.wait import wait_for


def trail(path: Path) -> list[dict[str, Any]]:
    """The trail's records, every one signed by the suite's key (as `restore` verifies them)."""
    return trusted_records(line for line in path.read_text().splitlines() if line.strip())


def apply_until_deleted(policy: Path, audit: Path, group: str, timeout: float = 30) -> dict[str, Any]:
    """`apply --yes --audit-file` until the group's action ran (retention clocks are seconds).
    Also checks the always-on sink: one JSON log line (stderr) per audit record of the group."""
    result: dict[str, Any] = {}

    def deleted() -> bool:
        done = run_cli("apply", "-f", str(policy), "-o", "json", "--yes", "--audit-file", str(audit))
        assert done.returncode == 0, done.stderr
        outcomes = [o for o in json.loads(done.stdout).get("outcomes", []) if o["group"] == group]
        if outcomes:
            result.update(outcomes[0])
            logged = trusted_records(line for line in done.stderr.splitlines() if line.startswith("{"))
            assert [(r["type"], r["group"]) for r in logged if r["group"] == group] == [
                ("intent", group),
                ("outcome", group),
            ]
        return bool(outcomes)

    wait_for(deleted, timeout=timeout, what=f"apply to act on {group}")
    assert result["result"] == "Deleted", result
    return result


def restore(audit: Path, bootstrap: str, *extra: str) -> tuple[int, dict[str, Any]]:
    done = run_cli(
        "restore", "--audit-file", str(audit), "--bootstrap-servers", bootstrap, "-o", "json", *extra
    )
    assert done.returncode in (0, 1), done.stderr
    parsed: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, parsed


def statuses(report: dict[str, Any], group: str) -> dict[tuple[str, int], str]:
    return {(p["topic"], p["partition"]): p["status"] for p in report["partitions"] if p["group"] == group}


def make_group(bootstrap: str, group: str, topic: str, protocol: str) -> dict[tuple[str, int], int]:
    """6 messages consumed and committed (3 per partition), then 4 more produced: the committed
    offsets sit in the middle of the log, so both reprocessing and skipping would show."""
    create_topics(bootstrap, [topic])
    produce(bootstrap, topic, 6)
    if protocol == "simple":
        commit_offsets(bootstrap, group, {(topic, 0): 3, (topic, 1): 3})
    else:
        with consumer_in_group(bootstrap, group, [topic], protocol=protocol, expected_messages=6):
            pass
    produce(bootstrap, topic, 4)
    recorded = describe_offsets_with_tool(bootstrap, group)
    assert recorded == {(topic, 0): 3, (topic, 1): 3}
    return recorded


RULES = {
    "classic": {"emptyGroupRetention": "1s"},
    "consumer": {"emptyGroupRetention": "1s"},
    "simple": {"simpleGroupOffsetRetention": "1s"},
}


@pytest.mark.parametrize("kind", ["classic", "consumer", "simple"])
def test_restore_puts_back_exactly_the_deleted_offsets_and_a_consumer_resumes_there(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path, kind: str
) -> None:
    topic, group = unique_name("payments"), unique_name(f"restore-{kind}")
    recorded = make_group(kafka_bootstrap, group, topic, kind)
    policy = write_policy(
        tmp_path / "p.yaml", "audited", kafka_bootstrap, [group], rules=RULES[kind], mode="Enforce"
    )
    audit = tmp_path / "audit.jsonl"

    apply_until_deleted(policy, audit, group)
    assert describe_offsets_with_tool(kafka_bootstrap, group) == {}

    # The trail recorded the offsets before they went, then the outcome.
    records = [r for r in trail(audit) if r["group"] == group]
    assert [r["type"] for r in records] == ["intent", "outcome"]
    intent, outcome = records
    assert intent["auditVersion"] == 2 and intent["planId"] == outcome["planId"]
    assert intent["actionId"] == outcome["actionId"]
    assert intent["groupKind"] == kind
    assert intent["protocolType"] == ("" if kind == "simple" else "consumer")
    assert intent["policy"] == {"namespace": "tests", "name": "audited"}
    assert intent["clusterId"] and intent["bootstrapServers"]
    assert {(p["topic"], p["partition"]): p["offset"] for p in intent["partitions"]} == recorded
    assert all(p["committedAt"] and p["committedAtSource"] for p in intent["partitions"])
    assert outcome["result"] == "Deleted"

    # Without --yes: only what it would do.
    code, dry = restore(audit, kafka_bootstrap, "--group", group)
    assert code == 0 and dry["dryRun"] is True
    assert set(statuses(dry, group).values()) == {"would-restore"}
    assert describe_offsets_with_tool(kafka_bootstrap, group) == {}

    code, done = restore(audit, kafka_bootstrap, "--group", group, "--yes")
    assert code == 0
    assert statuses(done, group) == {tp: "restored" for tp in recorded}
    assert describe_offsets_with_tool(kafka_bootstrap, group) == recorded
    # ... with the recorded leader epoch and metadata, not just the offset.
    with open_gateway(kafka_bootstrap) as gateway:
        now = gateway.fetch_offsets([group])[group].offsets
    assert {(tp.topic, tp.partition): (i.offset, i.leader_epoch, i.metadata) for tp, i in now.items()} == {
        (p["topic"], p["partition"]): (p["offset"], p["leaderEpoch"], p["metadata"])
        for p in intent["partitions"]
    }

    # A real consumer of the group resumes exactly where the group was: not at 0, not at the end.
    protocol = "classic" if kind == "simple" else kind
    assert first_offsets(kafka_bootstrap, group, topic, protocol) == {0: 3, 1: 3}

    # Restoring again changes nothing.
    _, again = restore(audit, kafka_bootstrap, "--group", group, "--yes")
    assert set(statuses(again, group).values()) == {"unchanged"}


def test_restore_refuses_an_active_group_and_never_moves_a_newer_commit_back_unless_forced(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("orders"), unique_name("restore-guard")
    recorded = make_group(kafka_bootstrap, group, topic, "classic")
    policy = write_policy(
        tmp_path / "p.yaml", "guarded", kafka_bootstrap, [group], rules=RULES["classic"], mode="Enforce"
    )
    audit = tmp_path / "audit.jsonl"
    apply_until_deleted(policy, audit, group)

    # The service came back before anyone restored: it read everything from 0 and committed.
    with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=10):
        code, report = restore(audit, kafka_bootstrap, "--group", group, "--yes")
        assert code == 0
        assert set(statuses(report, group).values()) == {"skipped-active-group"}
        assert describe_offsets_with_tool(kafka_bootstrap, group) == {(topic, 0): 5, (topic, 1): 5}

    wait_for(
        lambda: describe_offsets_with_tool(kafka_bootstrap, group) == {(topic, 0): 5, (topic, 1): 5},
        timeout=30,
        what="the group to be Empty with its newer commit",
    )
    time.sleep(0.5)
    _, report = restore(audit, kafka_bootstrap, "--group", group, "--yes")
    assert set(statuses(report, group).values()) == {"skipped-newer-commit"}
    assert describe_offsets_with_tool(kafka_bootstrap, group) == {(topic, 0): 5, (topic, 1): 5}

    _, report = restore(audit, kafka_bootstrap, "--group", group, "--yes", "--force")
    assert set(statuses(report, group).values()) == {"restored"}
    assert describe_offsets_with_tool(kafka_bootstrap, group) == recorded


def test_apply_deletes_nothing_when_the_audit_file_cannot_be_written(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = unique_name("ledger"), unique_name("restore-unwritable")
    recorded = make_group(kafka_bootstrap, group, topic, "simple")
    policy = write_policy(
        tmp_path / "p.yaml", "blocked", kafka_bootstrap, [group], rules=RULES["simple"], mode="Enforce"
    )
    time.sleep(1.5)
    unwritable = tmp_path / "no-such-dir" / "audit.jsonl"
    done = run_cli("apply", "-f", str(policy), "--yes", "--audit-file", str(unwritable))
    assert done.returncode == 1, done.stdout
    assert "audit trail not writable" in done.stderr and "not executed" in done.stderr
    assert describe_offsets_with_tool(kafka_bootstrap, group) == recorded


def test_restore_rejects_bad_input_with_exit_code_2(kafka_bootstrap: str, tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text('{"auditVersion": 2, "type": "intent"\n{"auditVersion": 2, "type": "outcome"}\n')
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("hello")
    cases = {
        "missing trail": ["--audit-file", str(tmp_path / "none.jsonl")],
        "naive --since": ["--audit-file", str(corrupt), "--since", "2026-11-22T03:00:00"],
        "bad public key": ["--audit-file", str(corrupt), "--audit-public-key", str(not_a_key)],
    }
    for what, args in cases.items():
        done = run_cli("restore", *args, "--bootstrap-servers", kafka_bootstrap)
        assert done.returncode == 2, (what, done.stderr)
        assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr, what
    done = run_cli("restore", "--audit-file", str(tmp_path / "x"))  # --bootstrap-servers missing
    assert done.returncode == 2
    # A corrupt line is one more record restore does not trust: listed with its position, exit 1.
    done = run_cli(
        "restore", "--audit-file", str(corrupt), "--bootstrap-servers", kafka_bootstrap, "-o", "json"
    )
    assert done.returncode == 1, done.stderr
    assert [(r["position"], r["reason"]) for r in json.loads(done.stdout)["refusedRecords"]] == [
        (f"{corrupt}:1", "not a JSON object"),
        (f"{corrupt}:2", "unsigned: no keyId or signature"),
    ]
