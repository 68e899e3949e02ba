"""Property tests: encode -> decode is the identity for every type and version; bytes never crash."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.offsets_log import (
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
    RecordKey,
    RecordValue,
    StreamsCopartitionGroup,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    StreamsTopicInfo,
    UnknownRecordKey,
    decode_key,
    decode_value,
    parse_consumer_protocol_subscription,
)
from groupwarden.testing.offsets_log_encoder import (
    encode_consumer_protocol_subscription,
    encode_key,
    encode_unknown_key,
    encode_value,
)

pytestmark = pytest.mark.unit

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Kafka strings: any unicode (no lone surrogates, which UTF-8 cannot carry), <= 0x7fff bytes.
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)
NULLABLE_TEXT = st.none() | TEXT
BLOB = st.binary(max_size=64)
TOPIC_ID = st.none() | st.uuids().filter(lambda u: u.int != 0)


@st.composite
def offset_commit_values(draw: st.DrawFn) -> OffsetCommitValue:
    version = draw(st.integers(0, 4))
    return OffsetCommitValue(
        offset=draw(INT64),
        leader_epoch=draw(INT32) if version >= 3 else -1,
        metadata=draw(TEXT),
        commit_timestamp_ms=draw(INT64),
        expire_timestamp_ms=draw(INT64) if version == 1 else -1,
        topic_id=draw(TOPIC_ID) if version >= 4 else None,
        version=version,
    )


@st.composite
def group_metadata_values(draw: st.DrawFn) -> GroupMetadataValue:
    version = draw(st.integers(0, 4))
    members = draw(
        st.lists(
            st.builds(
                ClassicMember,
                member_id=TEXT,
                group_instance_id=NULLABLE_TEXT if version >= 3 else st.none(),
                client_id=TEXT,
                client_host=TEXT,
                rebalance_timeout=INT32 if version >= 1 else st.just(-1),
                session_timeout=INT32,
                subscription=BLOB,
                assignment=BLOB,
            ),
            max_size=4,
        )
    )
    return GroupMetadataValue(
        protocol_type=draw(TEXT),
        generation=draw(INT32),
        protocol=draw(NULLABLE_TEXT),
        leader=draw(NULLABLE_TEXT),
        current_state_timestamp_ms=draw(INT64) if version >= 2 else -1,
        members=tuple(members),
        version=version,
    )


CONSUMER_GROUP_METADATA = st.builds(
    ConsumerGroupMetadataValue, epoch=INT32, metadata_hash=INT64, creation_time_ms=INT64, version=st.just(0)
)
CLASSIC_MEMBER_METADATA = st.builds(
    ClassicMemberMetadata,
    session_timeout_ms=INT32,
    supported_protocols=st.lists(st.builds(ClassicProtocol, name=TEXT, metadata=BLOB), max_size=3).map(tuple),
)
MEMBER_METADATA = st.builds(
    ConsumerGroupMemberMetadataValue,
    instance_id=NULLABLE_TEXT,
    rack_id=NULLABLE_TEXT,
    client_id=TEXT,
    client_host=TEXT,
    subscribed_topic_names=st.lists(TEXT, max_size=5).map(tuple),
    subscribed_topic_regex=NULLABLE_TEXT,
    rebalance_timeout_ms=INT32,
    server_assignor=NULLABLE_TEXT,
    classic_member_metadata=st.none() | CLASSIC_MEMBER_METADATA,
    version=st.just(0),
)
REGULAR_EXPRESSION = st.builds(
    ConsumerGroupRegularExpressionValue,
    topics=st.lists(TEXT, max_size=5).map(tuple),
    resolution_version=INT64,
    timestamp_ms=INT64,
    version=st.just(0),
)

INT16 = st.integers(-(2**15), 2**15 - 1)
TOPIC_INFO = st.builds(
    StreamsTopicInfo,
    name=TEXT,
    partitions=INT32,
    replication_factor=INT16,
    configs=st.lists(st.tuples(TEXT, TEXT), max_size=2).map(tuple),
)
INDEXES = st.lists(INT16, max_size=3).map(tuple)
SUBTOPOLOGY = st.builds(
    StreamsSubtopology,
    subtopology_id=TEXT,
    source_topics=st.lists(TEXT, max_size=3).map(tuple),
    source_topic_regex=st.lists(TEXT, max_size=2).map(tuple),
    state_changelog_topics=st.lists(TOPIC_INFO, max_size=2).map(tuple),
    repartition_sink_topics=st.lists(TEXT, max_size=2).map(tuple),
    repartition_source_topics=st.lists(TOPIC_INFO, max_size=2).map(tuple),
    copartition_groups=st.lists(
        st.builds(
            StreamsCopartitionGroup,
            source_topics=INDEXES,
            source_topic_regex=INDEXES,
            repartition_source_topics=INDEXES,
        ),
        max_size=2,
    ).map(tuple),
)
STREAMS_TOPOLOGY = st.builds(
    StreamsGroupTopologyValue,
    epoch=INT32,
    subtopologies=st.lists(SUBTOPOLOGY, max_size=3).map(tuple),
    version=st.just(0),
)

KEYS: st.SearchStrategy[RecordKey] = st.one_of(
    st.builds(OffsetCommitKey, group=TEXT, topic=TEXT, partition=INT32, record_type=st.sampled_from([0, 1])),
    st.builds(GroupMetadataKey, group=TEXT),
    st.builds(ConsumerGroupMetadataKey, group=TEXT),
    st.builds(ConsumerGroupMemberMetadataKey, group=TEXT, member_id=TEXT),
    st.builds(ConsumerGroupRegularExpressionKey, group=TEXT, regex=TEXT),
    st.builds(
        UnknownRecordKey,
        record_type=st.integers(4, 24).filter(lambda t: t not in (5, 10, 16, 19, 23)),
        group=TEXT,
    ),
    st.builds(StreamsGroupTopologyKey, group=TEXT),
    # share / streams member metadata: the member id is decoded too
    st.builds(UnknownRecordKey, record_type=st.sampled_from([10, 19]), group=TEXT, member_id=TEXT),
)

PAIRS: list[tuple[Any, st.SearchStrategy[Any]]] = [
    (OffsetCommitKey("g", "t", 0), offset_commit_values()),
    (GroupMetadataKey("g"), group_metadata_values()),
    (ConsumerGroupMetadataKey("g"), CONSUMER_GROUP_METADATA),
    (ConsumerGroupMemberMetadataKey("g", "m"), MEMBER_METADATA),
    (ConsumerGroupRegularExpressionKey("g", "r"), REGULAR_EXPRESSION),
    (StreamsGroupTopologyKey("g"), STREAMS_TOPOLOGY),
]


@given(KEYS)
def test_key_round_trip(key: RecordKey) -> None:
    assert decode_key(encode_key(key)) == key


@pytest.mark.parametrize(("key", "values"), PAIRS, ids=lambda p: type(p).__name__)
@given(data=st.data())
def test_value_round_trip(
    key: RecordKey, values: st.SearchStrategy[RecordValue], data: st.DataObject
) -> None:
    value = data.draw(values)
    encoded = encode_value(value)
    assert decode_value(key, encoded) == value
    # Like Kafka's reader, trailing bytes after the last field are ignored.
    assert decode_value(key, encoded + b"\x00\x01") == value


@pytest.mark.parametrize(("key", "values"), PAIRS, ids=lambda p: type(p).__name__)
@given(data=st.data())
def test_mangled_values_only_ever_raise_corrupt(
    key: RecordKey, values: st.SearchStrategy[RecordValue], data: st.DataObject
) -> None:
    encoded = bytearray(encode_value(data.draw(values)))
    for _ in range(data.draw(st.integers(1, 4))):
        if not encoded:
            break
        position = data.draw(st.integers(0, len(encoded) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            encoded[position] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del encoded[position:]
        else:
            encoded[position:position] = data.draw(st.binary(min_size=1, max_size=4))
    with contextlib.suppress(CorruptRecordError):
        decode_value(key, bytes(encoded))


@settings(max_examples=500)
@given(st.binary(max_size=64))
def test_random_key_bytes_only_ever_raise_corrupt(raw: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        decode_key(raw)


@settings(max_examples=300)
@given(
    key=st.sampled_from([k for k, _ in PAIRS] + [UnknownRecordKey(8, "g")]),
    version=st.integers(-1, 6),
    body=st.binary(max_size=64),
)
def test_random_value_bytes_only_ever_raise_corrupt(key: RecordKey, version: int, body: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        decode_value(key, version.to_bytes(2, "big", signed=True) + body)


@given(st.binary(max_size=64))
def test_subscription_parser_never_raises(raw: bytes) -> None:
    result = parse_consumer_protocol_subscription(raw)
    assert result is None or isinstance(result, frozenset)


@given(st.lists(TEXT, max_size=6), st.integers(0, 3), st.none() | BLOB)
def test_subscription_round_trip(topics: list[str], version: int, user_data: bytes | None) -> None:
    encoded = encode_consumer_protocol_subscription(topics, version, user_data)
    assert parse_consumer_protocol_subscription(encoded) == frozenset(topics)


@given(st.integers(25, 2**15 - 1), TEXT, st.binary(max_size=8))
def test_future_key_types_keep_their_group(rtype: int, group: str, rest: bytes) -> None:
    assert decode_key(encode_unknown_key(rtype, group, rest)) == UnknownRecordKey(rtype, group)
