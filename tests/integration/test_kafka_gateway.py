"""KafkaAdminGateway on the real broker: real consumers make the groups, Kafka's CLI is the oracle."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kafka.admin import KafkaAdminClient
from kafka.structs import OffsetAndMetadata
from kafka.structs import TopicPartition as KTopicPartition

from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
from groupwarden.cleanup.gateway import DescribedGroup, KafkaGateway, ListedGroup
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from gwtest.kafka import (
    commit_offsets,
    consumer_group_with_tool,
    consumer_in_group,
    create_topics,
    describe_offsets_with_tool,
    kafka_tool,
    produce,
)
from gwtest.wait import wait_for

Names = Callable[[str], str]


def listed(gw: KafkaGateway, group_id: str) -> ListedGroup | None:
    return next((g for g in gw.list_groups() if g.group_id == group_id), None)


def describe(gw: KafkaGateway, group_id: str) -> DescribedGroup:
    row = listed(gw, group_id)
    assert row is not None, f"{group_id} is not listed"
    return gw.describe_groups([row])[group_id]


def committed(gw: KafkaGateway, group_id: str) -> dict[tuple[str, int], int]:
    answer = gw.fetch_offsets([group_id])[group_id]
    assert answer.error is None
    return {(tp.topic, tp.partition): info.offset for tp, info in answer.offsets.items()}


def test_classic_group_is_listed_described_and_fetched_like_the_cli(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    orders, payments, group = unique_name("orders"), unique_name("payments"), unique_name("classic")
    create_topics(kafka_bootstrap, [orders, payments])
    produce(kafka_bootstrap, orders, 4)
    produce(kafka_bootstrap, payments, 2)
    with consumer_in_group(kafka_bootstrap, group, [orders, payments], expected_messages=6):
        row = listed(gateway, group)
        assert row == ListedGroup(group, "classic", "consumer", GroupState.STABLE)
        assert consumer_group_with_tool(kafka_bootstrap, group) == ("classic", "Stable")
        described = gateway.describe_groups([row])[group]
        assert described == DescribedGroup(
            group, GroupKind.CLASSIC, GroupState.STABLE, "consumer", 1, frozenset({orders, payments})
        )
        assert committed(gateway, group) == describe_offsets_with_tool(kafka_bootstrap, group)
        assert committed(gateway, group) == {
            (orders, 0): 2,
            (orders, 1): 2,
            (payments, 0): 1,
            (payments, 1): 1,
        }


def test_kip848_group_subscriptions_come_from_consumer_group_describe(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    events, group = unique_name("events"), unique_name("kip848")
    create_topics(kafka_bootstrap, [events])
    produce(kafka_bootstrap, events, 4)
    with consumer_in_group(kafka_bootstrap, group, [events], protocol="consumer", expected_messages=4):
        row = wait_for(lambda: (r := listed(gateway, group)) and r.state is GroupState.STABLE and r)
        assert (row.group_type, row.protocol_type) == ("consumer", "consumer")
        assert consumer_group_with_tool(kafka_bootstrap, group) == ("consumer", "Stable")
        described = gateway.describe_groups([row])[group]
        assert described == DescribedGroup(
            group, GroupKind.CONSUMER, GroupState.STABLE, "consumer", 1, frozenset({events})
        )
        assert committed(gateway, group) == describe_offsets_with_tool(kafka_bootstrap, group)
    empty = wait_for(lambda: (d := describe(gateway, group)).state is GroupState.EMPTY and d)
    assert (empty.member_count, empty.subscribed_topics) == (0, frozenset())
    assert consumer_group_with_tool(kafka_bootstrap, group) == ("consumer", "Empty")


def test_kip848_regex_subscription_includes_the_matching_topics(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    prefix = unique_name("rx")
    matching, other, group = [f"{prefix}-a", f"{prefix}-b"], f"{prefix}x-c", unique_name("regex")
    create_topics(kafka_bootstrap, [*matching, other])
    for topic in matching:
        produce(kafka_bootstrap, topic, 2)
    # confluent-kafka: a leading ^ makes it a regex; the broker resolves it (RE2/J).
    with consumer_in_group(
        kafka_bootstrap, group, [f"^{prefix}-.*"], protocol="consumer", expected_messages=4
    ):
        described = describe(gateway, group)
        assert described.kind is GroupKind.CONSUMER
        assert described.subscribed_topics == frozenset(matching)  # `other` does not match
        assert committed(gateway, group) == describe_offsets_with_tool(kafka_bootstrap, group)


def test_simple_group_has_offsets_and_no_members(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group = unique_name("simple-t"), unique_name("simple")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 3, (topic, 1): 4})
    row = listed(gateway, group)
    assert row == ListedGroup(group, "classic", "", GroupState.EMPTY)
    assert consumer_group_with_tool(kafka_bootstrap, group) == ("classic", "Empty")
    assert gateway.describe_groups([row])[group] == DescribedGroup(
        group, GroupKind.SIMPLE, GroupState.EMPTY, "", 0, frozenset()
    )
    assert (
        committed(gateway, group)
        == {(topic, 0): 3, (topic, 1): 4}
        == describe_offsets_with_tool(kafka_bootstrap, group)
    )


def test_delete_groups_refuses_an_active_group_and_deletes_an_empty_one(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group = unique_name("del-t"), unique_name("del")
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 2)
    with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=2):
        error = gateway.delete_groups([group])[group]
        assert error is not None and error.name == "NON_EMPTY_GROUP" and not error.retriable
        assert consumer_group_with_tool(kafka_bootstrap, group) is not None
    wait_for(lambda: listed(gateway, group).state is GroupState.EMPTY)  # type: ignore[union-attr]
    assert gateway.delete_groups([group]) == {group: None}
    assert consumer_group_with_tool(kafka_bootstrap, group) is None
    assert listed(gateway, group) is None


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_delete_offsets_refuses_subscribed_topics_and_deletes_the_others(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway, protocol: str
) -> None:
    kept, dropped, group = unique_name("kept"), unique_name("dropped"), unique_name(f"offdel-{protocol}")
    create_topics(kafka_bootstrap, [kept, dropped])
    produce(kafka_bootstrap, kept, 2)
    produce(kafka_bootstrap, dropped, 2)
    # First subscribe to both topics (offsets for both), then come back subscribed to `kept` only.
    with consumer_in_group(kafka_bootstrap, group, [kept, dropped], protocol=protocol, expected_messages=4):
        pass
    wait_for(lambda: listed(gateway, group).state is GroupState.EMPTY)  # type: ignore[union-attr]
    with consumer_in_group(kafka_bootstrap, group, [kept], protocol=protocol):
        wait_for(lambda: describe(gateway, group).subscribed_topics == {kept})
        partitions = [TopicPartition(t, p) for t in (kept, dropped) for p in (0, 1)]
        error, results = gateway.delete_offsets(group, partitions)
        assert error is None
        names = {(tp.topic, tp.partition): e.name if e else None for tp, e in results.items()}
        assert names == {
            (kept, 0): "GROUP_SUBSCRIBED_TO_TOPIC",
            (kept, 1): "GROUP_SUBSCRIBED_TO_TOPIC",
            (dropped, 0): None,
            (dropped, 1): None,
        }
        assert describe_offsets_with_tool(kafka_bootstrap, group) == {(kept, 0): 1, (kept, 1): 1}
        assert committed(gateway, group) == {(kept, 0): 1, (kept, 1): 1}


def test_offset_deletions_of_many_groups_go_out_together_and_are_answered_per_group(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    """`delete_offsets_many`: 40 simple groups' old partition deleted in one call (four requests
    in flight), a group subscribed to the topic refused per partition, a missing one not found;
    Kafka's own tool shows exactly the fresh partitions left."""
    old, fresh, prefix = unique_name("old"), unique_name("fresh"), unique_name("many")
    create_topics(kafka_bootstrap, [old, fresh], partitions=1)
    produce(kafka_bootstrap, old, 4, partitions=1)
    groups = [f"{prefix}-{i:02d}" for i in range(40)]
    for group in groups:
        commit_offsets(kafka_bootstrap, group, {(old, 0): 2, (fresh, 0): 0})
    subscribed = f"{prefix}-live"
    with consumer_in_group(kafka_bootstrap, subscribed, [old], expected_messages=4):
        wait_for(lambda: describe(gateway, subscribed).subscribed_topics == {old})
        requests = [(g, [TopicPartition(old, 0)]) for g in [*groups, subscribed, f"{prefix}-missing"]]
        answers = gateway.delete_offsets_many(requests)
    assert {g: answers[g] for g in groups} == {g: (None, {TopicPartition(old, 0): None}) for g in groups}
    refused = answers[subscribed][1][TopicPartition(old, 0)]
    assert (
        answers[subscribed][0] is None and refused is not None and refused.name == "GROUP_SUBSCRIBED_TO_TOPIC"
    )
    missing = answers[f"{prefix}-missing"][0]
    assert missing is not None and missing.name == "GROUP_ID_NOT_FOUND"
    for group in (groups[0], groups[17], groups[-1]):
        assert describe_offsets_with_tool(kafka_bootstrap, group) == {(fresh, 0): 0}
    assert all(committed(gateway, g) == {(fresh, 0): 0} for g in groups)


def test_missing_groups_are_group_id_not_found(unique_name: Names, gateway: KafkaAdminGateway) -> None:
    missing = unique_name("missing")
    error, results = gateway.delete_offsets(missing, [TopicPartition("t", 0)])
    assert error is not None and error.name == "GROUP_ID_NOT_FOUND" and results == {}
    deleted = gateway.delete_groups([missing])[missing]
    assert deleted is not None and deleted.name == "GROUP_ID_NOT_FOUND"
    for group_type in ("classic", "consumer"):
        described = gateway.describe_groups([ListedGroup(missing, group_type, "consumer", GroupState.STABLE)])
        assert described[missing].state is GroupState.DEAD
        assert described[missing].error is not None and described[missing].error.name == "GROUP_ID_NOT_FOUND"
    assert gateway.fetch_offsets([missing])[missing].offsets == {}


def test_requests_grow_with_coordinators_not_groups(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic = unique_name("batch-t")
    create_topics(kafka_bootstrap, [topic], partitions=1)
    groups = [unique_name(f"batch-{i:03d}") for i in range(200)]
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        for i, group in enumerate(groups):
            admin.alter_group_offsets(group, {KTopicPartition(topic, 0): OffsetAndMetadata(i, "", None)})
    finally:
        admin.close()
    kip848 = unique_name("batch-kip848")
    with consumer_in_group(kafka_bootstrap, kip848, [topic], protocol="consumer"):
        pass
    rows = {g.group_id: g for g in gateway.list_groups()}
    coordinators = len(gateway._session.run(gateway._session.find_coordinators, [*groups, kip848])[0])
    gateway.request_counts.clear()

    described = gateway.describe_groups([rows[g] for g in [*groups, kip848]])
    assert all(described[g].kind is GroupKind.SIMPLE for g in groups)
    assert described[kip848].kind is GroupKind.CONSUMER
    offsets = gateway.fetch_offsets(groups)
    assert [offsets[g].offsets[TopicPartition(topic, 0)].offset for g in groups] == list(range(200))
    # Misfiled groups (ListGroups said `consumer`) cost one extra batched request per API.
    misfiled = [ListedGroup(g, "consumer", "", GroupState.EMPTY) for g in groups]
    assert all(d.kind is GroupKind.SIMPLE for d in gateway.describe_groups(misfiled).values())

    assert coordinators == 1  # the devstack: 1 broker, 3 __consumer_offsets partitions
    assert gateway.request_counts == {
        "FindCoordinator": 5,  # describe: 2 (classic, KIP-848), fetch: 1, misfiled: 2
        "DescribeGroups": 2 * coordinators,
        "ConsumerGroupDescribe": 2 * coordinators,
        "OffsetFetch": coordinators,
    }


def test_chunks_bound_the_request_size(kafka_bootstrap: str, unique_name: Names) -> None:
    topic = unique_name("chunk-t")
    create_topics(kafka_bootstrap, [topic], partitions=1)
    # 40 groups in chunks of 4 = 10 requests to one coordinator: more than the client's 5 in-flight
    # requests per connection, which once failed the excess chunks with NodeNotReadyError.
    groups = [unique_name(f"chunk-{i:02d}") for i in range(40)]
    for group in groups:
        commit_offsets(kafka_bootstrap, group, {(topic, 0): 1})
    gw = KafkaAdminGateway(
        settings_from_properties({"bootstrap.servers": kafka_bootstrap}), max_groups_per_request=4
    )
    try:
        answers = gw.fetch_offsets(groups)
        assert all(a.error is None and len(a.offsets) == 1 for a in answers.values()), answers
        assert gw.request_counts["OffsetFetch"] == 10  # ceil(40 / 4) on one coordinator
        listed = [g for g in gw.list_groups() if g.group_id in set(groups)]
        described = gw.describe_groups(listed)
        assert len(described) == 40 and all(d.error is None for d in described.values())
    finally:
        gw.close()


def test_cluster_id_and_topics(kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway) -> None:
    topic = unique_name("visible")
    create_topics(kafka_bootstrap, [topic])
    assert topic in gateway.list_topics()
    status = kafka_tool(
        "kafka-metadata-quorum", "--bootstrap-server", kafka_bootstrap, "describe", "--status"
    )
    [cluster_id] = [line.split()[1] for line in status.splitlines() if line.startswith("ClusterId:")]
    assert gateway.cluster_id() == cluster_id
