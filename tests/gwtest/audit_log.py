"""The operator's always-on audit sink read back from its log: one signed record per log line (the
`message` of kopf's JSON log lines), verified with the suite's key as `restore` would verify it."""

from __future__ import annotations

import json
from typing import Any

from groupwarden.testing.audit_keys import trusted_records


def audit_lines_of_log(log: str) -> list[str]:
    """The audit lines (signed envelopes) among a JSON-format operator log's messages, in order."""
    lines: list[str] = []
    for line in log.splitlines():
        if not line.startswith("{") or "auditVersion" not in line:
            continue
        try:
            message = json.loads(line).get("message", "")
        except (ValueError, AttributeError):
            continue
        if isinstance(message, str) and message.startswith('{"auditVersion":'):
            lines.append(message)
    return lines


def audit_records_of_log(log: str, group: str | None = None) -> list[dict[str, Any]]:
    """The verified records of the log's audit lines (of `group` when given), in order; raises
    AssertionError when a line does not verify."""
    records = trusted_records(audit_lines_of_log(log), "operator log")
    return [r for r in records if group is None or r.get("group") == group]


def audit_lines_of_group(log: str, group: str) -> list[str]:
    """The signed lines of `group`'s records (a trail `restore --audit-file` verifies)."""
    lines = audit_lines_of_log(log)
    return [
        line
        for line, record in zip(lines, trusted_records(lines), strict=True)
        if record.get("group") == group
    ]
