"""The audit record format: what an intent and an outcome hold, parsing a trail, no secrets."""

from __future__ import annotations

import json
from typing import Any

from audit_factories import cluster, plan_for

from groupwarden.cleanup.execute import execute_plan
from groupwarden.cleanup.gateway import KafkaError
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.core.plan import ActionKind
from groupwarden.deletion_trail import AuditRecorder, MemorySink
from groupwarden.testing.audit_keys import fixed_signer, read_fixed_trail

SECRET = "s3cr3t-P4ss"


def run_audited(**fail: KafkaError) -> tuple[list[dict[str, Any]], AuditRecorder]:
    fake = cluster()
    for group, error in fail.items():
        fake.fail(group, "delete_offsets", error)
    snapshot, plan = plan_for(fake)
    settings = settings_from_properties(
        {
            "bootstrap.servers": "b1:9092,b2:9092",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{SECRET}";',
        }
    )
    sink = MemorySink()
    recorder = AuditRecorder(
        [sink],
        snapshot,
        settings.bootstrap_servers,
        signer=fixed_signer(),
        redact=settings.redact,
        plan_id="plan-1",
    )
    outcomes = execute_plan(fake, plan, recorder.before_action(plan))
    recorder.record_outcomes(plan, outcomes)
    assert [a.kind for a in plan.actions].count(ActionKind.DELETE_GROUP) == 2
    return sink.records, recorder


def test_an_intent_records_everything_needed_to_put_the_offsets_back() -> None:
    records, _ = run_audited()
    [intent] = [r for r in records if r["type"] == "intent" and r["group"] == "stale-a"]
    assert intent["auditVersion"] == 2
    assert intent["planId"] == "plan-1" and intent["actionId"]
    assert intent["clusterId"] == "fake-cluster"
    assert intent["bootstrapServers"] == ["b1:9092", "b2:9092"]
    assert intent["policy"] == {"namespace": "team-a", "name": "cleanup"}
    assert (intent["mode"], intent["action"], intent["rule"]) == (
        "Enforce",
        "DeleteGroup",
        "emptyGroupRetention",
    )
    assert intent["reason"]
    assert (intent["groupKind"], intent["protocolType"], intent["groupState"]) == (
        "classic",
        "consumer",
        "Empty",
    )
    assert intent["timestamp"].endswith("Z")
    assert [(p["topic"], p["partition"], p["offset"]) for p in intent["partitions"]] == [
        ("t", 0, 5),
        ("t", 1, 7),
    ]
    for p in intent["partitions"]:
        assert set(p) == {
            "topic",
            "partition",
            "offset",
            "leaderEpoch",
            "metadata",
            "committedAt",
            "committedAtSource",
        }
        assert p["committedAt"].endswith("Z") and p["committedAtSource"] == "offsetsLog"


def test_delete_offsets_records_only_its_partitions_and_per_partition_outcomes() -> None:
    records, _ = run_audited()
    intent, outcome = [r for r in records if r["group"] == "svc"]
    assert intent["action"] == "DeleteOffsets" and intent["rule"] == "unsubscribedOffsetRetention"
    assert [(p["topic"], p["partition"], p["offset"]) for p in intent["partitions"]] == [
        ("old", 0, 11),
        ("old", 1, 12),
    ]
    assert outcome["actionId"] == intent["actionId"]
    assert outcome["result"] == "Deleted" and outcome["error"] is None
    assert [(p["topic"], p["partition"], p["result"]) for p in outcome["partitions"]] == [
        ("old", 0, "Deleted"),
        ("old", 1, "Deleted"),
    ]


def test_records_never_hold_secrets_even_when_an_error_quotes_them() -> None:
    leaked = KafkaError("SASL_AUTHENTICATION_FAILED", 58, message=f"bad password {SECRET}")
    records, _ = run_audited(svc=leaked)
    [outcome] = [r for r in records if r["type"] == "outcome" and r["group"] == "svc"]
    assert outcome["result"] == "Failed" and "SASL_AUTHENTICATION_FAILED" in outcome["error"]
    text = json.dumps(records)
    assert SECRET not in text and "alice" not in text


def test_reading_a_trail_forgives_only_a_torn_last_line_and_refuses_every_other_bad_line() -> None:
    records, _ = run_audited()
    good = fixed_signer().line(records[0])
    reading = read_fixed_trail([good, "", good, good[:40]], forgive_torn_tail=True)
    assert len(reading.records) == 2 and reading.refused == ()
    reading = read_fixed_trail([good, "{torn", good], "trail", forgive_torn_tail=True)
    assert [(r.position, r.reason) for r in reading.refused] == [("trail:2", "not a JSON object")]
    other_version = json.dumps({"auditVersion": 3, "type": "intent"})
    other_type = fixed_signer().line({**records[0], "type": "other"})
    reading = read_fixed_trail([other_version, other_type, good[:40]])  # a topic: nothing is torn
    assert [r.reason for r in reading.refused] == [
        "unsupported auditVersion 3",
        "unknown record type 'other'",
        "not a JSON object",
    ]
