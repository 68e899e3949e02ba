"""Timestamps in plans: always timezone-aware, always shown as RFC 3339 UTC with a `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def require_aware(value: datetime, what: str) -> datetime:
    """Reject naive datetimes: guessing their zone could move a deletion earlier, which is never safe."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value.isoformat()}")
    return value


def to_rfc3339(value: datetime) -> str:
    """`2026-11-19T01:02:03Z`, or with milliseconds (`...03.250Z`) when the time has them."""
    utc = require_aware(value, "timestamp").astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    return text + "Z"
