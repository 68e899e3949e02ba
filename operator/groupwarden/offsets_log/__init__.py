"""Pure codec and ledger for Kafka's `__consumer_offsets` topic (standard library only).

`codec` decodes record keys and values, `ledger.OffsetsLedger` rebuilds the topic's compacted
state from records in log order (`groupwarden.testing.offsets_log_encoder` writes them, for tests,
benchmarks and synthetic data).
No client library is imported here: a reader adapter feeds `(key, value, timestamp_ms,
partition, offset)` tuples, and a Spark job can call the same decode functions.
"""

from groupwarden.offsets_log.codec import (
    decode_key,
    decode_record,
    decode_value,
    parse_consumer_protocol_subscription,
    read_offset_commit_key,
    read_offset_commit_value,
    record_type,
)
from groupwarden.offsets_log.ledger import LogRecord, OffsetsLedger
from groupwarden.offsets_log.records import (
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
    RecordType,
    RecordValue,
    Tombstone,
    UnknownRecord,
    UnknownRecordKey,
)
from groupwarden.offsets_log.views import (
    LedgerClassicMember,
    LedgerConsumerMember,
    LedgerGroup,
    LedgerOffset,
    log_time,
)

__all__ = [
    "TOMBSTONE",
    "ClassicMember",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "CorruptRecordError",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "LedgerClassicMember",
    "LedgerConsumerMember",
    "LedgerGroup",
    "LedgerOffset",
    "LogRecord",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "OffsetsLedger",
    "RecordKey",
    "RecordType",
    "RecordValue",
    "Tombstone",
    "UnknownRecord",
    "UnknownRecordKey",
    "decode_key",
    "decode_record",
    "decode_value",
    "log_time",
    "parse_consumer_protocol_subscription",
    "read_offset_commit_key",
    "read_offset_commit_value",
    "record_type",
]
