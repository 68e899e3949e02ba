"""The ledger built from the real `__consumer_offsets` (read by the gateway) tells the truth.

Commit times and Empty-since times must fall inside the wall-clock window of the real events.
The broker runs on this host, so the only skew is the broker's own clock reading: we allow
SKEW_MS (1 s) on each side of the window and document it (docs/kafka-gateway.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.cleanup.gateway import OffsetsLogGap
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.core.snapshot import GroupKind, GroupState, TopicPartition
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.testing.fake_kafka import FakeKafka
from gwtest.kafka import commit_offsets, consumer_in_group, create_topics, kafka_tool, produce
from gwtest.wait import wait_for

SKEW_MS = 1000
Names = Callable[[str], str]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def read_into(gateway: KafkaAdminGateway, ledger: OffsetsLedger) -> int:
    count = 0
    for r in gateway.read_offsets_log(ledger.positions):
        ledger.apply(r.key, r.value, r.timestamp_ms, r.partition, r.offset)
        count += 1
    return count


def assert_within(value: int | None, before: int, after: int) -> None:
    assert value is not None
    assert before - SKEW_MS <= value <= after + SKEW_MS, (before, value, after)


def test_commit_times_and_offsets_match_the_real_commits(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group, simple = unique_name("log-t"), unique_name("log-classic"), unique_name("log-simple")
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 6)
    with consumer_in_group(kafka_bootstrap, group, [topic], expected_messages=6) as member:
        before = now_ms()
        member.commit()  # nothing new: the join's commit already stored the offsets
        member.consumer.commit(
            offsets=[CKTopicPartition(topic, 0, 3), CKTopicPartition(topic, 1, 3)], asynchronous=False
        )
        after = now_ms()
    before_simple = now_ms()
    commit_offsets(kafka_bootstrap, simple, {(topic, 0): 1, (topic, 1): 2})
    after_simple = now_ms()

    ledger = OffsetsLedger()
    read_into(gateway, ledger)
    for tp in (TopicPartition(topic, 0), TopicPartition(topic, 1)):
        assert_within(ledger.offset(group, tp).commit_time_ms, before, after)  # type: ignore[union-attr]
        assert_within(ledger.offset(simple, tp).commit_time_ms, before_simple, after_simple)  # type: ignore[union-attr]
    fetched = gateway.fetch_offsets([group, simple])
    for g in (group, simple):
        assert {tp: o.offset for tp, o in ledger.offsets(g).items()} == {
            tp: o.offset for tp, o in fetched[g].offsets.items()
        }
    assert ledger.group(simple).kind is GroupKind.SIMPLE  # type: ignore[union-attr]
    # The fake files groups into partitions exactly like the broker (Java hashCode).
    fake = FakeKafka(offsets_partitions=3)
    assert fake.partition_for(group) in ledger.positions


def test_classic_empty_since_is_when_the_last_consumer_left(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group = unique_name("empty-t"), unique_name("empty-classic")
    create_topics(kafka_bootstrap, [topic])
    with consumer_in_group(kafka_bootstrap, group, [topic]) as member:
        ledger = OffsetsLedger()
        read_into(gateway, ledger)
        assert ledger.group(group).empty_since_ms is None  # type: ignore[union-attr]
        assert ledger.subscribed_topics(group) == {topic}
        before = now_ms()
        member.close()
        after = now_ms()
    wait_for(lambda: read_into(gateway, ledger) >= 0 and ledger.group(group).empty_since_ms)  # type: ignore[union-attr]
    assert_within(ledger.group(group).empty_since_ms, before, after)  # type: ignore[union-attr]
    assert ledger.group(group).kind is GroupKind.CLASSIC  # type: ignore[union-attr]


def test_kip848_empty_since_is_when_the_last_member_left(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group = unique_name("empty848-t"), unique_name("empty-kip848")
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 2)
    with consumer_in_group(
        kafka_bootstrap, group, [topic], protocol="consumer", expected_messages=2
    ) as first:
        second = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": group, "group.protocol": "consumer"}
        )
        try:
            second.subscribe([topic])

            def both_assigned() -> bool:  # the first member must be polled to give up a partition
                first.poll_some(0.2)
                second.poll(0.2)
                return bool(second.assignment()) and bool(first.consumer.assignment())

            wait_for(both_assigned, what="two KIP-848 members")
            first.close()
            ledger = OffsetsLedger()
            wait_for(
                lambda: read_into(gateway, ledger) >= 0 and len(ledger.group(group).consumer_members) == 1
            )  # type: ignore[union-attr]
            assert ledger.group(group).empty_since_ms is None  # type: ignore[union-attr]
            before = now_ms()
        finally:
            second.close()
        after = now_ms()
    wait_for(lambda: read_into(gateway, ledger) >= 0 and ledger.group(group).empty_since_ms)  # type: ignore[union-attr]
    found = ledger.group(group)
    assert found is not None and found.kind is GroupKind.CONSUMER and not found.consumer_members
    assert_within(found.empty_since_ms, before, after)
    [row] = [r for r in gateway.list_groups() if r.group_id == group]
    assert row.state is GroupState.EMPTY


def test_a_second_read_returns_only_new_records(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group = unique_name("resume-t"), unique_name("resume")
    create_topics(kafka_bootstrap, [topic])
    ledger = OffsetsLedger()
    read_into(gateway, ledger)
    positions = dict(ledger.positions)
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 7})
    new = list(gateway.read_offsets_log(positions))
    assert new and all(r.offset >= positions.get(r.partition, 0) for r in new)
    for r in new:
        ledger.apply(r.key, r.value, r.timestamp_ms, r.partition, r.offset)
    assert ledger.offset(group, TopicPartition(topic, 0)).offset == 7  # type: ignore[union-attr]
    assert ledger.duplicates == 0
    assert list(gateway.read_offsets_log(ledger.positions)) == []  # nothing new since


def test_aborted_transactional_commits_are_never_read(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    topic, group = unique_name("txn-t"), unique_name("txn")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 1, (topic, 1): 1})
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("txid")})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [CKTopicPartition(topic, 0, 99)], consumer.consumer_group_metadata(), 30
        )
        producer.abort_transaction(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            [CKTopicPartition(topic, 1, 5)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
    finally:
        consumer.close()
    ledger = OffsetsLedger()
    read_into(gateway, ledger)
    assert ledger.offset(group, TopicPartition(topic, 0)).offset == 1  # type: ignore[union-attr]
    assert ledger.offset(group, TopicPartition(topic, 1)).offset == 5  # type: ignore[union-attr]
    assert {tp: o.offset for tp, o in gateway.fetch_offsets([group])[group].offsets.items()} == {
        TopicPartition(topic, 0): 1,
        TopicPartition(topic, 1): 5,
    }
    # The aborted commit is in the log: only read_committed keeps it out of the ledger.
    uncommitted = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("probe"),
            "isolation.level": "read_uncommitted",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        uncommitted.assign([CKTopicPartition("__consumer_offsets", p, 0) for p in range(3)])
        raw = OffsetsLedger()
        done: set[int] = set()
        while len(done) < 3:
            for m in uncommitted.consume(10000, 1.0):
                if m.error():
                    done.add(m.partition())  # type: ignore[arg-type]
                else:
                    raw.apply(m.key(), m.value(), m.timestamp()[1], m.partition(), m.offset())  # type: ignore[arg-type]
    finally:
        uncommitted.close()
    assert raw.offset(group, TopicPartition(topic, 0)).offset == 99  # type: ignore[union-attr]


def test_a_read_shared_out_in_pieces_returns_the_records_of_one_read(
    kafka_bootstrap: str, unique_name: Names, gateway: KafkaAdminGateway
) -> None:
    """`export-offsets-log --parallel`: readers of pieces of the partitions (`start_positions`
    + `until`), cut anywhere (also inside an aborted and a committed transaction), together
    deliver exactly the records of one read (read_committed from any offset)."""
    from groupwarden.fleet.export import share_partitions

    topic, group = unique_name("pieces-t"), unique_name("pieces")
    create_topics(kafka_bootstrap, [topic])
    commit_offsets(kafka_bootstrap, group, {(topic, 0): 1})
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("txid")})
    try:
        producer.init_transactions(30)
        for offset, commit in ((99, False), (5, True)):
            producer.begin_transaction()
            producer.send_offsets_to_transaction(
                [CKTopicPartition(topic, 0, offset)], consumer.consumer_group_metadata(), 30
            )
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    finally:
        consumer.close()
    reader = OffsetsLogReader(settings_from_properties({"bootstrap.servers": kafka_bootstrap}))
    ranges = reader.ranges()
    # other modules may write meanwhile: one read, up to the ends the pieces were cut from
    whole = [r for r in reader.read({}) if r.offset < ranges[r.partition][1]]

    def pieces_read(pieces: list[tuple[int, int, int]]) -> list[object]:
        return [
            r
            for partition, start, end in pieces
            for r in reader.read({partition: start}, partitions={partition}, until={partition: end})
        ]

    ours = [r for r in whole if group.encode() in r.key]
    assert [r.offset for r in ours] == sorted(r.offset for r in ours) and len(ours) == 2
    partition = ours[0].partition
    start, end = ranges[partition]
    expected = [r for r in whole if r.partition == partition]
    # every cut from just after the plain commit to just after the committed transaction's record
    cuts = range(ours[0].offset + 1, min(ours[1].offset + 2, end))
    assert 0 < len(cuts) < 12
    for cut in cuts:
        assert pieces_read([(partition, start, cut), (partition, cut, end)]) == expected, cut
    # and every partition shared out to 4 readers
    shares = share_partitions(ranges, 4)
    read = [r for share in shares for r in pieces_read([(p.partition, p.start, p.end) for p in share])]
    assert sorted(read, key=lambda r: (r.partition, r.offset)) == sorted(
        whole, key=lambda r: (r.partition, r.offset)
    )


def test_records_removed_before_they_were_read_are_a_gap(
    kafka_bootstrap: str, unique_name: Names, tmp_path: Path
) -> None:
    """__consumer_offsets refuses DeleteRecords, so prove the check on a topic of the same shape."""
    topic = unique_name("gap-log")
    create_topics(kafka_bootstrap, [topic], partitions=1)
    produce(kafka_bootstrap, topic, 10, partitions=1)
    reader = OffsetsLogReader(settings_from_properties({"bootstrap.servers": kafka_bootstrap}), topic=topic)
    assert [r.offset for r in reader.read({0: 8})] == [8, 9]
    spec = tmp_path / "delete.json"
    spec.write_text(f'{{"partitions": [{{"topic": "{topic}", "partition": 0, "offset": 5}}], "version": 1}}')
    kafka_tool("kafka-delete-records", "--bootstrap-server", kafka_bootstrap, "--offset-json-file", str(spec))
    with pytest.raises(OffsetsLogGap) as gap:
        list(reader.read({0: 3}))
    assert (gap.value.partition, gap.value.position, gap.value.log_start) == (0, 3, 5)
    assert next(iter(reader.read({}))).offset == 5  # from the log start
