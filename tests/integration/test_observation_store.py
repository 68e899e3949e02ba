"""The observation store on the real broker (adapters/kafka_observation_store.py): a compacted topic
created on first use, changes written in transactions and read back exactly, tombstones, the fence
(a second store's open makes the first one's writes fail), and the age rule applied to what was
read back. The same as the broker's tenant with only the ACLs docs/operator.md lists (Create,
Write, Read on the topic; Write on the transactional id; nothing on any group)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from groupwarden.adapters.kafka_observation_store import QUEUE_MESSAGES, KafkaObservationStore
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.observation_store_port import ObservationStoreError, ObservationStoreFenced
from groupwarden.connectivity.settings import ConnectionSettings, settings_from_properties
from groupwarden.core.observation_store_records import (
    PIECE_GROUPS,
    BatchPieces,
    group_key,
    restore,
    take_batch,
)
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.snapshot import TopicPartition
from gwtest.tenant import tenant_observations_topic, tenant_principal

GAP = timedelta(minutes=30)
T0 = datetime.now(UTC).replace(microsecond=654321)


@pytest.fixture
def topic(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> Iterator[str]:
    name = unique_name("observations")
    yield name
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.delete_topics([name], operation_timeout=10)[name].exception(15)


def settings_of(bootstrap: str) -> ConnectionSettings:
    return settings_from_properties({}, bootstrap_servers=bootstrap)


def test_changes_are_stored_read_back_tombstoned_and_a_newer_opener_fences_the_older(
    kafka_bootstrap: str, topic: str
) -> None:
    settings = settings_of(kafka_bootstrap)
    leader = KafkaObservationStore(settings, "cluster-1", topic)
    assert leader.open().groups == {}  # created just now: nothing stored
    memory = ObservedTimes()
    tp = TopicPartition("orders", 2)
    for group in ("g1", "g2", "g3"):
        memory.observe_group_state(group, True, T0)
    memory.observe_offset("g2", tp, 41, T0 + timedelta(microseconds=3))
    leader.write(take_batch(memory, "cluster-1", T0, "replica-a"))
    memory.observe_group_state("g1", False, T0 + timedelta(seconds=5))  # active again: tombstone
    leader.write(take_batch(memory, "cluster-1", T0 + timedelta(seconds=5), "replica-a"))

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    configs = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result()
    assert configs["cleanup.policy"].value == "compact"

    standby = KafkaObservationStore(settings, "cluster-1", topic)
    try:
        stored = standby.open()  # fences `leader`, then reads what it committed
        assert set(stored.groups) == {"g2", "g3"} and stored.last_pass == T0 + timedelta(seconds=5)
        resumed = restore(stored, T0 + timedelta(seconds=20), GAP)
        assert resumed.empty_since == {"g2": T0, "g3": T0}  # exact, never earlier
        assert resumed.offsets == {("g2", tp): (41, T0 + timedelta(microseconds=3))}
        # The deposed leader's next batch is refused by the broker, whatever it believes.
        memory.observe_group_state("g4", True, T0 + timedelta(seconds=21))
        with pytest.raises(ObservationStoreFenced):
            leader.write(take_batch(memory, "cluster-1", T0 + timedelta(seconds=21), "replica-a"))
        # A gap longer than the bound: what was read back restarts.
        assert restore(stored, T0 + timedelta(seconds=5) + GAP + timedelta(seconds=1), GAP).empty_since == {}
        # The new holder writes changes only: a quiet pass is its pass record alone.
        standby.write(take_batch(resumed, "cluster-1", T0 + timedelta(seconds=22), "replica-b"))
    finally:
        standby.close()
        leader.close()
    # The log holds each change once: g1-g3's first clocks, g1's tombstone (compaction keeps it
    # for delete.retention.ms), and one pass record per batch; nothing of the fenced batch.
    log = _records(settings, topic)
    keys = [key for key, _ in log]
    assert sorted(k for k in keys if k != b'["cluster-1"]') == sorted(
        [group_key("cluster-1", g) for g in ("g1", "g1", "g2", "g3")]
    )
    assert keys.count(b'["cluster-1"]') == 3 and (group_key("cluster-1", "g1"), None) in log
    assert group_key("cluster-1", "g4") not in keys


def test_a_missing_topic_that_may_not_be_created_fails_the_open(kafka_bootstrap: str, topic: str) -> None:
    settings = settings_of(kafka_bootstrap)
    store = KafkaObservationStore(settings, "cluster-1", topic, create=False, timeout_ms=5000)
    with pytest.raises(ObservationStoreError):
        store.open()
    store.close()


def test_the_tenant_creates_writes_reads_back_and_fences_with_the_documented_acls(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    tenant = tenant_principal()
    topic = unique_name(tenant_observations_topic())
    properties = dict(line.split("=", 1) for line in tenant.client_properties("SCRAM-SHA-512").splitlines())
    settings = settings_from_properties(properties, bootstrap_servers=tenant.bootstrap)
    first = KafkaObservationStore(settings, "cluster-1", topic)
    second = KafkaObservationStore(settings, "cluster-1", topic)
    try:
        assert first.open().groups == {}  # the tenant created it
        memory = ObservedTimes()
        memory.observe_group_state(f"{tenant.prefix}g1", True, T0)
        first.write(take_batch(memory, "cluster-1", T0, "replica-a"))
        # Read back with read_committed by a consumer whose (unused) group.id no ACL covers.
        assert set(second.open().groups) == {f"{tenant.prefix}g1"}
        with pytest.raises(ObservationStoreFenced):
            first.write(take_batch(memory, "cluster-1", T0 + timedelta(seconds=1), "replica-a"))
    finally:
        second.close()
        first.close()
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.delete_topics([topic], operation_timeout=10)[topic].exception(15)


def _records(settings: ConnectionSettings, topic: str) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in OffsetsLogReader(settings, topic=topic).read({})]


def test_a_pass_of_many_groups_is_written_in_pieces_through_a_bounded_queue(
    kafka_bootstrap: str, topic: str
) -> None:
    """12,000 groups: one batch bigger than the producer's queue (QUEUE_MESSAGES) waits for
    deliveries inside its transaction; a pass's changes in pieces (PIECE_GROUPS each, the pass
    record in the last) read back whole."""
    settings = settings_of(kafka_bootstrap)
    count = 12_000
    assert count > QUEUE_MESSAGES and count > 2 * PIECE_GROUPS
    writer = KafkaObservationStore(settings, "cluster-1", topic)
    try:
        writer.open()
        memory = ObservedTimes()
        for i in range(count):
            memory.observe_group_state(f"g{i:05d}", True, T0)
        writer.write(take_batch(memory, "cluster-1", T0, "replica-a"))  # one transaction
        for i in range(count):
            memory.observe_offset(f"g{i:05d}", TopicPartition("orders", i % 3), i, T0 + timedelta(seconds=1))
        pieces = BatchPieces(memory, "cluster-1", T0 + timedelta(seconds=1), "replica-a")
        assert len(pieces) == 3
        for batch in pieces:
            writer.write(batch)
    finally:
        writer.close()
    reader = KafkaObservationStore(settings, "cluster-1", topic)
    try:
        stored = reader.open()
    finally:
        reader.close()
    assert len(stored.groups) == count and stored.last_pass == T0 + timedelta(seconds=1)
    assert restore(stored, T0 + timedelta(seconds=2), GAP) == memory
