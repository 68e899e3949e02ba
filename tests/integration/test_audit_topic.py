"""The Kafka audit topic sink on the real broker: created on first use, keyed by group, every write
acknowledged before it returns; a topic that does not exist and may not be created fails the write
(so the deletion it describes never runs); `read_audit_topic` gives the records back in order; a
record the broker refuses stops every later deletion of `apply`'s pass."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from groupwarden.adapters.kafka_audit_topic import AuditTopicError, KafkaTopicSink, read_audit_topic
from groupwarden.adapters.kafka_connect import open_gateway
from groupwarden.cleanup.gateway import OffsetsLogUnavailable
from groupwarden.commands import exit_codes
from groupwarden.commands.plan import PlanOptions, plan_or_apply
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.deletion_trail import TrailEntry, read_trail
from groupwarden.testing.audit_keys import fixed_signer, fixed_trusted_keys
from gwtest.kafka import commit_offsets, create_topics
from gwtest.operator import existing_groups


def record(group: str, kind: str, n: int) -> TrailEntry:
    fields = {"auditVersion": 2, "type": kind, "group": group, "planId": "p", "actionId": f"a{n}", "n": n}
    return TrailEntry(fields, fixed_signer().line(fields))


def read_back(settings: Any, topic: str) -> list[dict[str, Any]]:
    """The topic's records, each verified as `restore` verifies them."""
    reading = read_trail(read_audit_topic(settings, topic), fixed_trusted_keys())
    assert reading.refused == ()
    return [dict(r.record) for r in reading.records]


def test_sink_creates_the_topic_keys_by_group_and_reads_back_in_order(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("audit")
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    sink = KafkaTopicSink(settings, topic, retention_ms=3_600_000)
    written = [record(f"g{i % 3}", "intent" if i < 6 else "outcome", i) for i in range(12)]
    try:
        for item in written:
            sink.write(item)  # returns only once acknowledged
    finally:
        sink.close()

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result()
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "delete"

    back = read_back(settings, topic)
    assert sorted(back, key=lambda r: r["n"]) == [entry.record for entry in written]
    # One group's records share a partition, in write order (the key is the group id).
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("peek")})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions_of: dict[str, set[int]] = {}
        for partition in metadata.partitions:
            consumer.assign([TopicPartition(topic, partition, 0)])
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            for message in consumer.consume(high - low, timeout=10) if high > low else []:
                assert message.key().decode() == json.loads(message.value())["record"]["group"]
                partitions_of.setdefault(message.key().decode(), set()).add(partition)
    finally:
        consumer.close()
    assert all(len(p) == 1 for p in partitions_of.values()) and set(partitions_of) == {"g0", "g1", "g2"}
    for group in ("g0", "g1", "g2"):
        numbers = [r["n"] for r in back if r["group"] == group]
        assert numbers == sorted(numbers)


def test_a_missing_topic_that_may_not_be_created_fails_the_write(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("audit-missing")
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    sink = KafkaTopicSink(settings, topic, create=False, timeout_ms=3000)
    try:
        with pytest.raises(AuditTopicError, match=topic):
            sink.write(record("g", "intent", 1))
    finally:
        sink.close()
    with pytest.raises(OffsetsLogUnavailable):
        list(read_audit_topic(settings, topic))
    # Nothing created it behind our back (producer auto-creation is off).
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert topic not in topics


def test_after_a_failed_write_the_sink_recovers_once_the_topic_exists(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("audit-late")
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    sink = KafkaTopicSink(settings, topic, create=False, timeout_ms=3000)
    try:
        with pytest.raises(AuditTopicError):
            sink.write(record("g", "intent", 1))
        # A person creates the topic (e.g. after granting nothing but Write): the same sink works.
        create_topics(kafka_bootstrap, [topic], partitions=1)
        sink.write(record("g", "intent", 2))
    finally:
        sink.close()
    assert [r["n"] for r in read_back(settings, topic)] == [2]


# The audit topic of the test below takes records up to this size (the broker refuses larger ones
# with MESSAGE_TOO_LARGE); an intent record of a group with a short id is ~1.2 KB, so the record
# of a group whose id is longer than the limit is refused while the others are taken.
AUDIT_RECORD_LIMIT = 4096
LONG_GROUP_ID = 5000


def enforce_policy(name: str, bootstrap: str, include: str) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "kafka": {"bootstrapServers": bootstrap},
                "mode": "Enforce",
                "selector": {"include": [include]},
                "rules": {"simpleGroupOffsetRetention": "1s"},
                "limits": {"maxDeletionRatio": 1},
            },
        }
    )


def test_apply_stops_every_later_deletion_once_the_audit_topic_refuses_a_record(
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`apply`'s pass (cleanup/pass_deletions.py) with a real sink that really fails: its policies
    all write to one audit sink, so once the broker refuses a record (of `refused`, over the
    topic's size limit), no later deletion of the pass runs, although the sink would have taken
    their records; what ran before is reported."""
    prefix = unique_name("apply-audit")
    topic, audit = f"{prefix}-t", f"{prefix}-audit"
    create_topics(kafka_bootstrap, [topic], partitions=1)
    create_topics(
        kafka_bootstrap, [audit], partitions=1, config={"max.message.bytes": str(AUDIT_RECORD_LIMIT)}
    )
    groups = {
        "first": f"{prefix}-first",
        "refused": f"{prefix}-refused-".ljust(LONG_GROUP_ID, "x"),
        "later": f"{prefix}-later",
    }
    for group in groups.values():
        commit_offsets(kafka_bootstrap, group, {(topic, 0): 1})  # simple groups: one commit each
    time.sleep(1.5)  # the policies' retention (1 s) must pass since the commits
    policies = [enforce_policy(name, kafka_bootstrap, group) for name, group in groups.items()]
    settings = settings_from_properties({}, bootstrap_servers=kafka_bootstrap)
    sink = KafkaTopicSink(settings, audit, create=False, timeout_ms=10_000)
    try:
        code = plan_or_apply(
            PlanOptions(output="json", confirmed=True),
            policies,
            datetime.now(UTC),
            open_gateway(kafka_bootstrap),
            execute=True,
            audit_sinks=[sink],
            signer=fixed_signer(),
        )
    finally:
        sink.close()
    out, err = capsys.readouterr()

    assert code == exit_codes.PARTIAL_FAILURE
    assert "error: audit trail not writable, the action was not executed: cannot write the audit " in err
    assert f"of DeleteGroup {groups['refused']!r}" in err
    assert err.rstrip().endswith("deleted 1 group and 0 offsets before that")
    reported = {doc["policy"]["name"]: doc for doc in json.loads(out)["plans"]}
    assert [o["result"] for o in reported["first"]["outcomes"]] == ["Deleted"]
    assert reported["refused"]["outcomes"] == [] and reported["later"]["outcomes"] == []
    assert existing_groups(kafka_bootstrap, groups.values()) == {groups["refused"], groups["later"]}
    trail = read_back(settings, audit)
    assert [(r["type"], r["group"]) for r in trail] == [
        ("intent", groups["first"]),
        ("outcome", groups["first"]),
    ]
