"""The operator's side of the rule of cleanup/pass_deletions.py, through the reconciler with
FakeKafka: when a deletion of a pass fails, the policies after it in the same pass are stopped by
what failed, and each says so in its status. `a`, `b` reach the cluster with the default
connection, `c` through another bootstrap address of the same cluster (another connection, so
another audit sink). Deletions run in the order of the policies' names."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from controller_harness import DAY_MS, Harness, make_harness, observe_quietly, policy_body, run_async

from groupwarden.cleanup.gateway import KafkaUnavailable
from groupwarden.connectivity.settings import ConnectionSettings
from groupwarden.deletion_trail import AuditSink, MemorySink
from groupwarden.testing.fake_kafka import FakeKafka
from gwtest.audit_sinks import RefusingSink

pytestmark = pytest.mark.unit

RULES = {"emptyGroupRetention": "1d"}
STOPPED = "nothing deleted: "


def cluster() -> FakeKafka:
    fake = FakeKafka(topics={"orders"})
    old = fake.now_ms - 3 * DAY_MS
    for prefix in ("a", "b", "c"):
        fake.add_group(f"ci-{prefix}", offsets={("orders", 0): 5}, committed_at_ms=old, empty_since_ms=old)
    return fake


def harness(tmp_path: Path, **options: Any) -> Harness:
    fake = cluster()
    return make_harness(tmp_path, fake, options=options, kafka_9093=fake)


async def one_pass(h: Harness) -> None:
    for name, bootstrap in (("c", "kafka:9093"), ("b", "kafka:9092"), ("a", "kafka:9092")):
        body = policy_body(
            name,
            bootstrap=bootstrap,
            selector={"include": [f"ci-{name}*"]},
            rules=RULES,
            mode="Enforce",
            limits={"maxDeletionRatio": 1},
        )
        await observe_quietly(h, body)
    await asyncio.gather(*(h.reconcile(name) for name in ("c", "b", "a")))  # arrival order: c, b, a


def raising(error: Exception) -> Callable[[FakeKafka], None]:
    def hook(_fake: FakeKafka) -> None:
        raise error

    return hook


def test_an_outage_during_a_deletion_stops_the_later_ones_of_the_pass_on_every_connection(
    tmp_path: Path,
) -> None:
    h = harness(tmp_path)
    h.fake.before("delete_groups", raising(KafkaUnavailable("broker gone")))  # once: back for b, c

    run_async(lambda: one_pass(h))
    assert h.fake.calls["list_groups"] == 2  # one pass: a gather per connection
    assert h.fake.calls["delete_groups"] == 1  # a's; neither b's nor c's was sent
    assert {"ci-a", "ci-b", "ci-c"} <= set(h.fake.groups)
    assert h.condition("a")["reason"] == "KafkaUnavailable" and "broker gone" in h.condition("a")["message"]
    for name in ("b", "c"):
        ready = h.condition(name)
        assert (ready["status"], ready["reason"]) == ("False", "KafkaUnavailable")
        assert ready["message"].startswith(
            STOPPED + "the cluster became unavailable during an earlier deletion of this pass"
        )
        assert "team/a" not in ready["message"]  # another policy is not named to this one


def test_a_refused_audit_record_stops_the_later_deletions_of_the_same_sink_only(tmp_path: Path) -> None:
    default = RefusingSink({"ci-a"})  # a's record is refused; b's would have been taken
    other = MemorySink()

    def sinks(settings: ConnectionSettings) -> Sequence[AuditSink]:
        return (other,) if "kafka:9093" in settings.bootstrap_servers else (default,)

    h = harness(tmp_path, audit_sinks=sinks)
    run_async(lambda: one_pass(h))
    a, b, c = (h.condition(name) for name in ("a", "b", "c"))
    assert a["reason"] == "AuditUnavailable" and "cannot write the audit record" in a["message"]
    assert b["reason"] == "AuditUnavailable" and b["message"].startswith(
        STOPPED + "the audit trail refused a record of an earlier deletion of this pass"
    )
    assert c["reason"] == "Succeeded" and c["message"].startswith("deleted 1 group and 0 offsets; ")
    assert {"ci-a", "ci-b"} <= set(h.fake.groups) and "ci-c" not in h.fake.groups
    assert default.records == [] and [r["type"] for r in other.records] == ["intent", "outcome"]
    assert h.events.reasons().count("AuditUnavailable") == 2


def test_a_bug_during_a_deletion_stops_the_pass(tmp_path: Path) -> None:
    h = harness(tmp_path)
    h.fake.before("delete_groups", raising(ZeroDivisionError("a bug")))

    run_async(lambda: one_pass(h))
    assert h.fake.calls["delete_groups"] == 1 and {"ci-a", "ci-b", "ci-c"} <= set(h.fake.groups)
    assert (
        h.condition("a")["reason"] == "InternalError" and "ZeroDivisionError" in h.condition("a")["message"]
    )
    for name in ("b", "c"):
        ready = h.condition(name)
        assert ready["reason"] == "InternalError" and ready["message"].startswith(STOPPED + "internal error")
        assert "ZeroDivisionError" not in ready["message"]
