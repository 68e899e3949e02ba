"""OffsetsLedger: compaction semantics, group kinds, empty_since, subscriptions, resume, counters,
the decoded key `apply` hands back (decoded once per record by the history replay)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwarden.core.snapshot import GroupKind, SourcedTime, TimestampSource, TopicPartition
from groupwarden.offsets_log import (
    ClassicMember,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    GroupMetadataKey,
    GroupMetadataValue,
    LedgerOffset,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsLedger,
    RecordKey,
    RecordValue,
)
from groupwarden.offsets_log.codec import decode_key
from groupwarden.testing.offsets_log_encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_unknown_key,
    encode_value,
)

pytestmark = pytest.mark.unit

T0 = 1_700_000_000_000


class Log:
    """Writes records into one __consumer_offsets partition and feeds them to a ledger."""

    def __init__(self, ledger: OffsetsLedger | None = None, partition: int = 0) -> None:
        self.ledger = OffsetsLedger() if ledger is None else ledger
        self.partition = partition
        self.next_offset = 0
        self.records: list[tuple[bytes | None, bytes | None, int, int, int]] = []

    def write(self, key: RecordKey | bytes | None, value: RecordValue | bytes | None, ts: int = T0) -> None:
        raw_key = encode_key(key) if key is not None and not isinstance(key, bytes) else key
        raw_value = encode_value(value) if value is not None and not isinstance(value, bytes) else value
        record = (raw_key, raw_value, ts, self.partition, self.next_offset)
        self.next_offset += 1
        self.records.append(record)
        self.ledger.apply(*record)

    def commit(
        self, group: str, topic: str, partition: int, offset: int, ts: int = T0, version: int = 3
    ) -> None:
        value = OffsetCommitValue(offset, 4 if version >= 3 else -1, "", ts, -1, None, version)
        self.write(OffsetCommitKey(group, topic, partition), value, ts)


def classic_value(
    members: Sequence[tuple[str, list[str] | bytes]],
    protocol_type: str = "consumer",
    ts: int = T0,
    generation: int = 1,
) -> GroupMetadataValue:
    built = []
    for member_id, sub in members:
        subscription = sub if isinstance(sub, bytes) else encode_consumer_protocol_subscription(sub, 1)
        built.append(ClassicMember(member_id, None, "client", "/1.2.3.4", 300_000, 45_000, subscription, b""))
    protocol = "range" if members else None
    leader = members[0][0] if members else None
    return GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(built), 3)


def member_value(topics: list[str], regex: str | None = None) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(None, None, "client", "host", tuple(topics), regex, 60_000, None)


# ---------------------------------------------------------------------------------------------
# Offsets and compaction
# ---------------------------------------------------------------------------------------------


def test_latest_commit_per_key_wins_and_tombstone_deletes() -> None:
    log = Log()
    log.commit("g", "orders", 0, 10, T0)
    log.commit("g", "orders", 1, 20, T0 + 1)
    log.commit("g", "orders", 0, 15, T0 + 2)
    log.commit("g", "payments", 0, 5, T0 + 3, version=1)
    ledger = log.ledger
    assert ledger.offsets("g") == {
        TopicPartition("orders", 0): LedgerOffset(15, T0 + 2, None, 4, ""),
        TopicPartition("orders", 1): LedgerOffset(20, T0 + 1, None, 4, ""),
        TopicPartition("payments", 0): LedgerOffset(5, T0 + 3, None, None, ""),
    }
    log.write(OffsetCommitKey("g", "orders", 0), None)
    assert TopicPartition("orders", 0) not in ledger.offsets("g")
    assert len(ledger.offsets("g")) == 2
    assert ledger.tombstones == 1
    assert ledger.records == 5


def test_legacy_type_0_key_names_the_same_offset() -> None:
    log = Log()
    log.write(OffsetCommitKey("g", "t", 0, record_type=0), OffsetCommitValue(1, -1, "", T0, version=0))
    log.write(OffsetCommitKey("g", "t", 0, record_type=1), OffsetCommitValue(2, -1, "", T0 + 1, version=2))
    assert log.ledger.offsets("g") == {TopicPartition("t", 0): LedgerOffset(2, T0 + 1, None, None, "")}


def test_expire_timestamp_metadata_and_topic_id_are_kept() -> None:
    log = Log()
    topic_id = uuid.uuid4()
    log.write(OffsetCommitKey("g", "a", 0), OffsetCommitValue(1, -1, "m", T0, T0 + 5, version=1))
    log.write(OffsetCommitKey("g", "b", 0), OffsetCommitValue(2, 7, "x", T0, -1, topic_id, version=4))
    offsets = log.ledger.offsets("g")
    assert offsets[TopicPartition("a", 0)] == LedgerOffset(1, T0, T0 + 5, None, "m")
    assert offsets[TopicPartition("b", 0)] == LedgerOffset(2, T0, None, 7, "x", topic_id)


def test_deleting_every_offset_of_an_offsets_only_group_forgets_it() -> None:
    log = Log()
    log.commit("g", "t", 0, 1)
    assert log.ledger.group("g") is not None
    log.write(OffsetCommitKey("g", "t", 0), None)
    assert log.ledger.group("g") is None
    assert list(log.ledger.groups()) == []
    # A tombstone for something never seen is harmless.
    log.write(OffsetCommitKey("other", "t", 0), None)
    log.write(GroupMetadataKey("other"), None)
    log.write(ConsumerGroupMemberMetadataKey("other", "m"), None)
    assert log.ledger.group_count == 0


def test_commit_time_and_committed_offsets_use_the_shared_types() -> None:
    log = Log()
    log.commit("g", "t", 1, 9, T0 + 1)
    log.commit("g", "t", 0, 8, T0)
    at = datetime.fromtimestamp(T0 / 1000, tz=UTC)
    assert log.ledger.commit_time("g", TopicPartition("t", 0)) == SourcedTime(at, TimestampSource.OFFSETS_LOG)
    assert log.ledger.commit_time("g", TopicPartition("t", 7)) is None
    assert log.ledger.commit_time("nope", TopicPartition("t", 0)) is None
    committed = log.ledger.committed_offsets("g")
    assert [c.partition for c in committed] == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert committed[1].offset == 9
    assert committed[1].committed_at is not None
    assert committed[1].committed_at.at.timestamp() * 1000 == T0 + 1
    assert committed[0].leader_epoch == 4


def test_names_are_interned() -> None:
    log = Log()
    log.commit("g-" + str(1), "topic-" + str(2), 0, 1)
    (group,) = log.ledger.groups()
    assert sys.intern(group) is group
    (tp,) = log.ledger.offsets(group)
    assert sys.intern(tp.topic) is tp.topic


# ---------------------------------------------------------------------------------------------
# Classic groups
# ---------------------------------------------------------------------------------------------


def test_classic_consumer_group_lifecycle() -> None:
    log = Log()
    log.commit("g", "orders", 0, 1)
    log.write(GroupMetadataKey("g"), classic_value([("m1", ["orders"]), ("m2", ["orders", "audit"])], ts=T0))
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.CLASSIC
    assert group.protocol_type == "consumer"
    assert group.generation == 1
    assert group.member_count == 2
    assert group.subscribed_topics == frozenset({"orders", "audit"})
    assert group.empty_since_ms is None
    assert [m.subscribed_topics for m in group.classic_members] == [
        frozenset({"orders"}),
        frozenset({"orders", "audit"}),
    ]

    # Everyone left: the coordinator writes the group with no members, state Empty since then.
    log.write(GroupMetadataKey("g"), classic_value([], ts=T0 + 60_000, generation=2), ts=T0 + 60_000)
    group = log.ledger.group("g")
    assert group is not None
    assert group.empty_since_ms == T0 + 60_000
    assert group.subscribed_topics == frozenset()
    empty_since = log.ledger.empty_since("g")
    assert empty_since is not None
    assert empty_since.source is TimestampSource.OFFSETS_LOG

    # A consumer rejoins: no longer empty.
    log.write(GroupMetadataKey("g"), classic_value([("m3", ["orders"])], generation=3), ts=T0 + 90_000)
    group = log.ledger.group("g")
    assert group is not None
    assert group.empty_since_ms is None
    assert group.subscribed_topics == frozenset({"orders"})

    # GroupMetadata tombstone: the classic group is gone; its offsets are independent keys.
    log.write(GroupMetadataKey("g"), None)
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.SIMPLE
    assert group.classic_members == ()
    assert group.offset_count == 1


def test_empty_protocol_type_is_a_simple_group() -> None:
    log = Log()
    log.write(GroupMetadataKey("g"), classic_value([], protocol_type=""))
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.SIMPLE
    assert group.protocol_type == ""


def test_offsets_only_group_is_simple() -> None:
    log = Log()
    log.commit("g", "t", 0, 1)
    group = log.ledger.group("g")
    assert group is not None
    assert (group.kind, group.protocol_type, group.subscribed_topics) == (GroupKind.SIMPLE, "", frozenset())


def test_non_consumer_protocol_subscriptions_are_opaque() -> None:
    log = Log()
    log.write(GroupMetadataKey("connect"), classic_value([("w1", b"opaque")], protocol_type="connect"))
    assert log.ledger.subscribed_topics("connect") is None
    group = log.ledger.group("connect")
    assert group is not None
    assert group.kind is GroupKind.CLASSIC
    assert group.classic_members[0].subscribed_topics is None


def test_undecodable_classic_subscription_makes_topics_unknown() -> None:
    log = Log()
    log.write(GroupMetadataKey("g"), classic_value([("m1", ["a"]), ("m2", b"\x00")]))
    assert log.ledger.subscribed_topics("g") is None


def test_classic_empty_without_state_timestamp_is_unknown() -> None:
    log = Log()
    value = GroupMetadataValue("consumer", 1, None, None, -1, (), version=1)
    log.write(GroupMetadataKey("g"), value)
    group = log.ledger.group("g")
    assert group is not None
    assert group.empty_since_ms is None
    assert group.current_state_timestamp_ms is None


# ---------------------------------------------------------------------------------------------
# KIP-848 groups
# ---------------------------------------------------------------------------------------------


def test_kip848_members_regexes_and_empty_since() -> None:
    log = Log()
    log.write(ConsumerGroupMemberMetadataKey("g", "m1"), member_value(["orders"]), ts=T0)
    log.write(ConsumerGroupMemberMetadataKey("g", "m2"), member_value(["payments"], "audit-.*"), ts=T0)
    log.write(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(2), ts=T0)
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.CONSUMER
    assert group.protocol_type == "consumer"
    assert group.group_epoch == 2
    assert group.consumer_members["m2"].regex == "audit-.*"
    assert group.subscribed_topics is None  # the regex has no resolution yet

    regex_key = ConsumerGroupRegularExpressionKey("g", "audit-.*")
    log.write(regex_key, ConsumerGroupRegularExpressionValue(("audit-eu", "audit-us"), 5, T0))
    assert log.ledger.subscribed_topics("g") == frozenset({"orders", "payments", "audit-eu", "audit-us"})
    group = log.ledger.group("g")
    assert group is not None
    assert group.regex_topics == {"audit-.*": frozenset({"audit-eu", "audit-us"})}
    assert group.empty_since_ms is None

    # Members leave: tombstones for their metadata, then a group epoch bump.
    log.write(ConsumerGroupMemberMetadataKey("g", "m1"), None, ts=T0 + 10)
    log.write(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(3), ts=T0 + 10)
    assert log.ledger.group("g").empty_since_ms is None  # type: ignore[union-attr]
    log.write(ConsumerGroupMemberMetadataKey("g", "m2"), None, ts=T0 + 20)
    log.write(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(4), ts=T0 + 21)
    group = log.ledger.group("g")
    assert group is not None
    assert group.empty_since_ms == T0 + 20
    assert group.member_count == 0
    assert group.subscribed_topics == frozenset()

    # Someone joins again, then leaves again: the newer tombstone counts.
    log.write(ConsumerGroupMemberMetadataKey("g", "m3"), member_value(["orders"]), ts=T0 + 30)
    assert log.ledger.group("g").empty_since_ms is None  # type: ignore[union-attr]
    log.write(ConsumerGroupMemberMetadataKey("g", "m3"), None, ts=T0 + 40)
    assert log.ledger.group("g").empty_since_ms == T0 + 40  # type: ignore[union-attr]

    # DeleteGroups: the regex and the group epoch are tombstoned; nothing is left.
    log.write(regex_key, None)
    log.write(ConsumerGroupMetadataKey("g"), None)
    assert log.ledger.group("g") is None


def test_kip848_empty_group_after_compaction_falls_back_to_the_epoch_record_time() -> None:
    # Compaction removed the members' records and tombstones; only the epoch record is left.
    log = Log()
    log.write(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(9), ts=T0 + 500)
    log.commit("g", "t", 0, 1, T0)
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.CONSUMER
    assert group.empty_since_ms == T0 + 500


def test_kip848_offsets_survive_group_deletion_records_until_their_own_tombstones() -> None:
    log = Log()
    log.write(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1))
    log.commit("g", "t", 0, 1)
    log.write(ConsumerGroupMetadataKey("g"), None)
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.SIMPLE
    log.write(OffsetCommitKey("g", "t", 0), None)
    assert log.ledger.group("g") is None


def test_share_and_streams_groups_are_recognised_and_never_have_known_topics() -> None:
    log = Log()
    log.write(encode_unknown_key(11, "share-g"), b"\x00\x00anything")
    log.write(encode_unknown_key(17, "streams-g"), b"\x00\x00anything")
    log.commit("streams-g", "t", 0, 1)
    assert log.ledger.group("share-g").kind is GroupKind.SHARE  # type: ignore[union-attr]
    assert log.ledger.group("streams-g").kind is GroupKind.STREAMS  # type: ignore[union-attr]
    assert log.ledger.subscribed_topics("streams-g") is None
    log.write(encode_unknown_key(11, "share-g"), None)
    assert log.ledger.group("share-g") is None
    assert log.ledger.unknown == 3
    assert log.ledger.unknown_by_type == {11: 2, 17: 1}


# ---------------------------------------------------------------------------------------------
# Unknown and corrupt records
# ---------------------------------------------------------------------------------------------


def test_unknown_types_are_counted_not_attributed() -> None:
    log = Log()
    log.write(encode_unknown_key(7, "g", b"\x00\x01m"), b"\x00\x00\x01")  # target assignment member
    log.write(encode_unknown_key(300, None, b"\x01"), b"\x00\x00")  # a future record type
    assert (log.ledger.unknown, log.ledger.corrupt, log.ledger.group_count) == (2, 0, 0)
    assert log.ledger.unknown_by_type == {7: 1, 300: 1}


def test_unknown_offset_value_version_makes_the_commit_time_unknown() -> None:
    log = Log()
    log.commit("g", "t", 0, 5, T0)
    log.write(OffsetCommitKey("g", "t", 0), b"\x00\x09future-format")
    assert log.ledger.unknown == 1
    assert log.ledger.offsets("g") == {TopicPartition("t", 0): LedgerOffset(-1, None, None, None, "")}
    assert log.ledger.commit_time("g", TopicPartition("t", 0)) is None


def test_corrupt_records_are_counted_and_never_guessed() -> None:
    log = Log()
    log.write(None, b"\x00\x03")
    log.write(b"\x00", b"\x00\x03")
    log.write(b"\x00\x01\x00\x05ab", b"\x00\x03")  # truncated offset commit key
    log.write(b"\x00\x02\x7f\xff", None)  # truncated group metadata key
    log.commit("g", "t", 0, 5)
    log.write(OffsetCommitKey("g", "t", 0), b"\x00\x03\x00")  # truncated value: time now unknown
    log.write(GroupMetadataKey("g"), b"\x00\x03\x00\x08consu")
    assert log.ledger.corrupt == 6
    assert log.ledger.commit_time("g", TopicPartition("t", 0)) is None
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.UNKNOWN
    assert group.protocol_type is None
    assert group.subscribed_topics is None
    assert group.empty_since_ms is None


def test_undecodable_kip848_member_or_regex_makes_topics_unknown() -> None:
    log = Log()
    log.write(ConsumerGroupMemberMetadataKey("g", "m1"), member_value(["a"]))
    log.write(ConsumerGroupMemberMetadataKey("g", "m2"), b"\x00\x07")  # unknown version
    assert log.ledger.subscribed_topics("g") is None
    log.write(ConsumerGroupMemberMetadataKey("g", "m2"), member_value(["b"], "r"))
    log.write(ConsumerGroupRegularExpressionKey("g", "r"), b"\x00\x00\x05")  # corrupt
    assert log.ledger.subscribed_topics("g") is None
    assert (log.ledger.unknown, log.ledger.corrupt) == (1, 1)


# ---------------------------------------------------------------------------------------------
# Positions and resume
# ---------------------------------------------------------------------------------------------


def test_positions_track_the_next_offset_per_partition_and_replays_are_skipped() -> None:
    source = Log(partition=3)
    for i in range(10):
        source.commit("g", "t", 0, i, T0 + i)
    ledger = OffsetsLedger()
    ledger.apply_many(source.records[:6])
    assert ledger.positions == {3: 6}
    # The reader resumes from positions[3], but a sloppy one re-reads a few records: no harm.
    assert ledger.apply_many(source.records[4:]) == 6
    assert ledger.positions == {3: 10}
    assert ledger.duplicates == 2
    assert ledger.records == 10
    assert ledger.offsets("g") == source.ledger.offsets("g")
    # New records appended later are picked up.
    source.commit("g", "t", 0, 99, T0 + 99)
    ledger.apply_many(source.records[ledger.positions[3] :])
    assert ledger.offsets("g")[TopicPartition("t", 0)].offset == 99


def test_partitions_are_independent() -> None:
    ledger = OffsetsLedger()
    a, b = Log(ledger, partition=0), Log(ledger, partition=1)
    a.commit("ga", "t", 0, 1)
    b.commit("gb", "t", 0, 1)
    b.commit("gb", "t", 0, 2)
    assert ledger.positions == {0: 1, 1: 2}
    assert sorted(ledger.groups()) == ["ga", "gb"]


OPS = st.lists(
    st.tuples(st.sampled_from(["g1", "g2"]), st.sampled_from(["t1", "t2"]), st.integers(0, 2), st.booleans()),
    max_size=40,
)


@given(OPS, st.data())
def test_ledger_matches_a_latest_per_key_model_in_any_chunking(
    ops: list[tuple[str, str, int, bool]], data: st.DataObject
) -> None:
    log = Log()
    model: dict[tuple[str, str, int], int] = {}
    for i, (group, topic, partition, delete) in enumerate(ops):
        if delete:
            log.write(OffsetCommitKey(group, topic, partition), None, T0 + i)
            model.pop((group, topic, partition), None)
        else:
            log.commit(group, topic, partition, i, T0 + i)
            model[(group, topic, partition)] = i
    got = {
        (g, tp.topic, tp.partition): o.offset
        for g in log.ledger.groups()
        for tp, o in log.ledger.offsets(g).items()
    }
    assert got == model
    # Re-reading the same log in arbitrary (overlapping) chunks gives the same state.
    chunked = OffsetsLedger()
    start = 0
    while start < len(log.records):
        stop = data.draw(st.integers(start + 1, len(log.records)))
        chunked.apply_many(log.records[max(0, start - data.draw(st.integers(0, 3))) : stop])
        start = stop
    assert {g: chunked.offsets(g) for g in chunked.groups()} == {
        g: log.ledger.offsets(g) for g in log.ledger.groups()
    }


def test_record_without_timestamp_never_dates_an_empty_group_to_1970() -> None:
    log = Log()
    log.write(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1), ts=T0)
    log.write(ConsumerGroupMemberMetadataKey("g", "m1"), member_value(["a"]), ts=T0 + 1)
    log.write(ConsumerGroupMemberMetadataKey("g", "m1"), None, ts=-1)
    group = log.ledger.group("g")
    assert group is not None
    assert group.empty_since_ms is None


def test_classic_and_kip848_state_at_once_is_unknown() -> None:
    log = Log()
    log.write(GroupMetadataKey("g"), classic_value([("m1", ["a"])]))
    log.write(ConsumerGroupMemberMetadataKey("g", "m2"), member_value(["b"]))
    group = log.ledger.group("g")
    assert group is not None
    assert group.kind is GroupKind.UNKNOWN
    assert group.subscribed_topics == frozenset({"a", "b"})  # still the union: more topics, fewer deletions
    # The coordinator's conversion writes a GroupMetadata tombstone: then it is a KIP-848 group.
    log.write(GroupMetadataKey("g"), None)
    assert log.ledger.group("g").kind is GroupKind.CONSUMER  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------------------
# The decoded key, handed back (one decoding per record for the history replay)
# ---------------------------------------------------------------------------------------------


def test_apply_returns_the_key_it_decoded_whole_and_none_otherwise() -> None:
    ledger = OffsetsLedger()
    keys: list[RecordKey] = [
        GroupMetadataKey("g"),
        ConsumerGroupMetadataKey("h"),
        ConsumerGroupMemberMetadataKey("h", "m1"),
        ConsumerGroupRegularExpressionKey("h", "r"),
    ]
    for offset, key in enumerate(keys):
        raw = encode_key(key)
        returned = ledger.apply(raw, None, T0, 0, offset)
        assert returned == decode_key(raw) == key
    unknown = encode_unknown_key(300, None, b"\x01")
    assert ledger.apply(unknown, b"\x00\x00", T0, 0, 4) == decode_key(unknown)
    commit = encode_key(OffsetCommitKey("g", "t", 0))
    assert ledger.apply(commit, encode_value(OffsetCommitValue(1, -1, "", T0, -1, None, 3)), T0, 0, 5) is None
    assert ledger.apply(b"\x00\x02\x7f\xff", None, T0, 0, 6) is None  # corrupt: nothing decoded
    assert ledger.apply(None, b"\x00", T0, 0, 7) is None
    assert ledger.apply(encode_key(GroupMetadataKey("g")), None, T0, 0, 0) is None  # a replayed offset


def test_the_history_replay_decodes_each_membership_key_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from groupwarden.offsets_log import history, ledger

    log = Log()
    log.write(GroupMetadataKey("g"), classic_value([("m1", ["a"])], ts=T0))
    log.commit("g", "a", 0, 1)
    log.write(GroupMetadataKey("g"), classic_value([], ts=T0 + 10))
    log.write(GroupMetadataKey("g"), classic_value([("m1", ["a"])], ts=T0 + 20), ts=T0 + 20)
    log.write(b"\x00\x02\x7f\xff", None)  # corrupt: decoding fails in the ledger, then in the replay
    calls: list[bytes] = []

    def counting(key: bytes) -> RecordKey:
        calls.append(bytes(key))
        return decode_key(key)

    monkeypatch.setattr(ledger, "decode_key", counting)
    monkeypatch.setattr(history, "decode_key", counting)
    replay = history.ReplayWithHistory()
    replay.apply_many(log.records)
    calls_per_key = {key: calls.count(key) for key in set(calls)}
    assert calls_per_key == {encode_key(GroupMetadataKey("g")): 3, b"\x00\x02\x7f\xff": 2}
    assert replay.comebacks == [history.Comeback("g", GroupKind.CLASSIC, T0 + 10, T0 + 20)]
    # A replayed offset is not decoded by the ledger: the replay decodes it, as before.
    calls.clear()
    replay.apply(*log.records[2])
    assert calls == [encode_key(GroupMetadataKey("g"))]
