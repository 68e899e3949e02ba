"""Write-ahead audit trail of destructive actions, and the pure logic to restore from it.

Every destructive call is preceded by an `intent` record (what is about to go: the group's kind,
protocol type and, per partition, the committed offset, leader epoch, metadata and commit time) and
followed by an `outcome` record. If the intent cannot be written (or signed), the action is not
executed. Records are JSON objects signed with the operator's Ed25519 key (`auditVersion 2`,
signing.py), so any sink that stores JSON lines (a file, a log line, a Kafka topic keyed by group)
can hold the trail, and `restore` believes only what a trusted key signed.
"""

from __future__ import annotations

from groupwarden.deletion_trail.records import (
    AUDIT_VERSION,
    AuditFormatError,
    RefusedRecord,
    TrailReading,
    TrailRecord,
    intent_record,
    numbered_lines,
    outcome_record,
    read_trail,
)
from groupwarden.deletion_trail.signing import (
    AuditKeyError,
    SigningKey,
    TrustedKeys,
    VerifyingKey,
    load_public_keys,
)
from groupwarden.deletion_trail.sinks import (
    AuditRecorder,
    AuditSink,
    AuditWriteError,
    Ed25519Signer,
    FileSink,
    LogSink,
    MemorySink,
    NoSigningKey,
    RecordSigner,
    TrailEntry,
    UnsignedRecords,
    log_to_stderr_if_unconfigured,
    signer_from_options,
)

__all__ = [
    "AUDIT_VERSION",
    "AuditFormatError",
    "AuditKeyError",
    "AuditRecorder",
    "AuditSink",
    "AuditWriteError",
    "Ed25519Signer",
    "FileSink",
    "LogSink",
    "MemorySink",
    "NoSigningKey",
    "RecordSigner",
    "RefusedRecord",
    "SigningKey",
    "TrailEntry",
    "TrailReading",
    "TrailRecord",
    "TrustedKeys",
    "UnsignedRecords",
    "VerifyingKey",
    "intent_record",
    "load_public_keys",
    "log_to_stderr_if_unconfigured",
    "numbered_lines",
    "outcome_record",
    "read_trail",
    "signer_from_options",
]
