"""Property tests: the codec's fast readers of GroupMetadata values, consumer subscriptions and
group record keys answer exactly what the general `Reader`-based readers (the definition) answer,
or hand over.

For every input: the fast reader returns None (the general reader then decides: a value or
CorruptRecordError), or a value the general reader returns too. Well-formed values of the
shapes brokers write must be read by the fast path (else it would be a fast path for nothing).
The definition and the fast paths share one decoder of a GroupMetadata value's members
(`_classic_members_at`); it is held to the protocol's layout read field by field with `Reader`
(`protocol_layout`, the oracle here).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.offsets_log import (
    ClassicMember,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    decode_value,
    parse_consumer_protocol_subscription,
)
from groupwarden.offsets_log._wire import (
    I32,
    I64,
    Reader,
    w_compact_array,
    w_compact_bytes,
    w_compact_nullable_string,
    w_compact_string,
    w_string,
    w_tagged,
)
from groupwarden.offsets_log.codec import (
    _DECODE_ERRORS,
    _key_strings_fast,
    _read_group_metadata,
    _subscription_topics,
    _subscription_topics_fast,
    read_group_metadata_fast,
)
from groupwarden.testing.offsets_log_encoder import encode_consumer_protocol_subscription, encode_value

pytestmark = pytest.mark.unit

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Short names (1-byte compact lengths in v4) and, sometimes, long ones (longer varints: handed over).
SHORT_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=24)
LONG_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=100, max_size=200)
SHORT_BLOB = st.binary(max_size=64)
# 2-byte compact lengths (read by the fast path) and 3-byte ones (handed over).
LONG_BLOB = st.binary(min_size=120, max_size=300) | st.binary(min_size=16_383, max_size=16_400)


def classic_values(
    text: st.SearchStrategy[str], blob: st.SearchStrategy[bytes]
) -> st.SearchStrategy[GroupMetadataValue]:
    @st.composite
    def values(draw: st.DrawFn) -> GroupMetadataValue:
        version = draw(st.integers(0, 4))
        members = draw(
            st.lists(
                st.builds(
                    ClassicMember,
                    member_id=text,
                    group_instance_id=(st.none() | text) if version >= 3 else st.none(),
                    client_id=text,
                    client_host=text,
                    rebalance_timeout=INT32 if version >= 1 else st.just(-1),
                    session_timeout=INT32,
                    subscription=blob,
                    assignment=blob,
                ),
                max_size=4,
            )
        )
        return GroupMetadataValue(
            protocol_type=draw(text),
            generation=draw(INT32),
            protocol=draw(st.none() | text),
            leader=draw(st.none() | text),
            current_state_timestamp_ms=draw(INT64) if version >= 2 else -1,
            members=tuple(members),
            version=version,
        )

    return values()


COMMON = classic_values(SHORT_TEXT, SHORT_BLOB | st.binary(min_size=120, max_size=300))
ANY_SIZE = classic_values(SHORT_TEXT | LONG_TEXT, SHORT_BLOB | LONG_BLOB)


def general(value: bytes, version: int) -> GroupMetadataValue | CorruptRecordError:
    try:
        return _read_group_metadata(Reader(value, 2), version)
    except CorruptRecordError as exc:
        return exc
    except _DECODE_ERRORS as exc:  # decode_value wraps these the same way
        return CorruptRecordError(str(exc))


def assert_fast_agrees(value: bytes) -> GroupMetadataValue | None:
    version = int.from_bytes(value[:2], "big", signed=True) if len(value) >= 2 else -1
    if version not in range(5):
        return None
    fast = read_group_metadata_fast(value, version)
    if fast is not None:
        assert general(value, version) == fast
    return fast


@settings(max_examples=400)
@given(COMMON, st.binary(max_size=3))
def test_the_shapes_brokers_write_take_the_fast_path_and_equal_the_codec(
    value: GroupMetadataValue, trailing: bytes
) -> None:
    encoded = encode_value(value) + trailing  # trailing bytes are ignored, as Kafka does
    assert assert_fast_agrees(encoded) == value
    assert decode_value(GroupMetadataKey("g"), encoded) == value


@settings(max_examples=200)
@given(ANY_SIZE)
def test_long_fields_are_read_or_handed_over(value: GroupMetadataValue) -> None:
    encoded = encode_value(value)
    assert assert_fast_agrees(encoded) in (None, value)
    assert decode_value(GroupMetadataKey("g"), encoded) == value


def mangled(data: st.DataObject, value: bytes) -> bytes:
    """`value` with 1 to 4 bytes flipped, cut, inserted or set to an edge of a length or count."""
    encoded = bytearray(value)
    for _ in range(data.draw(st.integers(1, 4))):
        if not encoded:
            break
        position = data.draw(st.integers(0, len(encoded) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert", "set"]))
        if action == "flip":
            encoded[position] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del encoded[position:]
        elif action == "insert":
            encoded[position:position] = data.draw(st.binary(min_size=1, max_size=4))
        else:  # lengths and counts at their edges: 0, 0x7f, 0x80, 0xff
            encoded[position] = data.draw(st.sampled_from([0, 1, 0x7F, 0x80, 0xFF]))
    return bytes(encoded)


@settings(max_examples=600)
@given(data=st.data())
def test_mangled_values_are_handed_over_or_equal_the_codec(data: st.DataObject) -> None:
    assert_fast_agrees(mangled(data, encode_value(data.draw(COMMON))))


@settings(max_examples=300)
@given(st.integers(0, 4), st.binary(max_size=80))
def test_random_bytes_are_handed_over_or_equal_the_codec(version: int, body: bytes) -> None:
    assert_fast_agrees(version.to_bytes(2, "big") + body)


def test_a_memoryview_reads_as_bytes() -> None:
    value = GroupMetadataValue(
        "consumer", 3, "range", "m-1", 17, (ClassicMember("m-1", "i", "c", "h", 5, 6, b"s", b"a"),), 4
    )
    encoded = encode_value(value)
    assert read_group_metadata_fast(memoryview(encoded), 4) == value
    assert read_group_metadata_fast(
        memoryview(encode_value(GroupMetadataValue("", 1, None, None, -1, (), 3))), 3
    ) == (GroupMetadataValue("", 1, None, None, -1, (), 3))


@settings(max_examples=300)
@given(st.lists(SHORT_TEXT | LONG_TEXT, max_size=6), st.integers(0, 3), st.none() | SHORT_BLOB)
def test_subscriptions_take_the_fast_path(topics: list[str], version: int, user_data: bytes | None) -> None:
    encoded = encode_consumer_protocol_subscription(topics, version, user_data)
    assert _subscription_topics_fast(encoded) == frozenset(topics) == _subscription_topics(encoded)


@settings(max_examples=500)
@given(
    st.binary(max_size=64)
    | st.builds(
        lambda t, cut: encode_consumer_protocol_subscription(t, 1, None)[:cut],
        st.lists(SHORT_TEXT, max_size=4),
        st.integers(0, 40),
    )
)
def test_any_subscription_bytes_are_handed_over_or_equal_the_codec(raw: bytes) -> None:
    fast = _subscription_topics_fast(raw)
    if fast is not None:
        assert fast == _subscription_topics(raw)
    assert parse_consumer_protocol_subscription(raw) == (_subscription_topics(raw) if raw else None)


def reader_strings(key: bytes, count: int) -> list[str] | CorruptRecordError:
    reader = Reader(key, 2)
    try:
        return [reader.string() for _ in range(count)]
    except CorruptRecordError as exc:
        return exc


@settings(max_examples=300)
@given(st.lists(SHORT_TEXT | LONG_TEXT, min_size=1, max_size=2), st.binary(max_size=3))
def test_key_strings_take_the_fast_path(strings: list[str], trailing: bytes) -> None:
    key = b"\x00\x05" + b"".join(w_string(s) for s in strings) + trailing
    assert _key_strings_fast(key, len(strings)) == strings == reader_strings(key, len(strings))


@settings(max_examples=500)
@given(
    st.integers(1, 2),
    st.binary(max_size=40)
    | st.builds(
        lambda strings, cut: (b"\x00\x05" + b"".join(w_string(s) for s in strings))[:cut],
        st.lists(SHORT_TEXT, min_size=1, max_size=2),
        st.integers(0, 60),
    ),
)
def test_any_key_bytes_are_handed_over_or_equal_the_reader(count: int, raw: bytes) -> None:
    fast = _key_strings_fast(raw, count)
    if fast is not None:
        assert fast == reader_strings(raw, count)


TAGGED = st.lists(st.tuples(st.integers(0, 200), st.binary(max_size=20)), max_size=2).map(
    lambda fields: sorted(dict(fields).items())
)


@settings(max_examples=300)
@given(st.data())
def test_tagged_fields_in_v4_are_handed_over_or_equal_the_codec(data: st.DataObject) -> None:
    """Brokers write no tagged field in GroupMetadata; a value with some (a newer broker) is the
    general reader's, which skips them."""
    value = data.draw(COMMON.filter(lambda v: v.version == 4))
    encoded = with_tagged_fields(data, value)
    assert assert_fast_agrees(encoded) in (None, value)
    assert decode_value(GroupMetadataKey("g"), encoded) == value


def with_tagged_fields(data: st.DataObject, value: GroupMetadataValue) -> bytes:
    """A v4 `value` encoded with tagged fields in its members and in itself."""
    members = []
    for m in value.members:
        members.append(
            w_compact_string(m.member_id)
            + w_compact_nullable_string(m.group_instance_id)
            + w_compact_string(m.client_id)
            + w_compact_string(m.client_host)
            + I32.pack(m.rebalance_timeout)
            + I32.pack(m.session_timeout)
            + w_compact_bytes(m.subscription)
            + w_compact_bytes(m.assignment)
            + w_tagged(data.draw(TAGGED))
        )
    return (
        b"\x00\x04"
        + w_compact_string(value.protocol_type)
        + I32.pack(value.generation)
        + w_compact_nullable_string(value.protocol)
        + w_compact_nullable_string(value.leader)
        + I64.pack(value.current_state_timestamp_ms)
        + w_compact_array(members, len(members))
        + w_tagged(data.draw(TAGGED))
    )


def protocol_layout(value: bytes, version: int) -> GroupMetadataValue | CorruptRecordError:
    """GroupMetadataValue v0-v4 as the Kafka protocol lays it out, read field by field with
    `Reader`: the oracle of the codec's one member decoder (`_classic_members_at`)."""
    r = Reader(value, 2)
    flexible = version >= 4
    text = r.compact_string if flexible else r.string
    nullable = r.compact_nullable_string if flexible else r.nullable_string
    blob = r.compact_bytes if flexible else r.bytes_
    try:
        head = (text(), r.int32(), nullable(), nullable(), r.int64() if version >= 2 else -1)
        members = []
        for _ in range(r.compact_array_len() if flexible else r.array_len()):
            # In the layout's order: member id, group instance id (v3+), client id, client host,
            # rebalance timeout (v1+), session timeout, subscription, assignment.
            fields = (
                text(),
                nullable() if version >= 3 else None,
                text(),
                text(),
                r.int32() if version >= 1 else -1,
                r.int32(),
                blob(),
                blob(),
            )
            if flexible:
                r.skip_tagged_fields()
            members.append(ClassicMember(*fields))
        if flexible:
            r.skip_tagged_fields()
    except CorruptRecordError as exc:
        return exc
    return GroupMetadataValue(*head, tuple(members), version)


@settings(max_examples=600)
@given(st.data())
def test_the_member_decoder_reads_the_protocol_layout(data: st.DataObject) -> None:
    """Members of every shape (long names and blobs, tagged fields), whole or mangled: what the
    codec decodes (or refuses as corrupt) is what the protocol's layout gives (or refuses)."""
    value = data.draw(COMMON | ANY_SIZE)
    tagged = value.version == 4 and data.draw(st.booleans())
    encoded = with_tagged_fields(data, value) if tagged else encode_value(value)
    if data.draw(st.booleans()):
        encoded = mangled(data, encoded)
    version = int.from_bytes(encoded[:2], "big", signed=True) if len(encoded) >= 2 else -1
    if version not in range(5):
        return
    expected, decoded = protocol_layout(encoded, version), general(encoded, version)
    if isinstance(expected, CorruptRecordError):
        assert isinstance(decoded, CorruptRecordError)
    else:
        assert decoded == expected


@settings(max_examples=60)
@given(COMMON | ANY_SIZE.filter(lambda v: len(encode_value(v)) < 2_000))
def test_every_truncation_and_every_edge_byte_is_handed_over_or_equal_the_codec(
    value: GroupMetadataValue,
) -> None:
    encoded = encode_value(value)
    for cut in range(len(encoded)):
        assert_fast_agrees(encoded[:cut])
    for position in range(2, len(encoded)):
        for byte in (0, 1, 0x7F, 0x80, 0xFF):
            assert_fast_agrees(encoded[:position] + bytes([byte]) + encoded[position + 1 :])
