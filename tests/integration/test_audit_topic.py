"""The Kafka audit topic sink on the real broker: created on first use, keyed by group, every write
acknowledged before it returns; a topic that does not exist and may not be created fails the write
(so the deletion it describes never runs); `read_audit_topic` gives the records back in order."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from groupwarden.adapters.kafka_audit_topic import AuditTopicError, KafkaTopicSink, read_audit_topic
from groupwarden.cleanup.connection_settings import settings_from_properties
from groupwarden.cleanup.gateway import OffsetsLogUnavailable
from groupwarden.deletion_trail import parse_records
from gwtest.kafka import create_topics


def record(group: str, kind: str, n: int) -> dict[str, Any]:
    return {"auditVersion": 1, "type": kind, "group": group, "planId": "p", "actionId": f"a{n}", "n": n}


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

    back = list(parse_records(read_audit_topic(settings, topic), topic))
    assert sorted(back, key=lambda r: r["n"]) == written
    # One group's records share a partition, in write order (the key is the group id).
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": unique_name("peek")})
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions_of: dict[str, set[int]] = {}
        for partition in metadata.partitions:
            consumer.assign([TopicPartition(topic, partition, 0)])
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
            for message in consumer.consume(high - low, timeout=10) if high > low else []:
                assert message.key().decode() == json.loads(message.value())["group"]
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
    assert [r["n"] for r in parse_records(read_audit_topic(settings, topic), topic)] == [2]
