"""The operator's guards (tenant isolation, minimum retention) and its write-ahead audit trail,
with FakeKafka and in-memory status/event sinks."""

from __future__ import annotations

import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from controller_harness import DAY_MS, make_harness, observe_quietly, policy_body, run_async

from groupwarden.core.tenancy import TenancyRules, parse_allowlist
from groupwarden.deletion_trail import MemorySink, TrailEntry
from groupwarden.testing.audit_keys import trusted_records
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

RULES = {"emptyGroupRetention": "1d"}
LIMITS = {"maxDeletionRatio": 1}
ALLOWLIST = parse_allowlist(
    """
namespaces:
  team-a: {bootstrapServers: ["kafka:9092"], groups: ["orders-a-*"]}
  team-b: {bootstrapServers: ["kafka:9092"], groups: ["orders-b-*"]}
"""
)


def cluster() -> FakeKafka:
    fake = FakeKafka(topics={"orders"})
    old = fake.now_ms - 3 * DAY_MS
    for group in ("orders-a-1", "orders-a-2", "orders-b-1"):
        fake.add_group(group, offsets={("orders", 0): 5}, committed_at_ms=old, empty_since_ms=old)
    return fake


def enforce(name: str, namespace: str, include: list[str], **spec: Any) -> dict[str, Any]:
    return policy_body(
        name,
        namespace,
        mode="Enforce",
        rules=spec.pop("rules", RULES),
        limits=LIMITS,
        selector={"include": include},
        **spec,
    )


def test_overlapping_globs_forbidden_policy_touches_nothing_owner_cleans_its_own(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster(), options={"tenancy": TenancyRules(frozenset({"*"}), ALLOWLIST)})

    async def scenario() -> None:
        await observe_quietly(h, enforce("wide", "team-a", ["orders-*"]))
        await observe_quietly(h, enforce("own", "team-b", ["orders-b-*"]))
        await h.reconcile("wide", "team-a")
        await h.reconcile("own", "team-b")

    run_async(scenario)
    assert set(h.fake.groups) == {"orders-a-1", "orders-a-2"}
    stalled = h.condition("wide", "Stalled", "team-a")
    assert (stalled["status"], stalled["reason"]) == ("True", "Forbidden")
    assert "orders-b-1" in stalled["message"]
    assert h.status_of("wide", "team-a")["plan"] == []
    warning = [e for e in h.events.events if e.reason == "Forbidden"]
    assert len(warning) == 1 and warning[0].type == "Warning" and "orders-b-1" in warning[0].message
    assert h.condition("own", namespace="team-b")["reason"] == "Succeeded"


def test_default_credentials_refused_outside_the_named_namespaces_without_a_kafka_call(
    tmp_path: Path,
) -> None:
    h = make_harness(tmp_path, cluster(), options={"tenancy": TenancyRules(frozenset({"team-b"}))})

    async def scenario() -> None:
        await observe_quietly(h, enforce("p", "team-a", ["orders-a-*"]))
        await h.reconcile("p", "team-a")

    run_async(scenario)
    assert h.factory.made == []  # no client was even created
    assert h.condition("p", "Stalled", "team-a")["reason"] == "Forbidden"
    assert len(h.fake.groups) == 3


def test_min_retention_refuses_enforce_and_allows_the_same_spec_in_dry_run(tmp_path: Path) -> None:
    rules = TenancyRules(frozenset({"*"}), min_retention=timedelta(minutes=10))
    h = make_harness(tmp_path, cluster(), options={"tenancy": rules})

    async def scenario() -> None:
        await observe_quietly(h, enforce("typo", "team-a", ["orders-*"], rules={"emptyGroupRetention": "1s"}))
        await observe_quietly(
            h,
            policy_body(
                "look",
                "team-a",
                rules={"emptyGroupRetention": "1s"},
                limits=LIMITS,
                selector={"include": ["*"]},
            ),
        )
        await h.reconcile("typo", "team-a")
        await h.reconcile("look", "team-a")

    run_async(scenario)
    assert len(h.fake.groups) == 3 and h.fake.calls["delete_groups"] == 0
    stalled = h.condition("typo", "Stalled", "team-a")
    assert (stalled["status"], stalled["reason"]) == ("True", "RetentionBelowMinimum")
    assert "emptyGroupRetention 1s" in stalled["message"]
    assert "RetentionBelowMinimum" in h.events.reasons()
    assert h.condition("look", namespace="team-a")["reason"] == "DryRun"


class FailingSink:
    def write(self, entry: TrailEntry) -> None:
        raise OSError("audit topic unreachable")


def test_operator_writes_intent_before_and_outcome_after_each_deletion(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    memory = MemorySink()
    h = make_harness(tmp_path, cluster(), options={"audit_sinks": lambda settings: (memory,)})

    async def scenario() -> None:
        await observe_quietly(h, enforce("p", "team-a", ["orders-a-*"]))
        await h.reconcile("p", "team-a")

    run_async(scenario)
    assert set(h.fake.groups) == {"orders-b-1"}
    records = trusted_records(memory.lines)
    kinds = [(r["type"], r["group"]) for r in records]
    assert kinds == [
        ("intent", "orders-a-1"),
        ("intent", "orders-a-2"),
        ("outcome", "orders-a-1"),
        ("outcome", "orders-a-2"),
    ]
    intent = records[0]
    assert intent["policy"] == {"namespace": "team-a", "name": "p"} and intent["mode"] == "Enforce"
    assert intent["partitions"][0]["offset"] == 5 and intent["bootstrapServers"] == ["kafka:9092"]
    assert {r["actionId"] for r in records[:2]} == {r["actionId"] for r in records[2:]}
    assert all(r["result"] == "Deleted" for r in records[2:])


def test_the_default_operator_trail_is_one_json_log_line_per_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, cluster())

    async def scenario() -> None:
        await observe_quietly(h, enforce("p", "team-a", ["orders-a-1"]))
        await h.reconcile("p", "team-a")

    with caplog.at_level(logging.INFO, logger="groupwarden.audit"):
        run_async(scenario)
    lines = [r.getMessage() for r in caplog.records if r.name == "groupwarden.audit"]
    assert all(isinstance(json.loads(line), dict) for line in lines)  # one JSON object a line
    records = trusted_records(lines)  # signed: `restore` could verify them
    assert [(r["type"], r["group"]) for r in records] == [("intent", "orders-a-1"), ("outcome", "orders-a-1")]


def test_an_unwritable_audit_trail_blocks_the_operator_deletions(tmp_path: Path) -> None:
    h = make_harness(tmp_path, cluster(), options={"audit_sinks": lambda settings: (FailingSink(),)})

    async def scenario() -> None:
        await observe_quietly(h, enforce("p", "team-a", ["orders-a-*"]))
        await h.reconcile("p", "team-a")

    run_async(scenario)
    assert len(h.fake.groups) == 3 and h.fake.calls["delete_groups"] == 0
    ready = h.condition("p", namespace="team-a")
    assert (ready["status"], ready["reason"]) == ("False", "AuditUnavailable")
    assert "audit topic unreachable" in ready["message"]
    assert "AuditUnavailable" in h.events.reasons()
