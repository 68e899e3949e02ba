"""Golden vectors: bytes written by hand from Kafka's JSON schemas (struct.pack, not our encoder)."""

from __future__ import annotations

import struct
import uuid

import pytest

from groupwarden.offsets_log import (
    TOMBSTONE,
    ClassicMember,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    StreamsCopartitionGroup,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    StreamsTopicInfo,
    UnknownRecord,
    UnknownRecordKey,
    decode_key,
    decode_value,
    parse_consumer_protocol_subscription,
)
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value

pytestmark = pytest.mark.unit

TS = 1_700_000_000_000  # 0x0000018BCFE56800
TOPIC_ID = uuid.UUID("0f0e0d0c-0b0a-0908-0706-050403020100")


# Independent little writers (classic: int16/int32 lengths; flexible: uvarint length + 1).
def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def s(v: str | None) -> bytes:
    return i16(-1) if v is None else i16(len(v.encode())) + v.encode()


def b(v: bytes) -> bytes:
    return i32(len(v)) + v


def uvarint(n: int) -> bytes:
    out = b""
    while n > 0x7F:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def cs(v: str | None) -> bytes:  # compact (nullable) string
    return b"\x00" if v is None else uvarint(len(v.encode()) + 1) + v.encode()


def cb(v: bytes) -> bytes:
    return bytes([len(v) + 1]) + v


NO_TAGS = b"\x00"


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


def test_offset_commit_key_literal_bytes() -> None:
    key = bytes.fromhex("0001" + "0002" + "6731" + "0001" + "74" + "00000003")
    assert decode_key(key) == OffsetCommitKey("g1", "t", 3, 1)


def test_legacy_offset_commit_key_type_0() -> None:
    key = i16(0) + s("grp") + s("orders") + i32(11)
    assert decode_key(key) == OffsetCommitKey("grp", "orders", 11, 0)


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (i16(2) + s("classic"), GroupMetadataKey("classic")),
        (i16(3) + s("kip848"), ConsumerGroupMetadataKey("kip848")),
        (i16(5) + s("kip848") + s("member-1"), ConsumerGroupMemberMetadataKey("kip848", "member-1")),
        (i16(16) + s("kip848") + s("orders-.*"), ConsumerGroupRegularExpressionKey("kip848", "orders-.*")),
        (i16(23) + s("wordcount"), StreamsGroupTopologyKey("wordcount")),
    ],
)
def test_group_keys(key: bytes, expected: object) -> None:
    assert decode_key(key) == expected
    assert encode_key(decode_key(key)) == key


@pytest.mark.parametrize("rtype", [4, 6, 7, 8, 9, 11, 12, 13, 14, 15, 17, 18, 20, 21, 22, 24])
def test_known_but_undecoded_types_still_name_their_group(rtype: int) -> None:
    # Every group-coordinator key starts with GroupId; some add MemberId / topic fields after it.
    key = i16(rtype) + s("some-group") + s("member-or-more")
    assert decode_key(key) == UnknownRecordKey(rtype, "some-group")


@pytest.mark.parametrize("rtype", [10, 19])  # ShareGroupMemberMetadata, StreamsGroupMemberMetadata
def test_share_and_streams_member_keys_name_the_member(rtype: int) -> None:
    key = i16(rtype) + s("some-group") + s("member-1")
    assert decode_key(key) == UnknownRecordKey(rtype, "some-group", "member-1")
    assert encode_key(decode_key(key)) == key


def carray(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def test_streams_group_topology_value_literal_bytes() -> None:
    # StreamsGroupTopologyValue v0 (flexible), field by field as Kafka 4.3.1's schema writes it:
    # Epoch, Subtopologies[SubtopologyId, SourceTopics, SourceTopicRegex, StateChangelogTopics
    # [TopicInfo], RepartitionSinkTopics, RepartitionSourceTopics[TopicInfo], CopartitionGroups].
    changelog = cs("app-counts-store-changelog") + i32(0) + i16(0) + carray([]) + b"\x00"
    repartition = (
        cs("app-counts-store-repartition")
        + i32(2)
        + i16(1)
        + carray([cs("cleanup.policy") + cs("delete") + b"\x00"])
        + b"\x00"
    )
    copartition = carray([i16(0)]) + carray([]) + carray([i16(0)]) + b"\x00"
    sub0 = (
        cs("0")
        + carray([cs("words")])
        + carray([])
        + carray([])
        + carray([cs("app-counts-store-repartition")])
    )
    sub0 += carray([]) + carray([]) + b"\x00"
    sub1 = cs("1") + carray([]) + carray([]) + carray([changelog]) + carray([]) + carray([repartition])
    sub1 += carray([copartition]) + b"\x00"
    value = i16(0) + i32(7) + carray([sub0, sub1]) + b"\x00"
    expected = StreamsGroupTopologyValue(
        7,
        (
            StreamsSubtopology("0", ("words",), repartition_sink_topics=("app-counts-store-repartition",)),
            StreamsSubtopology(
                "1",
                state_changelog_topics=(StreamsTopicInfo("app-counts-store-changelog"),),
                repartition_source_topics=(
                    StreamsTopicInfo("app-counts-store-repartition", 2, 1, (("cleanup.policy", "delete"),)),
                ),
                copartition_groups=(StreamsCopartitionGroup((0,), (), (0,)),),
            ),
        ),
    )
    key = StreamsGroupTopologyKey("app")
    assert decode_value(key, value) == expected
    assert encode_value(expected) == value
    assert decode_value(key, None) is TOMBSTONE
    assert decode_value(key, i16(1) + value[2:]) == UnknownRecord(23, 1)  # a future version
    with pytest.raises(CorruptRecordError):
        decode_value(key, value[:-3])


def test_future_type_with_no_string_prefix_has_no_group() -> None:
    assert decode_key(i16(99) + b"\x7f") == UnknownRecordKey(99, None)
    assert decode_key(i16(99) + s("future")) == UnknownRecordKey(99, "future")
    assert decode_key(i16(-5)) == UnknownRecordKey(-5, None)


# ---------------------------------------------------------------------------------------------
# OffsetCommit values v0..v4
# ---------------------------------------------------------------------------------------------

OC_KEY = OffsetCommitKey("g", "t", 0)


def test_offset_commit_v3_literal_bytes() -> None:
    value = bytes.fromhex("0003" + "000000000000002a" + "00000005" + "0000" + "0000018bcfe56800")
    assert decode_value(OC_KEY, value) == OffsetCommitValue(42, 5, "", TS, -1, None, 3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (i16(0) + i64(7) + s("meta") + i64(TS), OffsetCommitValue(7, -1, "meta", TS, -1, None, 0)),
        (
            i16(1) + i64(7) + s("") + i64(TS) + i64(TS + 86_400_000),
            OffsetCommitValue(7, -1, "", TS, TS + 86_400_000, None, 1),
        ),
        (i16(2) + i64(7) + s("m") + i64(TS), OffsetCommitValue(7, -1, "m", TS, -1, None, 2)),
        (i16(3) + i64(7) + i32(12) + s("m") + i64(TS), OffsetCommitValue(7, 12, "m", TS, -1, None, 3)),
        (
            i16(4) + i64(7) + i32(12) + cs("m") + i64(TS) + NO_TAGS,
            OffsetCommitValue(7, 12, "m", TS, -1, None, 4),
        ),
        (
            # v4 with the tagged TopicId: 1 field, tag 0, size 16, the uuid's bytes.
            i16(4) + i64(7) + i32(12) + cs("") + i64(TS) + b"\x01\x00\x10" + TOPIC_ID.bytes,
            OffsetCommitValue(7, 12, "", TS, -1, TOPIC_ID, 4),
        ),
    ],
)
def test_offset_commit_values(value: bytes, expected: OffsetCommitValue) -> None:
    assert decode_value(OC_KEY, value) == expected
    assert encode_value(expected) == value


@pytest.mark.parametrize(
    "tail",
    [
        b"\x01\x05\x02\xab\xcd",  # one unknown tagged field (tag 5): skipped
        b"\x02\x00\x10" + TOPIC_ID.bytes + b"\x07\x01\x00",  # TopicId plus an unknown tag 7
        b"\x01\x00\x10" + bytes(16),  # the zero uuid is Kafka's "no topic id"
    ],
)
def test_offset_commit_v4_other_tagged_fields(tail: bytes) -> None:
    value = i16(4) + i64(7) + i32(-1) + cs("m" * 200) + i64(TS) + tail  # 2-byte varint length
    decoded = decode_value(OC_KEY, value)
    assert isinstance(decoded, OffsetCommitValue)
    assert (decoded.offset, decoded.metadata, decoded.commit_timestamp_ms) == (7, "m" * 200, TS)
    assert decoded.topic_id == (TOPIC_ID if tail.startswith(b"\x02") else None)
    short = i16(4) + i64(7) + i32(-1) + cs("m") + i64(TS) + tail  # same tags on the fast path
    assert decode_value(OC_KEY, short) == OffsetCommitValue(7, -1, "m", TS, -1, decoded.topic_id, 4)


def test_offset_commit_future_version_is_unknown_not_an_error() -> None:
    assert decode_value(OC_KEY, i16(5) + b"whatever") == UnknownRecord(1, 5)
    assert decode_value(OffsetCommitKey("g", "t", 0, 0), i16(-1)) == UnknownRecord(0, -1)


def test_tombstone() -> None:
    assert decode_value(OC_KEY, None) is TOMBSTONE
    assert decode_value(GroupMetadataKey("g"), None) is TOMBSTONE


# ---------------------------------------------------------------------------------------------
# GroupMetadata values v0..v4
# ---------------------------------------------------------------------------------------------

SUB = b"\x00\x00" + i32(1) + s("orders") + i32(-1)  # ConsumerProtocolSubscription v0
ASSIGN = b"\x00\x00" + i32(0) + i32(-1)


def _classic_member(version: int) -> bytes:
    flexible = version >= 4
    text, blob = (cs, cb) if flexible else (s, b)
    out = text("m-1")
    if version >= 3:
        out += text("instance-1")
    out += text("client-1") + text("/10.0.0.1")
    if version >= 1:
        out += i32(300_000)
    out += i32(45_000) + blob(SUB) + blob(ASSIGN)
    return out + (NO_TAGS if flexible else b"")


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_values(version: int) -> None:
    flexible = version >= 4
    text = cs if flexible else s
    value = i16(version) + text("consumer") + i32(9) + text("range") + text("m-1")
    if version >= 2:
        value += i64(TS)
    value += (b"\x02" if flexible else i32(1)) + _classic_member(version)
    value += NO_TAGS if flexible else b""
    expected = GroupMetadataValue(
        "consumer",
        9,
        "range",
        "m-1",
        TS if version >= 2 else -1,
        (
            ClassicMember(
                "m-1",
                "instance-1" if version >= 3 else None,
                "client-1",
                "/10.0.0.1",
                300_000 if version >= 1 else -1,
                45_000,
                SUB,
                ASSIGN,
            ),
        ),
        version,
    )
    assert decode_value(GroupMetadataKey("g"), value) == expected
    assert encode_value(expected) == value


def test_group_metadata_empty_simple_group_with_null_protocol() -> None:
    value = i16(3) + s("") + i32(0) + s(None) + s(None) + i64(TS) + i32(0)
    assert decode_value(GroupMetadataKey("g"), value) == GroupMetadataValue("", 0, None, None, TS, (), 3)


# ---------------------------------------------------------------------------------------------
# KIP-848 records (flexible from v0)
# ---------------------------------------------------------------------------------------------


def test_consumer_group_metadata_value() -> None:
    key = ConsumerGroupMetadataKey("g")
    assert decode_value(key, i16(0) + i32(17) + NO_TAGS) == ConsumerGroupMetadataValue(17, 0, -1, 0)
    tagged = i16(0) + i32(17) + b"\x02" + b"\x00\x08" + i64(123) + b"\x01\x08" + i64(TS)
    assert decode_value(key, tagged) == ConsumerGroupMetadataValue(17, 123, TS, 0)
    assert encode_value(ConsumerGroupMetadataValue(17, 123, TS, 0)) == tagged


def test_consumer_group_member_metadata_value() -> None:
    value = (
        i16(0)
        + cs(None)  # InstanceId
        + cs("rack-a")  # RackId
        + cs("client")
        + cs("/10.0.0.2")
        + b"\x03"
        + cs("orders")
        + cs("payments")  # SubscribedTopicNames
        + cs("audit-.*")  # SubscribedTopicRegex
        + i32(60_000)  # RebalanceTimeoutMs
        + cs("uniform")  # ServerAssignor
        + NO_TAGS
    )
    expected = ConsumerGroupMemberMetadataValue(
        None, "rack-a", "client", "/10.0.0.2", ("orders", "payments"), "audit-.*", 60_000, "uniform", None, 0
    )
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), value) == expected
    assert encode_value(expected) == value


def test_consumer_group_member_with_classic_member_metadata_tag() -> None:
    # Tagged nullable struct: presence uvarint 1, SessionTimeoutMs, SupportedProtocols, tags.
    struct_bytes = b"\x01" + i32(45_000) + b"\x02" + cs("range") + cb(SUB) + NO_TAGS + NO_TAGS
    value = (
        i16(0)
        + cs("static-1")
        + cs(None)
        + cs("client")
        + cs("host")
        + b"\x02"
        + cs("orders")
        + cs(None)
        + i32(-1)
        + cs(None)
        + b"\x01\x00"
        + bytes([len(struct_bytes)])
        + struct_bytes
    )
    expected = ConsumerGroupMemberMetadataValue(
        "static-1",
        None,
        "client",
        "host",
        ("orders",),
        None,
        -1,
        None,
        ClassicMemberMetadata(45_000, (ClassicProtocol("range", SUB),)),
        0,
    )
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), value) == expected
    assert encode_value(expected) == value


def test_consumer_group_regular_expression_value() -> None:
    value = i16(0) + b"\x03" + cs("audit-eu") + cs("audit-us") + i64(88) + i64(TS) + NO_TAGS
    expected = ConsumerGroupRegularExpressionValue(("audit-eu", "audit-us"), 88, TS, 0)
    assert decode_value(ConsumerGroupRegularExpressionKey("g", "audit-.*"), value) == expected
    assert encode_value(expected) == value


def test_kip848_future_versions_are_unknown() -> None:
    assert decode_value(ConsumerGroupMetadataKey("g"), i16(1) + i32(1)) == UnknownRecord(3, 1)
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), i16(3)) == UnknownRecord(5, 3)
    assert decode_value(ConsumerGroupRegularExpressionKey("g", "r"), i16(1)) == UnknownRecord(16, 1)
    assert decode_value(GroupMetadataKey("g"), i16(5) + b"\x00") == UnknownRecord(2, 5)
    assert decode_value(UnknownRecordKey(7, "g"), i16(0) + b"\x01\x02") == UnknownRecord(7, 0)


# ---------------------------------------------------------------------------------------------
# Corrupt bytes
# ---------------------------------------------------------------------------------------------

VALID = [
    (OC_KEY, i16(1) + i64(7) + s("meta") + i64(TS) + i64(TS)),
    (OC_KEY, i16(3) + i64(7) + i32(1) + s("meta") + i64(TS)),
    (OC_KEY, i16(4) + i64(7) + i32(1) + cs("m") + i64(TS) + b"\x01\x00\x10" + TOPIC_ID.bytes),
    (
        GroupMetadataKey("g"),
        i16(4)
        + cs("consumer")
        + i32(1)
        + cs("range")
        + cs(None)
        + i64(TS)
        + b"\x02"
        + _classic_member(4)
        + NO_TAGS,
    ),
    (GroupMetadataKey("g"), i16(2) + s("consumer") + i32(1) + s(None) + s(None) + i64(TS) + i32(0)),
    (ConsumerGroupMetadataKey("g"), i16(0) + i32(3) + b"\x01\x00\x08" + i64(1)),
    (ConsumerGroupRegularExpressionKey("g", "r"), i16(0) + b"\x02" + cs("t") + i64(1) + i64(2) + NO_TAGS),
]


@pytest.mark.parametrize(("key", "value"), VALID)
def test_every_truncation_is_corrupt(key: object, value: bytes) -> None:
    decode_value(key, value)  # type: ignore[arg-type]
    for cut in range(len(value)):
        with pytest.raises(CorruptRecordError):
            decode_value(key, value[:cut])  # type: ignore[arg-type]


def test_truncated_keys_are_corrupt() -> None:
    key = i16(1) + s("group") + s("topic") + i32(1)
    for cut in range(len(key)):
        with pytest.raises(CorruptRecordError):
            decode_key(key[:cut])
    member_key = i16(5) + s("g") + s("m")
    for cut in range(len(member_key)):
        if cut <= 2:
            continue  # a bare type is parsed below
        with pytest.raises(CorruptRecordError):
            decode_key(member_key[:cut])
    with pytest.raises(CorruptRecordError):
        decode_key(i16(2))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (OC_KEY, i16(3) + i64(1) + i32(1) + i16(-1) + i64(TS)),  # null metadata (non-nullable)
        (OC_KEY, i16(3) + i64(1) + i32(1) + i16(2) + b"\xff\xfe" + i64(TS)),  # not UTF-8
        (OC_KEY, i16(4) + i64(1) + i32(1) + cs("") + i64(TS) + b"\x01\x00\x04" + i32(0)),  # short uuid
        (GroupMetadataKey("g"), i16(0) + s("consumer") + i32(1) + s(None) + s(None) + i32(-1)),  # null array
        (GroupMetadataKey("g"), i16(0) + s("c") + i32(1) + s(None) + s(None) + i32(1_000_000)),  # huge count
        (ConsumerGroupMetadataKey("g"), i16(0) + i32(1) + b"\xff\xff\xff\xff\xff\x01"),  # 6-byte varint
        (ConsumerGroupRegularExpressionKey("g", "r"), i16(0) + b"\x00" + i64(1) + i64(1) + NO_TAGS),  # null
    ],
)
def test_garbage_is_corrupt(key: object, value: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        decode_value(key, value)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# ConsumerProtocolSubscription
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (i16(0) + i32(2) + s("a") + s("b") + i32(-1), frozenset({"a", "b"})),
        (i16(0) + i32(2) + s("a") + s("b"), frozenset({"a", "b"})),  # userData missing: ignored
        (i16(1) + i32(1) + s("a") + b(b"ud") + i32(1) + s("a") + i32(1) + i32(0), frozenset({"a"})),
        # v3 with generationId and rackId, and a far-future v9: topics prefix only.
        (i16(3) + i32(1) + s("x") + i32(-1) + i32(0) + i32(5) + s("rack"), frozenset({"x"})),
        (i16(9) + i32(1) + s("x") + b"future fields", frozenset({"x"})),
        (i16(0) + i32(0) + i32(-1), frozenset()),
        (b"", None),
        (None, None),
        (i16(-1) + i32(0), None),
        (i16(0) + i32(-1), None),
        (i16(0) + i32(2) + s("a"), None),
        (b"\x00", None),
        (i16(0) + i32(1) + i16(2) + b"\xc3\x28", None),
    ],
)
def test_parse_consumer_protocol_subscription(data: bytes | None, expected: frozenset[str] | None) -> None:
    assert parse_consumer_protocol_subscription(data) == expected


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_any_bytes_like_input(wrap: type) -> None:
    # Spark hands binary columns to Python as bytearray; readers may hand out memoryviews.
    key = i16(1) + s("g") + s("t") + i32(2)
    v3 = i16(3) + i64(7) + i32(1) + s("m") + i64(TS)
    v4 = i16(4) + i64(7) + i32(1) + cs("m") + i64(TS) + b"\x01\x00\x10" + TOPIC_ID.bytes
    decoded_key = decode_key(wrap(key))
    assert decoded_key == OffsetCommitKey("g", "t", 2)
    assert decode_value(decoded_key, wrap(v3)) == OffsetCommitValue(7, 1, "m", TS, -1, None, 3)
    assert decode_value(decoded_key, wrap(v4)) == OffsetCommitValue(7, 1, "m", TS, -1, TOPIC_ID, 4)
    member = i16(0) + cs(None) + cs(None) + cs("c") + cs("h") + b"\x02" + cs("x") + cs(None) + i32(1)
    member += cs(None) + NO_TAGS
    assert decode_value(ConsumerGroupMemberMetadataKey("g", "m"), wrap(member)) == (
        ConsumerGroupMemberMetadataValue(None, None, "c", "h", ("x",), None, 1, None, None, 0)
    )
    assert parse_consumer_protocol_subscription(wrap(SUB)) == frozenset({"orders"})
