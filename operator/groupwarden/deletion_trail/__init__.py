"""Write-ahead audit trail of destructive actions, and the pure logic to restore from it.

Every destructive call is preceded by an `intent` record (what is about to go: the group's kind,
protocol type and, per partition, the committed offset, leader epoch, metadata and commit time) and
followed by an `outcome` record. If the intent cannot be written, the action is not executed.
Records are plain JSON objects (`auditVersion: 1`), so any sink that stores JSON lines (a file, a
log line, later a Kafka topic keyed by group) can hold the trail.
"""

from __future__ import annotations

from groupwarden.deletion_trail.records import (
    AUDIT_VERSION,
    AuditFormatError,
    intent_record,
    outcome_record,
    parse_records,
)
from groupwarden.deletion_trail.sinks import (
    AuditRecorder,
    AuditSink,
    AuditWriteError,
    FileSink,
    LogSink,
    MemorySink,
    log_to_stderr_if_unconfigured,
)

__all__ = [
    "AUDIT_VERSION",
    "AuditFormatError",
    "AuditRecorder",
    "AuditSink",
    "AuditWriteError",
    "FileSink",
    "LogSink",
    "MemorySink",
    "intent_record",
    "log_to_stderr_if_unconfigured",
    "outcome_record",
    "parse_records",
]
