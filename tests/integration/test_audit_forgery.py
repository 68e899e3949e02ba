"""The undo cannot be turned against the platform: a tenant principal with exactly the audit topic's
documented grant (Write; Read from its topic prefix) writes every forgery the record format allows
into the trail, and `groupwarden restore` restores only the genuine latest deletion, listing every
other record with its position and reason (exit 1). The same with a file trail someone else can
append to. Real broker with an authorizer (the devstack's SASL_SSL listener and tenant)."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from test_audit_topic import enforce_policy  # simple groups, 1 s retention, Enforce

from groupwarden.adapters.kafka_audit_topic import KafkaTopicSink
from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.commands.plan import PlanOptions, plan_or_apply
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.deletion_trail import MemorySink, SigningKey, read_trail
from groupwarden.deletion_trail.signing import record_text
from groupwarden.testing.audit_keys import fixed_signer, fixed_signing_key, fixed_trusted_keys
from gwtest.cli import run_cli, write_policy
from gwtest.kafka import commit_offsets, create_topics, describe_offsets_with_tool, produce
from gwtest.operator import existing_groups
from gwtest.tenant import Tenant, tenant_audit_topic, tenant_principal

NEVER_EXISTED = "payments-ledger"


def orders_topic(bootstrap: str, unique_name: Callable[[str], str], group_prefix: str) -> tuple[str, str]:
    """A one-partition topic with 10 records, and a group name (offsets up to 10 are in the log)."""
    topic, group = unique_name("orders"), unique_name(group_prefix)
    create_topics(bootstrap, [topic], partitions=1)
    produce(bootstrap, topic, 10, partitions=1)
    return topic, group


def delete_at(bootstrap: str, group: str, topic: str, offset: int, sink: Any) -> None:
    """The group's offset committed, aged past the retention, and deleted by `apply` (in process,
    writing to `sink` and signing with the suite's key, as the operator does)."""
    commit_offsets(bootstrap, group, {(topic, 0): offset})
    time.sleep(1.5)
    code = plan_or_apply(
        PlanOptions(output="json", confirmed=True),
        [enforce_policy("cleanup", bootstrap, group)],
        datetime.now(UTC),
        open_gateway(bootstrap),
        execute=True,
        audit_sinks=[sink],
        signer=fixed_signer(),
    )
    assert code == 0
    assert describe_offsets_with_tool(bootstrap, group) == {}


def forgeries(genuine: list[str]) -> list[tuple[str, str]]:
    """(what, line) of everything a writer of the trail can try, given the genuine lines so far
    (old intent, old outcome, new intent, new outcome)."""
    old_intent, old_outcome, new_intent, new_outcome = genuine
    intent = json.loads(new_intent)["record"]
    outcome = json.loads(new_outcome)["record"]
    later = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.000Z")

    def deletion(action_id: str, **changes: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        partitions = [{**p, "offset": changes.pop("offset", p["offset"])} for p in intent["partitions"]]
        forged = {**intent, "actionId": action_id, "timestamp": later, "partitions": partitions, **changes}
        result = {**outcome, "actionId": action_id, "timestamp": later, "group": forged["group"], **changes}
        return forged, result

    altered = new_intent.replace('"offset":6,', '"offset":1000,')
    assert altered != new_intent
    tenant_key = SigningKey.generate()
    stolen_id = fixed_signing_key().key_id
    later_pair = deletion(str(uuid.uuid4()), offset=1000)
    ghost_pair = deletion(str(uuid.uuid4()), group=NEVER_EXISTED)
    unsigned_ghost = [record_text({**r, "auditVersion": 1}) for r in ghost_pair]  # the v1 format
    other_cluster = deletion(str(uuid.uuid4()), clusterId="another-cluster", offset=2000)
    claimed = {"auditVersion": 2, "keyId": stolen_id, "signature": "A" * 86 + "==", "record": later_pair[0]}
    return [
        ("a later deletion at 1000, signed by the tenant's own key", tenant_key.sign(later_pair[0])),
        ("its outcome", tenant_key.sign(later_pair[1])),
        ("the same, claiming the operator's key id", json.dumps(claimed, separators=(",", ":"))),
        ("a deletion of a group that never existed, unsigned", unsigned_ghost[0]),
        ("its outcome", unsigned_ghost[1]),
        (
            "an outcome with a genuine actionId and another result",
            tenant_key.sign({**outcome, "result": "Unknown"}),
        ),
        ("a genuine record with its offsets changed", altered),
        ("a genuine record of another cluster", fixed_signer().line(other_cluster[0])),
        ("its outcome", fixed_signer().line(other_cluster[1])),
        ("a replay of the old genuine intent", old_intent),
        ("a replay of the old genuine outcome", old_outcome),
    ]


EXPECTED_REASONS = [
    "not trusted",
    "not trusted",
    "does not verify",
    "unsigned (auditVersion 1)",
    "unsigned (auditVersion 1)",
    "not trusted",
    "does not verify",
    "record of cluster another-cluster",
    "record of cluster another-cluster",
    "a second intent with actionId",
    "a second outcome with actionId",
]


def tenant_producer(tenant: Tenant) -> Producer:
    return Producer(
        {
            "bootstrap.servers": tenant.bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": tenant.username,
            "sasl.password": tenant.password,
            "ssl.ca.location": str(tenant.ca_file),
            "acks": "all",
        }
    )


def produce_as_tenant(tenant: Tenant, topic: str, lines: list[str], key: str) -> list[str]:
    """The tenant's records, each acknowledged; their positions as restore names them."""
    producer = tenant_producer(tenant)
    positions: list[str] = []
    errors: list[Any] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            errors.append(error)
        else:
            positions.append(f"{topic}/{message.partition()}@{message.offset()}")

    for line in lines:
        producer.produce(topic, value=line.encode(), key=key.encode(), on_delivery=delivered)
        assert producer.flush(30) == 0
    assert errors == [] and len(positions) == len(lines), errors
    return positions


def restore(*args: str) -> tuple[int, dict[str, Any], str]:
    done = run_cli("restore", *args, "-o", "json", "--yes")
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def check_restored_only_the_genuine_latest(
    report: dict[str, Any], bootstrap: str, group: str, topic: str, refused_at: list[str]
) -> None:
    assert [(p["group"], p["offset"], p["status"]) for p in report["partitions"]] == [(group, 6, "restored")]
    assert describe_offsets_with_tool(bootstrap, group) == {(topic, 0): 6}  # Kafka's tool: 6, not 1000
    assert existing_groups(bootstrap, [NEVER_EXISTED]) == set()  # nothing created
    refused = report["refusedRecords"]
    assert [r["position"] for r in refused] == refused_at
    for record, expected in zip(refused, EXPECTED_REASONS, strict=True):
        assert expected in record["reason"], (record, expected)
    assert {r["claimedGroup"] for r in refused} == {group, NEVER_EXISTED}


def test_a_tenant_with_write_on_the_audit_topic_cannot_make_restore_commit_its_offsets(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    tenant = tenant_principal()
    audit = f"{tenant_audit_topic()}-{uuid.uuid4().hex[:8]}"  # under the tenant's Write grant
    topic, group = orders_topic(kafka_bootstrap, unique_name, "svc")
    create_topics(kafka_bootstrap, [audit], partitions=1)  # pre-created: the tenant has no Create
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    sink = KafkaTopicSink(settings, audit, create=False, timeout_ms=10_000)
    try:
        delete_at(kafka_bootstrap, group, topic, 4, sink)
        delete_at(kafka_bootstrap, group, topic, 6, sink)
    finally:
        sink.close()
    genuine = [line for _, line in read_trail_lines(settings, audit)]
    assert len(genuine) == 4
    forged = forgeries(genuine)
    positions = produce_as_tenant(tenant, audit, [line for _, line in forged], group)

    code, report, stderr = restore("--audit-topic", audit, "--bootstrap-servers", kafka_bootstrap)
    assert code == 1 and f"{len(forged)} record(s) of the trail were not trusted" in stderr
    check_restored_only_the_genuine_latest(report, kafka_bootstrap, group, topic, positions)


def read_trail_lines(settings: Any, topic: str) -> list[tuple[str, str]]:
    from groupwarden.adapters.kafka_audit_topic import read_audit_topic

    lines = list(read_audit_topic(settings, topic))
    assert read_trail(lines, fixed_trusted_keys()).refused == ()
    return lines


def test_lines_appended_to_a_file_trail_by_someone_else_are_refused_too(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = orders_topic(kafka_bootstrap, unique_name, "svc-file")
    trail = tmp_path / "audit.jsonl"
    manifest = write_policy(
        tmp_path / "p.yaml",
        "cleanup",
        kafka_bootstrap,
        [group],
        rules={"simpleGroupOffsetRetention": "1s"},
        mode="Enforce",
    )
    for offset in (4, 6):  # the CLI, signing with $GROUPWARDEN_AUDIT_SIGNING_KEY
        commit_offsets(kafka_bootstrap, group, {(topic, 0): offset})
        time.sleep(1.5)
        done = run_cli("apply", "-f", str(manifest), "--yes", "--audit-file", str(trail))
        assert done.returncode == 0, done.stderr
    genuine = trail.read_text().splitlines()
    assert len(genuine) == 4
    forged = forgeries(genuine)
    with trail.open("a", encoding="utf-8") as handle:
        handle.writelines(line + "\n" for _, line in forged)

    code, report, _ = restore("--audit-file", str(trail), "--bootstrap-servers", kafka_bootstrap)
    assert code == 1
    positions = [f"{trail}:{n}" for n in range(5, 5 + len(forged))]
    check_restored_only_the_genuine_latest(report, kafka_bootstrap, group, topic, positions)


def test_restore_of_a_genuine_trail_needs_the_public_key_and_trusts_unsigned_records_only_when_told(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    topic, group = orders_topic(kafka_bootstrap, unique_name, "svc-keys")
    memory = MemorySink()
    delete_at(kafka_bootstrap, group, topic, 4, memory)
    signed = tmp_path / "signed.jsonl"
    signed.write_text("".join(line + "\n" for line in memory.lines))
    unsigned = tmp_path / "unsigned.jsonl"  # as 0.1.0 wrote it, or --allow-unsigned-audit
    unsigned.write_text("".join(record_text({**r, "auditVersion": 1}) + "\n" for r in memory.records))
    base = ("--bootstrap-servers", kafka_bootstrap, "-o", "json")

    without_keys = {k: v for k, v in os.environ.items() if k != "GROUPWARDEN_AUDIT_PUBLIC_KEYS"}
    done = run_cli("restore", "--audit-file", str(signed), *base, env=without_keys)
    assert done.returncode == 2 and "--audit-public-key" in done.stderr
    other = tmp_path / "other-key.pem"
    other.write_bytes(SigningKey.generate().public_key.public_pem())
    done = run_cli("restore", "--audit-file", str(signed), "--audit-public-key", str(other), *base)
    assert done.returncode == 1
    assert all("not trusted" in r["reason"] for r in json.loads(done.stdout)["refusedRecords"])

    done = run_cli("restore", "--audit-file", str(unsigned), *base)
    assert done.returncode == 1 and json.loads(done.stdout)["partitions"] == []
    done = run_cli("restore", "--audit-file", str(unsigned), "--trust-unsigned", *base)
    assert done.returncode == 0, done.stderr
    assert [p["status"] for p in json.loads(done.stdout)["partitions"]] == ["would-restore"]
    done = run_cli("restore", "--audit-file", str(signed), *base)
    assert done.returncode == 0 and json.loads(done.stdout)["refusedRecords"] == []


def test_an_offset_beyond_the_partitions_end_is_flagged_and_not_committed(
    kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """A genuine record whose offset the partition no longer reaches (the topic was re-created
    since): restore names it and commits nothing, even with --force."""
    topic, group = orders_topic(kafka_bootstrap, unique_name, "svc-end")
    memory = MemorySink()
    delete_at(kafka_bootstrap, group, topic, 8, memory)
    from gwtest.kafka import admin

    client = admin(kafka_bootstrap)  # kept: the futures die with the client
    client.delete_topics([topic], operation_timeout=30)[topic].result(timeout=60)
    from gwtest.wait import wait_for

    def recreated() -> bool:
        try:
            create_topics(kafka_bootstrap, [topic], partitions=1)
        except Exception:  # the deletion is still in progress
            return False
        return True

    wait_for(recreated, timeout=60, what="the topic to be re-created")
    produce(kafka_bootstrap, topic, 3, partitions=1)
    trail = tmp_path / "audit.jsonl"
    trail.write_text("".join(line + "\n" for line in memory.lines))
    code, report, _ = restore("--audit-file", str(trail), "--bootstrap-servers", kafka_bootstrap, "--force")
    assert code == 1
    [partition] = report["partitions"]
    assert (
        partition["status"] == "skipped-beyond-log-end"
        and "beyond the partition's end 3" in partition["detail"]
    )
    assert describe_offsets_with_tool(kafka_bootstrap, group) == {}


pytestmark = pytest.mark.integration
