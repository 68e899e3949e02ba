"""Encode `__consumer_offsets` records: the exact inverse of `codec` for every type and version.

Used by tests (round trips), benchmarks and synthetic-data generators; never by the operator's
runtime paths (groupwarden only ever reads this topic).
"""

from __future__ import annotations

import struct
from typing import Final

from groupwarden.offsets_log._wire import (
    I16,
    I32,
    I64,
    uvarint,
    w_array,
    w_bytes,
    w_compact_array,
    w_compact_bytes,
    w_compact_nullable_string,
    w_compact_string,
    w_nullable_string,
    w_string,
    w_tagged,
)
from groupwarden.offsets_log.records import (
    ClassicMember,
    ClassicMemberMetadata,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
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
    UnknownRecord,
)
from groupwarden.offsets_log.share_state import (
    ShareSnapshotValue,
    ShareStateBatch,
    ShareStateKey,
    ShareUpdateValue,
)

_OC_V3: Final = struct.Struct(">hqih")
_I8: Final = struct.Struct(">b")


def encode_key(key: RecordKey) -> bytes:
    if isinstance(key, OffsetCommitKey):
        return I16.pack(key.record_type) + w_string(key.group) + w_string(key.topic) + I32.pack(key.partition)
    if isinstance(key, GroupMetadataKey):
        return I16.pack(2) + w_string(key.group)
    if isinstance(key, ConsumerGroupMetadataKey):
        return I16.pack(3) + w_string(key.group)
    if isinstance(key, ConsumerGroupMemberMetadataKey):
        return I16.pack(5) + w_string(key.group) + w_string(key.member_id)
    if isinstance(key, ConsumerGroupRegularExpressionKey):
        return I16.pack(16) + w_string(key.group) + w_string(key.regex)
    if isinstance(key, StreamsGroupTopologyKey):
        return I16.pack(23) + w_string(key.group)
    rest = b"" if key.member_id is None else w_string(key.member_id)
    return encode_unknown_key(key.record_type, key.group, rest)


def encode_unknown_key(record_type: int, group: str | None, rest: bytes = b"") -> bytes:
    """A key of a type this codec does not decode: type, group id (if any), then `rest`."""
    return I16.pack(record_type) + (b"" if group is None else w_string(group)) + rest


def encode_value(value: RecordValue) -> bytes:
    """Encode with `value.version`; fields the version does not carry are dropped."""
    if isinstance(value, OffsetCommitValue):
        return encode_offset_commit_value(value)
    if isinstance(value, GroupMetadataValue):
        return _group_metadata(value)
    if isinstance(value, ConsumerGroupMetadataValue):
        tagged = []
        if value.metadata_hash != 0:
            tagged.append((0, I64.pack(value.metadata_hash)))
        if value.creation_time_ms != -1:
            tagged.append((1, I64.pack(value.creation_time_ms)))
        return I16.pack(value.version) + I32.pack(value.epoch) + w_tagged(tagged)
    if isinstance(value, ConsumerGroupMemberMetadataValue):
        return _member_metadata(value)
    if isinstance(value, ConsumerGroupRegularExpressionValue):
        return (
            I16.pack(value.version)
            + w_compact_array((w_compact_string(t) for t in value.topics), len(value.topics))
            + I64.pack(value.resolution_version)
            + I64.pack(value.timestamp_ms)
            + w_tagged(())
        )
    if isinstance(value, StreamsGroupTopologyValue):
        subtopologies = [_subtopology(sub) for sub in value.subtopologies]
        return (
            I16.pack(value.version)
            + I32.pack(value.epoch)
            + w_compact_array(subtopologies, len(subtopologies))
            + w_tagged(())
        )
    if isinstance(value, UnknownRecord):
        raise ValueError("an UnknownRecord has no fields to encode")
    raise TypeError(f"not a record value: {value!r}")


def encode_offset_commit_value(value: OffsetCommitValue) -> bytes:
    version = value.version
    if version == 3:  # the common case, kept cheap for data generators
        meta = value.metadata.encode()
        return (
            _OC_V3.pack(3, value.offset, value.leader_epoch, len(meta))
            + meta
            + I64.pack(value.commit_timestamp_ms)
        )
    head = I16.pack(version) + I64.pack(value.offset)
    if version >= 3:
        head += I32.pack(value.leader_epoch)
    if version >= 4:
        tagged = [] if value.topic_id is None else [(0, value.topic_id.bytes)]
        return (
            head + w_compact_string(value.metadata) + I64.pack(value.commit_timestamp_ms) + w_tagged(tagged)
        )
    body = head + w_string(value.metadata) + I64.pack(value.commit_timestamp_ms)
    if version == 1:
        body += I64.pack(value.expire_timestamp_ms)
    return body


def _group_metadata(value: GroupMetadataValue) -> bytes:
    version = value.version
    flexible = version >= 4
    text = w_compact_string if flexible else w_string
    nullable = w_compact_nullable_string if flexible else w_nullable_string
    out = [I16.pack(version), text(value.protocol_type), I32.pack(value.generation)]
    out += [nullable(value.protocol), nullable(value.leader)]
    if version >= 2:
        out.append(I64.pack(value.current_state_timestamp_ms))
    members = [_classic_member(m, version) for m in value.members]
    out.append(w_compact_array(members, len(members)) if flexible else w_array(members, len(members)))
    if flexible:
        out.append(w_tagged(()))
    return b"".join(out)


def _classic_member(member: ClassicMember, version: int) -> bytes:
    flexible = version >= 4
    text = w_compact_string if flexible else w_string
    blob = w_compact_bytes if flexible else w_bytes
    out = [text(member.member_id)]
    if version >= 3:
        out.append((w_compact_nullable_string if flexible else w_nullable_string)(member.group_instance_id))
    out += [text(member.client_id), text(member.client_host)]
    if version >= 1:
        out.append(I32.pack(member.rebalance_timeout))
    out += [I32.pack(member.session_timeout), blob(member.subscription), blob(member.assignment)]
    if flexible:
        out.append(w_tagged(()))
    return b"".join(out)


def _member_metadata(value: ConsumerGroupMemberMetadataValue) -> bytes:
    names = value.subscribed_topic_names
    out = [
        I16.pack(value.version),
        w_compact_nullable_string(value.instance_id),
        w_compact_nullable_string(value.rack_id),
        w_compact_string(value.client_id),
        w_compact_string(value.client_host),
        w_compact_array((w_compact_string(n) for n in names), len(names)),
        w_compact_nullable_string(value.subscribed_topic_regex),
        I32.pack(value.rebalance_timeout_ms),
        w_compact_nullable_string(value.server_assignor),
    ]
    classic = value.classic_member_metadata
    out.append(w_tagged([] if classic is None else [(0, _classic_member_metadata(classic))]))
    return b"".join(out)


def _compact_strings(values: tuple[str, ...]) -> bytes:
    return w_compact_array((w_compact_string(v) for v in values), len(values))


def _topic_info(info: StreamsTopicInfo) -> bytes:
    configs = [w_compact_string(k) + w_compact_string(v) + w_tagged(()) for k, v in info.configs]
    return (
        w_compact_string(info.name)
        + I32.pack(info.partitions)
        + I16.pack(info.replication_factor)
        + w_compact_array(configs, len(configs))
        + w_tagged(())
    )


def _copartition_group(group: StreamsCopartitionGroup) -> bytes:
    indexes = (group.source_topics, group.source_topic_regex, group.repartition_source_topics)
    return b"".join(
        w_compact_array((I16.pack(i) for i in values), len(values)) for values in indexes
    ) + w_tagged(())


def _subtopology(sub: StreamsSubtopology) -> bytes:
    changelogs = [_topic_info(t) for t in sub.state_changelog_topics]
    repartition_sources = [_topic_info(t) for t in sub.repartition_source_topics]
    copartition = [_copartition_group(g) for g in sub.copartition_groups]
    return (
        w_compact_string(sub.subtopology_id)
        + _compact_strings(sub.source_topics)
        + _compact_strings(sub.source_topic_regex)
        + w_compact_array(changelogs, len(changelogs))
        + _compact_strings(sub.repartition_sink_topics)
        + w_compact_array(repartition_sources, len(repartition_sources))
        + w_compact_array(copartition, len(copartition))
        + w_tagged(())
    )


def _classic_member_metadata(classic: ClassicMemberMetadata) -> bytes:
    protocols = [
        w_compact_string(p.name) + w_compact_bytes(p.metadata) + w_tagged(())
        for p in classic.supported_protocols
    ]
    # Presence marker of a tagged nullable struct (see the Java generator), then the struct.
    return (
        uvarint(1)
        + I32.pack(classic.session_timeout_ms)
        + w_compact_array(protocols, len(protocols))
        + w_tagged(())
    )


def encode_consumer_protocol_subscription(
    topics: list[str] | tuple[str, ...], version: int = 0, user_data: bytes | None = None
) -> bytes:
    """A ConsumerProtocolSubscription (v0 layout, plus empty v1+ fields when version >= 1)."""
    out = [I16.pack(version), w_array((w_string(t) for t in topics), len(topics))]
    out.append(I32.pack(-1) if user_data is None else w_bytes(user_data))
    if version >= 1:
        out.append(I32.pack(0))  # ownedPartitions
    if version >= 2:
        out.append(I32.pack(-1))  # generationId
    if version >= 3:
        out.append(I16.pack(-1))  # rackId (null)
    return b"".join(out)


# ---------------------------------------------------------------------------------------------
# __share_group_state (offsets_log.share_state)
# ---------------------------------------------------------------------------------------------


def encode_share_state_key(key: ShareStateKey) -> bytes:
    return I16.pack(key.record_type) + w_string(key.group) + key.topic_id.bytes + I32.pack(key.partition)


def _share_batches(batches: tuple[ShareStateBatch, ...]) -> bytes:
    encoded = [
        I64.pack(b.first_offset)
        + I64.pack(b.last_offset)
        + _I8.pack(b.delivery_state)
        + I16.pack(b.delivery_count)
        + w_tagged(())
        for b in batches
    ]
    return w_compact_array(encoded, len(encoded))


def encode_share_state_value(value: ShareSnapshotValue | ShareUpdateValue) -> bytes:
    tagged = w_tagged(
        [] if value.delivery_complete_count == -1 else [(0, I32.pack(value.delivery_complete_count))]
    )
    if isinstance(value, ShareSnapshotValue):
        return (
            I16.pack(value.version)
            + I32.pack(value.snapshot_epoch)
            + I32.pack(value.state_epoch)
            + I32.pack(value.leader_epoch)
            + I64.pack(value.start_offset)
            + I64.pack(value.create_timestamp_ms)
            + I64.pack(value.write_timestamp_ms)
            + _share_batches(value.state_batches)
            + tagged
        )
    return (
        I16.pack(value.version)
        + I32.pack(value.snapshot_epoch)
        + I32.pack(value.leader_epoch)
        + I64.pack(value.start_offset)
        + _share_batches(value.state_batches)
        + tagged
    )
