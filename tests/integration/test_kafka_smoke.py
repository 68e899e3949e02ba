"""The test bed's broker is real: real clients make real groups, Kafka's own tool agrees."""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import ConsumerGroupState, ConsumerGroupType
from confluent_kafka.admin import ConsumerGroupDescription
from kafka.admin import KafkaAdminClient

from gwtest.kafka import (
    admin,
    consumer_group_with_tool,
    consumer_in_group,
    create_topics,
    describe_offsets_with_tool,
    kafka_tool,
    produce,
)
from gwtest.wait import wait_for


def test_classic_group_subscription_decodes_and_matches_the_cli(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    orders, payments, group = unique_name("orders"), unique_name("payments"), unique_name("svc")
    create_topics(kafka_bootstrap, [orders, payments])
    produce(kafka_bootstrap, orders, 10)
    produce(kafka_bootstrap, payments, 6)

    with consumer_in_group(kafka_bootstrap, group, [orders, payments], expected_messages=16) as member:
        member.commit()
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            described = admin.describe_groups([group])[group]
            offsets = admin.list_group_offsets({group: None})[group]
        finally:
            admin.close()

        assert described["protocol_type"] == "consumer"
        assert described["group_state"] == "Stable"
        [m] = described["members"]
        assert sorted(m["member_metadata"]["topics"]) == sorted([orders, payments])

        committed = {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}
        assert committed == {(orders, 0): 5, (orders, 1): 5, (payments, 0): 3, (payments, 1): 3}
        # Kafka's own tool (the oracle) reports exactly the same committed offsets.
        assert describe_offsets_with_tool(kafka_bootstrap, group) == committed


def test_kip848_consumer_group_is_described_with_type_consumer(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """Asked by name, never `--list`: a listing of the shared broker grows with every group it holds
    (it timed out at 100k+ groups) and says nothing more about this test's groups."""
    topic, group, classic = unique_name("events"), unique_name("kip848"), unique_name("classic")
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 4)
    with (
        consumer_in_group(kafka_bootstrap, group, [topic], protocol="consumer", expected_messages=4),
        consumer_in_group(kafka_bootstrap, classic, [topic], protocol="classic", expected_messages=4),
    ):
        client = admin(kafka_bootstrap)  # keep a reference: the futures die with the client

        def described() -> ConsumerGroupDescription | None:
            found: ConsumerGroupDescription = client.describe_consumer_groups([group], request_timeout=10)[
                group
            ].result(20)
            return found if found.state is ConsumerGroupState.STABLE else None

        found = wait_for(described, timeout=30, what=f"{group} Stable in ConsumerGroupDescribe")
        assert found.type is ConsumerGroupType.CONSUMER
        assert not found.is_simple_consumer_group and len(found.members) == 1
        # Kafka's own tool, by name: the KIP-848 group is a `consumer` one, the classic one not.
        assert consumer_group_with_tool(kafka_bootstrap, group) == ("consumer", "Stable")
        assert consumer_group_with_tool(kafka_bootstrap, classic) == ("classic", "Stable")


def test_broker_advertises_offset_delete_and_delete_groups(kafka_bootstrap: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        versions = admin.api_versions()
    finally:
        admin.close()
    # OffsetDelete (KIP-496), DeleteGroups (KIP-229), ConsumerGroupDescribe (KIP-848).
    for api_key in (47, 42, 69):
        assert api_key in versions, f"broker does not advertise API {api_key}: {sorted(versions)}"
    out = kafka_tool("kafka-broker-api-versions", "--bootstrap-server", kafka_bootstrap)
    assert "OffsetDelete(47)" in out and "DeleteGroups(42)" in out
