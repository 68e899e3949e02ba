"""Decode `__consumer_offsets` keys and values (pure functions on bytes; standard library only).

Two layers:
- `decode_key` / `decode_value` return typed records for every type and version we know, an
  `UnknownRecordKey` / `UnknownRecord` for anything else (never an exception), and raise
  `CorruptRecordError` for truncated or garbage bytes.
- `read_offset_commit_key` / `read_offset_commit_value` are the allocation-light fast path for
  OffsetCommit records (the vast majority of the log), returning plain tuples. The ledger and a
  Spark job use them directly; the typed functions are built on them.

Like Kafka's own reader, bytes after the last known field of a message are ignored.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

from groupwarden.offsets_log._wire import I16, I32, I64, MAX_STRING, Buffer, Reader
from groupwarden.offsets_log.records import (
    CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSIONS,
    CONSUMER_GROUP_METADATA_VALUE_VERSIONS,
    CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSIONS,
    GROUP_METADATA_VALUE_VERSIONS,
    MAX_KNOWN_RECORD_TYPE,
    MODERN_MEMBER_TYPES,
    STREAMS_GROUP_TOPOLOGY_VALUE_VERSIONS,
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
    RecordKey,
    RecordValue,
    StreamsCopartitionGroup,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    StreamsTopicInfo,
    Tombstone,
    UnknownRecord,
    UnknownRecordKey,
)

# (offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms, topic_id bytes|None)
OffsetCommitFields = tuple[int, int, str, int, int, bytes | None]

_ZERO_UUID: Final = bytes(16)
_HEAD_V0: Final = struct.Struct(">qh")  # offset, metadata length (v0, v1, v2)
_HEAD_V3: Final = struct.Struct(">qih")  # offset, leaderEpoch, metadata length
_HEAD_V4: Final = struct.Struct(">qi")  # offset, leaderEpoch (metadata is a compact string)
_TWO_I64: Final = struct.Struct(">qq")
_TWO_I32: Final = struct.Struct(">ii")
_MEMBER_INTS_V1: Final = struct.Struct(">iii")  # rebalance timeout, session timeout, subscription length
_I16_AT = I16.unpack_from
_I32_AT = I32.unpack_from
_I64_AT = I64.unpack_from
_DECODE_ERRORS: Final = (struct.error, UnicodeDecodeError, IndexError)


def record_type(key: Buffer) -> int:
    """The int16 record type of a key."""
    if len(key) < 2:
        raise CorruptRecordError("key shorter than its record type")
    return int(_I16_AT(key, 0)[0])


def value_version(value: Buffer) -> int:
    """The int16 version prefix of a non-null value."""
    if len(value) < 2:
        raise CorruptRecordError("value shorter than its version")
    return int(_I16_AT(value, 0)[0])


# ---------------------------------------------------------------------------------------------
# OffsetCommit fast path
# ---------------------------------------------------------------------------------------------


def read_offset_commit_key(key: Buffer) -> tuple[str, str, int]:
    """(group, topic, partition) of a type 0/1 key (the caller has checked the type)."""
    try:
        group_len = _I16_AT(key, 2)[0]
        if group_len < 0:
            raise CorruptRecordError("null group in offset commit key")
        group_end = 4 + group_len
        group = str(key[4:group_end], "utf-8")
        topic_len = _I16_AT(key, group_end)[0]
        if topic_len < 0:
            raise CorruptRecordError("null topic in offset commit key")
        topic_end = group_end + 2 + topic_len
        topic = str(key[group_end + 2 : topic_end], "utf-8")
        # Each slice is followed by a bounds-checked read at its end, so truncation cannot slip by.
        partition = _I32_AT(key, topic_end)[0]
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"bad offset commit key: {exc}") from exc
    return group, topic, partition


def read_offset_commit_value(value: Buffer) -> OffsetCommitFields | None:
    """The fields of an OffsetCommit value, or None for a version this codec does not know."""
    try:
        version = _I16_AT(value, 0)[0]
        if version == 3:
            offset, leader_epoch, meta_len = _HEAD_V3.unpack_from(value, 2)
            if meta_len < 0:
                raise CorruptRecordError("null metadata")
            meta_end = 16 + meta_len
            metadata = str(value[16:meta_end], "utf-8") if meta_len else ""
            return offset, leader_epoch, metadata, _I64_AT(value, meta_end)[0], -1, None
        if version == 4:
            return _read_offset_commit_v4(value)
        if version in (0, 1, 2):
            offset, meta_len = _HEAD_V0.unpack_from(value, 2)
            if meta_len < 0:
                raise CorruptRecordError("null metadata")
            meta_end = 12 + meta_len
            metadata = str(value[12:meta_end], "utf-8") if meta_len else ""
            if version == 1:
                commit, expire = _TWO_I64.unpack_from(value, meta_end)
                return offset, -1, metadata, commit, expire, None
            return offset, -1, metadata, _I64_AT(value, meta_end)[0], -1, None
        return None
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"bad offset commit value: {exc}") from exc


def _read_offset_commit_v4(value: Buffer) -> OffsetCommitFields:
    # Fast path for what brokers write: a metadata string under 127 bytes, then either no tagged
    # field or only the TopicId (1 field, tag 0, size 16). Anything else takes the general path.
    offset, leader_epoch = _HEAD_V4.unpack_from(value, 2)
    length_plus_one = value[14]
    if 0 < length_plus_one < 0x80:
        meta_end = 14 + length_plus_one
        metadata = str(value[15:meta_end], "utf-8") if length_plus_one > 1 else ""
        commit = _I64_AT(value, meta_end)[0]
        tags = meta_end + 8
        n_tags = value[tags]
        if n_tags == 0:
            return offset, leader_epoch, metadata, commit, -1, None
        if n_tags == 1 and value[tags + 1] == 0 and value[tags + 2] == 16 and len(value) >= tags + 19:
            raw = bytes(value[tags + 3 : tags + 19])
            return offset, leader_epoch, metadata, commit, -1, None if raw == _ZERO_UUID else raw
    return _read_offset_commit_v4_general(value)


def _read_offset_commit_v4_general(value: Buffer) -> OffsetCommitFields:
    reader = Reader(value, 2)
    offset = reader.int64()
    leader_epoch = reader.int32()
    metadata = reader.compact_string()
    commit = reader.int64()
    topic_id: bytes | None = None
    tagged = reader.tagged_fields()
    field = tagged.get(0)
    if field is not None:
        if field.remaining() != 16:
            raise CorruptRecordError("tagged TopicId is not 16 bytes")
        raw = bytes(field.buf)
        topic_id = None if raw == _ZERO_UUID else raw
    return offset, leader_epoch, metadata, commit, -1, topic_id


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


def decode_key(key: Buffer) -> RecordKey:
    """Decode a record key. Unknown types give an UnknownRecordKey; bad bytes raise."""
    rtype = record_type(key)
    if rtype in (0, 1):
        group, topic, partition = read_offset_commit_key(key)
        return OffsetCommitKey(group, topic, partition, rtype)
    if 2 <= rtype <= MAX_KNOWN_RECORD_TYPE:
        two = rtype in (5, 16) or rtype in MODERN_MEMBER_TYPES  # group, then a member or regex
        strings = _key_strings_fast(key, 2 if two else 1)
        if strings is None:  # the definition reads them (and raises)
            reader = Reader(key, 2)
            strings = [reader.string() for _ in range(2 if two else 1)]
        group = strings[0]
        if rtype == 2:
            return GroupMetadataKey(group)
        if rtype == 3:
            return ConsumerGroupMetadataKey(group)
        if rtype == 5:
            return ConsumerGroupMemberMetadataKey(group, strings[1])
        if rtype == 16:
            return ConsumerGroupRegularExpressionKey(group, strings[1])
        if rtype == 23:
            return StreamsGroupTopologyKey(group)
        if two:
            return UnknownRecordKey(rtype, group, strings[1])
        return UnknownRecordKey(rtype, group)
    # A type newer than this codec: most likely still group-first, but do not insist.
    reader = Reader(key, 2)
    try:
        return UnknownRecordKey(rtype, reader.string())
    except CorruptRecordError:
        return UnknownRecordKey(rtype, None)


def _key_strings_fast(key: Buffer, count: int) -> list[str] | None:
    """The first `count` strings after a key's type, as `Reader.string` reads them, with plain
    offsets (every group record's key is read once or more per replay); None where `Reader` would
    raise (null, truncated, not UTF-8): it then reads them itself."""
    try:
        return _plain_strings(key, 2, count)
    except _DECODE_ERRORS:
        return None


def _plain_strings(data: Buffer, pos: int, count: int) -> list[str] | None:
    """`count` int16-length strings from `pos`, read with plain offsets; None for a null or one
    past the end. A string that is not UTF-8 raises (the callers answer None for it)."""
    end = len(data)
    strings = []
    for _ in range(count):
        n = _I16_AT(data, pos)[0]
        pos += 2
        if n < 0 or pos + n > end:
            return None
        strings.append(str(data[pos : pos + n], "utf-8"))
        pos += n
    return strings


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


def decode_value(key: RecordKey, value: Buffer | None) -> RecordValue | Tombstone:
    """Decode the value of a record whose key is `key`. None is a tombstone."""
    if value is None:
        return TOMBSTONE
    version = value_version(value)
    if isinstance(key, OffsetCommitKey):
        fields = read_offset_commit_value(value)
        if fields is None:
            return UnknownRecord(key.record_type, version)
        offset, leader_epoch, metadata, commit, expire, topic_id = fields
        tid = None if topic_id is None else uuid.UUID(bytes=topic_id)
        return OffsetCommitValue(offset, leader_epoch, metadata, commit, expire, tid, version)
    try:
        if isinstance(key, GroupMetadataKey):
            if version in GROUP_METADATA_VALUE_VERSIONS:
                fast = read_group_metadata_fast(value, version)
                return fast if fast is not None else _read_group_metadata(Reader(value, 2), version)
            return UnknownRecord(2, version)
        if isinstance(key, ConsumerGroupMetadataKey):
            if version in CONSUMER_GROUP_METADATA_VALUE_VERSIONS:
                return _read_consumer_group_metadata(Reader(value, 2), version)
            return UnknownRecord(3, version)
        if isinstance(key, ConsumerGroupMemberMetadataKey):
            if version in CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSIONS:
                return _read_member_metadata(Reader(value, 2), version)
            return UnknownRecord(5, version)
        if isinstance(key, ConsumerGroupRegularExpressionKey):
            if version in CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSIONS:
                return _read_regular_expression(Reader(value, 2), version)
            return UnknownRecord(16, version)
        if isinstance(key, StreamsGroupTopologyKey):
            if version in STREAMS_GROUP_TOPOLOGY_VALUE_VERSIONS:
                return _read_streams_topology(Reader(value, 2), version)
            return UnknownRecord(23, version)
    except _DECODE_ERRORS as exc:
        raise CorruptRecordError(f"bad value: {exc}") from exc
    return UnknownRecord(key.record_type, version)


def decode_record(key: Buffer, value: Buffer | None) -> tuple[RecordKey, RecordValue | Tombstone]:
    decoded_key = decode_key(key)
    return decoded_key, decode_value(decoded_key, value)


def _read_group_metadata(r: Reader, version: int) -> GroupMetadataValue:
    flexible = version >= 4
    text = r.compact_string if flexible else r.string
    nullable = r.compact_nullable_string if flexible else r.nullable_string
    protocol_type = text()
    generation = r.int32()
    protocol = nullable()
    leader = nullable()
    current_state_timestamp = r.int64() if version >= 2 else -1
    count = r.compact_array_len() if flexible else r.array_len()
    members, r.pos = _classic_members_at(r.buf, r.pos, count, version)
    if flexible:
        r.skip_tagged_fields()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members), version
    )


def _classic_members_at(buf: Buffer, pos: int, count: int, version: int) -> tuple[list[ClassicMember], int]:
    """The `count` members of a GroupMetadata value that start at `pos`, and where they end: the
    one decoder of the member layout, for the definition and both fast paths. Each: member id,
    group instance id (v3+, the only nullable field), client id, client host, rebalance timeout
    (v1+), session timeout, subscription, assignment; int16/int32 lengths up to v3, compact ones
    and the member's tagged fields in v4. Read with plain offsets (a length that fits one byte in
    one step, a longer varint and tagged fields by `Reader`); bytes that are not members raise
    what `Reader` raises, CorruptRecordError, or one of `_DECODE_ERRORS` (which `decode_value`
    makes one)."""
    end = len(buf)
    flexible = version >= 4
    field_count = 4 if version >= 3 else 3  # member, [instance,] client, host
    members = []
    for _ in range(count):
        texts: list[str | None] = []
        for _ in range(field_count):
            if flexible:
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:  # (a length of one byte is below Kafka's limit for a string)
                    n, pos = _uvarint_at(buf, pos)
                    if n - 1 > MAX_STRING:
                        raise CorruptRecordError(f"member string of {n - 1} bytes exceeds {MAX_STRING}")
                n -= 1
            else:
                n = _I16_AT(buf, pos)[0]
                pos += 2
            if n < 0:
                texts.append(None)
                continue
            if pos + n > end:
                raise CorruptRecordError(f"member string of {n} bytes at {pos}, {end - pos} left")
            texts.append(str(buf[pos : pos + n], "utf-8"))
            pos += n
        if flexible:
            rebalance_timeout, session_timeout = _TWO_I32.unpack_from(buf, pos)
            pos += 8
        elif version >= 1:
            rebalance_timeout, session_timeout, n = _MEMBER_INTS_V1.unpack_from(buf, pos)
            pos += 12
        else:
            rebalance_timeout = -1
            session_timeout, n = _TWO_I32.unpack_from(buf, pos)
            pos += 8
        blobs = []
        for blob in range(2):  # subscription, assignment
            if flexible:
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = _uvarint_at(buf, pos)
                n -= 1
            elif blob:  # (the subscription's length came with the timeouts)
                n = _I32_AT(buf, pos)[0]
                pos += 4
            if n < 0 or pos + n > end:
                raise CorruptRecordError(f"member bytes of {n} at {pos}, {end - pos} left")
            blobs.append(bytes(buf[pos : pos + n]))
            pos += n
        if flexible:
            if pos < end and buf[pos] == 0:  # no tagged field: what brokers write
                pos += 1
            else:
                tagged = Reader(buf, pos)
                tagged.skip_tagged_fields()
                pos = tagged.pos
        if field_count == 3:
            texts.insert(1, None)
        member_id, instance_id, client_id, client_host = texts
        if member_id is None or client_id is None or client_host is None:
            raise CorruptRecordError("null member id, client id or client host")
        members.append(
            ClassicMember(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                blobs[0],
                blobs[1],
            )
        )
    return members, pos


def _uvarint_at(buf: Buffer, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos` (as `Reader.uvarint` reads it) and the position after it."""
    reader = Reader(buf, pos)
    return reader.uvarint(), reader.pos


# ---------------------------------------------------------------------------------------------
# GroupMetadata fast path
# ---------------------------------------------------------------------------------------------


def read_group_metadata_fast(value: Buffer, version: int) -> GroupMetadataValue | None:
    """The GroupMetadata value `_read_group_metadata` reads, for the shapes brokers write (every
    version; flexible v4 with 1-byte lengths and no tagged fields in the value's own fields), read
    with plain offsets instead of a `Reader` (the classic groups' records are most of the
    non-commit records a fleet audit replays); the members by the definition's own member decoder
    (`_classic_members_at`). None for anything else (null or truncated fields, longer varints,
    tagged fields, bad UTF-8, a member that does not decode): the caller then runs
    `_read_group_metadata`, the definition, which decodes or raises. A property test asserts that
    every value read here equals its answer."""
    try:
        if version >= 4:
            return _group_metadata_flexible(value, version)
        return _group_metadata_classic(value, version)
    except (CorruptRecordError, *_DECODE_ERRORS):  # a member's (`_classic_members_at`)
        return None


def _group_metadata_classic(buf: Buffer, version: int) -> GroupMetadataValue | None:
    end = len(buf)
    n = _I16_AT(buf, 2)[0]
    pos = 4 + n
    if n < 0 or pos > end:
        return None
    protocol_type = str(buf[4:pos], "utf-8")
    generation = _I32_AT(buf, pos)[0]
    pos += 4
    nullable: list[str | None] = []
    for _ in range(2):  # protocol, leader
        n = _I16_AT(buf, pos)[0]
        pos += 2
        if n < 0:
            nullable.append(None)
            continue
        if pos + n > end:
            return None
        nullable.append(str(buf[pos : pos + n], "utf-8"))
        pos += n
    timestamp = -1
    if version >= 2:
        timestamp = _I64_AT(buf, pos)[0]
        pos += 8
    count = _I32_AT(buf, pos)[0]
    pos += 4
    if count < 0 or count > end - pos:
        return None
    members, pos = _classic_members_at(buf, pos, count, version)
    return GroupMetadataValue(
        protocol_type, generation, nullable[0], nullable[1], timestamp, tuple(members), version
    )


def _group_metadata_flexible(buf: Buffer, version: int) -> GroupMetadataValue | None:
    # Every compact length is a uvarint of length + 1: the value's strings and member count of one
    # byte (longer varints are handed over; the members are `_classic_members_at`'s). IndexError
    # past the end is caught by the caller.
    end = len(buf)
    n = buf[2] - 1
    pos = 3 + n
    if not 0 <= n < 0x7F or pos > end:  # null, or a longer varint
        return None
    protocol_type = str(buf[3:pos], "utf-8")
    generation = _I32_AT(buf, pos)[0]
    pos += 4
    texts: list[str | None] = []
    for _ in range(2):  # protocol, leader
        n = buf[pos]
        if n >= 0x80:
            return None
        pos += 1
        if n == 0:
            texts.append(None)
            continue
        n -= 1
        if pos + n > end:
            return None
        texts.append(str(buf[pos : pos + n], "utf-8"))
        pos += n
    timestamp = _I64_AT(buf, pos)[0]
    pos += 8
    count = buf[pos]
    if count >= 0x80 or count == 0:
        return None
    pos += 1
    count -= 1
    if count > end - pos:
        return None
    members, pos = _classic_members_at(buf, pos, count, version)
    if buf[pos] != 0:  # the value's tagged fields
        return None
    return GroupMetadataValue(
        protocol_type, generation, texts[0], texts[1], timestamp, tuple(members), version
    )


def _read_consumer_group_metadata(r: Reader, version: int) -> ConsumerGroupMetadataValue:
    epoch = r.int32()
    tagged = r.tagged_fields()
    metadata_hash = _tagged_int64(tagged.get(0), 0)
    creation_time = _tagged_int64(tagged.get(1), -1)
    return ConsumerGroupMetadataValue(epoch, metadata_hash, creation_time, version)


def _tagged_int64(field: Reader | None, default: int) -> int:
    if field is None:
        return default
    if field.remaining() != 8:
        raise CorruptRecordError("tagged int64 is not 8 bytes")
    return field.int64()


def _read_member_metadata(r: Reader, version: int) -> ConsumerGroupMemberMetadataValue:
    instance_id = r.compact_nullable_string()
    rack_id = r.compact_nullable_string()
    client_id = r.compact_string()
    client_host = r.compact_string()
    topic_names = tuple(r.compact_string() for _ in range(r.compact_array_len()))
    regex = r.compact_nullable_string()
    rebalance_timeout = r.int32()
    server_assignor = r.compact_nullable_string()
    classic: ClassicMemberMetadata | None = None
    field = r.tagged_fields().get(0)
    # A tagged nullable struct: uvarint presence marker (<= 0 null), then the struct.
    if field is not None and field.uvarint() > 0:
        session_timeout = field.int32()
        protocols = []
        for _ in range(field.compact_array_len()):
            name = field.compact_string()
            metadata = field.compact_bytes()
            field.skip_tagged_fields()
            protocols.append(ClassicProtocol(name, metadata))
        field.skip_tagged_fields()
        classic = ClassicMemberMetadata(session_timeout, tuple(protocols))
    return ConsumerGroupMemberMetadataValue(
        instance_id,
        rack_id,
        client_id,
        client_host,
        topic_names,
        regex,
        rebalance_timeout,
        server_assignor,
        classic,
        version,
    )


def _read_regular_expression(r: Reader, version: int) -> ConsumerGroupRegularExpressionValue:
    topics = tuple(r.compact_string() for _ in range(r.compact_array_len()))
    resolution_version = r.int64()
    timestamp = r.int64()
    r.skip_tagged_fields()
    return ConsumerGroupRegularExpressionValue(topics, resolution_version, timestamp, version)


def _read_streams_topology(r: Reader, version: int) -> StreamsGroupTopologyValue:
    epoch = r.int32()
    subtopologies = tuple(_read_subtopology(r) for _ in range(r.compact_array_len()))
    r.skip_tagged_fields()
    return StreamsGroupTopologyValue(epoch, subtopologies, version)


def _read_subtopology(r: Reader) -> StreamsSubtopology:
    subtopology_id = r.compact_string()
    source_topics = _compact_strings(r)
    source_topic_regex = _compact_strings(r)
    changelogs = tuple(_read_topic_info(r) for _ in range(r.compact_array_len()))
    repartition_sinks = _compact_strings(r)
    repartition_sources = tuple(_read_topic_info(r) for _ in range(r.compact_array_len()))
    copartition = tuple(_read_copartition_group(r) for _ in range(r.compact_array_len()))
    r.skip_tagged_fields()
    return StreamsSubtopology(
        subtopology_id,
        source_topics,
        source_topic_regex,
        changelogs,
        repartition_sinks,
        repartition_sources,
        copartition,
    )


def _read_topic_info(r: Reader) -> StreamsTopicInfo:
    name = r.compact_string()
    partitions = r.int32()
    replication_factor = r.int16()
    configs = []
    for _ in range(r.compact_array_len()):
        config_key = r.compact_string()
        config_value = r.compact_string()
        r.skip_tagged_fields()
        configs.append((config_key, config_value))
    r.skip_tagged_fields()
    return StreamsTopicInfo(name, partitions, replication_factor, tuple(configs))


def _read_copartition_group(r: Reader) -> StreamsCopartitionGroup:
    groups = tuple(tuple(r.int16() for _ in range(r.compact_array_len())) for _ in range(3))
    r.skip_tagged_fields()
    return StreamsCopartitionGroup(*groups)


def _compact_strings(r: Reader) -> tuple[str, ...]:
    return tuple(r.compact_string() for _ in range(r.compact_array_len()))


# ---------------------------------------------------------------------------------------------
# Classic consumer protocol
# ---------------------------------------------------------------------------------------------


def parse_consumer_protocol_subscription(data: Buffer | None) -> frozenset[str] | None:
    """Topics of a classic `consumer` member's ConsumerProtocolSubscription, None if undecodable.

    Layout (never flexible): int16 version, [string] topics, then userData, ownedPartitions
    (v1+), generationId (v2+), rackId (v3+). Kafka parses newer versions with the current format,
    so only the version's sign and the topics prefix matter; trailing bytes are ignored.
    """
    if not data:
        return None
    fast = _subscription_topics_fast(data)
    return fast if fast is not None else _subscription_topics(data)


def _subscription_topics(data: Buffer) -> frozenset[str] | None:
    """`parse_consumer_protocol_subscription` with a `Reader`: the definition."""
    try:
        reader = Reader(data)
        if reader.int16() < 0:
            return None
        return frozenset(reader.string() for _ in range(reader.array_len()))
    except (CorruptRecordError, *_DECODE_ERRORS):
        return None


_SUBSCRIPTION_HEAD: Final = struct.Struct(">hi")  # version, topic count


def _subscription_topics_fast(data: Buffer) -> frozenset[str] | None:
    """The topics `parse_consumer_protocol_subscription` reads, for a well-formed prefix (a
    non-negative version, every topic present and UTF-8), read with plain offsets; None for
    anything else, which the general reader then answers."""
    try:
        version, count = _SUBSCRIPTION_HEAD.unpack_from(data, 0)
        end = len(data)
        if version < 0 or count < 0 or count > end - 6:
            return None
        topics = _plain_strings(data, 6, count)
        return None if topics is None else frozenset(topics)
    except _DECODE_ERRORS:
        return None
