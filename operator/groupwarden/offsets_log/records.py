"""Typed `__consumer_offsets` records, as defined by Kafka's group-coordinator message schemas.

Source of truth: `group-coordinator/src/main/resources/common/message/*.json` in apache/kafka.
A record key is `int16 record type` + the key message (never flexible); a record value is
`int16 value version` + the value message; a null value is a tombstone (`CoordinatorRecordSerde`).

Optional fields that a version does not carry take Kafka's schema default (`-1` for timestamps and
epochs, `None` for nullable strings), so a decoded value looks the same whatever version wrote it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Final


class CorruptRecordError(ValueError):
    """Bytes that do not parse as the record they claim to be (truncated or garbage)."""


class RecordType(IntEnum):
    """The int16 prefix of a key (`apiKey` of the `coordinator-key` schemas; Kafka 4.x)."""

    LEGACY_OFFSET_COMMIT = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_PARTITION_METADATA = 9
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16
    STREAMS_GROUP_METADATA = 17
    STREAMS_GROUP_PARTITION_METADATA = 18
    STREAMS_GROUP_MEMBER_METADATA = 19
    STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = 20
    STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = 21
    STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = 22
    STREAMS_GROUP_TOPOLOGY = 23
    STREAMS_GROUP_TARGET_ASSIGNMENT_RESOLVED_TOPIC_IDS = 24


# Every group-coordinator key above starts with the group id string, so records we do not
# decode can still be attributed to their group.
MAX_KNOWN_RECORD_TYPE: Final = max(RecordType)
# Member records of share and streams groups: key = GroupId, MemberId (like type 5).
MODERN_MEMBER_TYPES: Final = frozenset(
    {RecordType.SHARE_GROUP_MEMBER_METADATA, RecordType.STREAMS_GROUP_MEMBER_METADATA}
)
MODERN_METADATA_TYPES: Final = frozenset({RecordType.SHARE_GROUP_METADATA, RecordType.STREAMS_GROUP_METADATA})

# Value versions this codec decodes, per record type.
GROUP_METADATA_VALUE_VERSIONS: Final = range(0, 5)  # v4 is flexible
CONSUMER_GROUP_METADATA_VALUE_VERSIONS: Final = range(0, 1)  # flexible from v0
CONSUMER_GROUP_MEMBER_METADATA_VALUE_VERSIONS: Final = range(0, 1)  # flexible from v0
CONSUMER_GROUP_REGULAR_EXPRESSION_VALUE_VERSIONS: Final = range(0, 1)  # flexible from v0
STREAMS_GROUP_TOPOLOGY_VALUE_VERSIONS: Final = range(0, 1)  # flexible from v0 (Kafka 4.1-4.3)


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    """Types 0 (legacy) and 1: one committed offset of one group. Both types name the same offset."""

    group: str
    topic: str
    partition: int
    record_type: int = 1  # 0 for keys written by very old brokers


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    """Type 2: a classic group's metadata (protocol, generation, members)."""

    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    """Type 3: a KIP-848 group's epoch; its tombstone deletes the group."""

    group: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    """Type 5: one KIP-848 member's subscription; its tombstone removes the member."""

    group: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    """Type 16: the topics a KIP-848 group's regex subscription resolved to."""

    group: str
    regex: str


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyKey:
    """Type 23: a streams group's topology (KIP-1071), as its members declared it."""

    group: str


@dataclass(frozen=True, slots=True)
class UnknownRecordKey:
    """A record type this codec does not decode (assignments, share, streams, future types).

    `group` is the key's leading group id when it has one (every type up to
    `MAX_KNOWN_RECORD_TYPE` does; later types are parsed on a best-effort basis).
    """

    record_type: int
    group: str | None
    # Share / streams member metadata (types 10, 19): the member id after the group id, so the
    # ledger can tell when the last member left (their tombstones), as for KIP-848 groups.
    member_id: str | None = None


RecordKey = (
    OffsetCommitKey
    | GroupMetadataKey
    | ConsumerGroupMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupRegularExpressionKey
    | StreamsGroupTopologyKey
    | UnknownRecordKey
)


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # v3+; -1 when absent
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # v1 only: an explicit expiry the broker honours as is
    topic_id: uuid.UUID | None = None  # v4+ tagged field 0 (KAFKA-19141); None = absent/zero
    version: int = 3


@dataclass(frozen=True, slots=True)
class ClassicMember:
    member_id: str
    group_instance_id: str | None  # v3+
    client_id: str
    client_host: str
    rebalance_timeout: int  # v1+; -1 when absent
    session_timeout: int
    subscription: bytes  # ConsumerProtocolSubscription when protocolType == "consumer"
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str  # "" for simple groups
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int = -1  # v2+; -1 when absent
    members: tuple[ClassicMember, ...] = ()
    version: int = 3


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # tagged field 0 (KIP-1101, Kafka 4.1)
    creation_time_ms: int = -1  # tagged field 1 (KIP-1282)
    version: int = 0


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Tagged field 0 of a KIP-848 member that still speaks the classic protocol."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic_member_metadata: ClassicMemberMetadata | None = None
    version: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]
    resolution_version: int  # the schema's `Version`: metadata image version of the resolution
    timestamp_ms: int  # when the regex was resolved
    version: int = 0


@dataclass(frozen=True, slots=True)
class StreamsTopicInfo:
    """`TopicInfo` of a streams topology: an internal topic the app needs (created by the group
    coordinator or the app): its name, partitions (0 = not enforced; always 0 for changelogs),
    replication factor (0 = the broker's default) and topic configs."""

    name: str
    partitions: int = 0
    replication_factor: int = 0
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsCopartitionGroup:
    """Indexes into the subtopology's source topics, regexes and repartition source topics."""

    source_topics: tuple[int, ...] = ()
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsSubtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[StreamsTopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[StreamsTopicInfo, ...] = ()
    copartition_groups: tuple[StreamsCopartitionGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class StreamsGroupTopologyValue:
    """`StreamsGroupTopologyValue` (group-coordinator schema, Kafka 4.1-4.3.1: v0, flexible)."""

    epoch: int
    subtopologies: tuple[StreamsSubtopology, ...] = ()
    version: int = 0


@dataclass(frozen=True, slots=True)
class UnknownRecord:
    """A value of a type or version this codec does not decode. Never an error: counted."""

    record_type: int
    version: int


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A null value: the key is deleted (compaction removes it after delete.retention.ms)."""


TOMBSTONE: Final = Tombstone()

RecordValue = (
    OffsetCommitValue
    | GroupMetadataValue
    | ConsumerGroupMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupRegularExpressionValue
    | StreamsGroupTopologyValue
    | UnknownRecord
)
