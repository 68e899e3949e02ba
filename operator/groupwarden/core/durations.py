"""Durations as people write them in a policy (`7d`, `1d12h`) and ages as a table shows them (`3d4h`).

Grammar: one or more `<digits><unit>` terms, units largest first and each at most once, no spaces,
no sign, no fractions. Units: `w` (7 days), `d`, `h`, `m`, `s`; lower case only. Weeks are accepted
on input because Prometheus users write them, but the canonical form never uses them (`2w` is shown
as `14d`), because "days" is what Kafka's `offsets.retention.minutes` talk is usually about.

Zero is rejected: a zero retention would make every group eligible the moment it goes Empty, which
is never what a person meant. Sub-second precision does not exist here; Kafka's timestamps are ms,
but a retention shorter than a second is not a policy.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import PlainSerializer, PlainValidator, WithJsonSchema

UNIT_SECONDS: dict[str, int] = {"w": 7 * 86400, "d": 86400, "h": 3600, "m": 60, "s": 1}
# Canonical output units (no weeks, see the module docstring).
_CANONICAL_UNITS: tuple[tuple[str, int], ...] = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))

# The same grammar for the CRD's OpenAPI `pattern` (RE2 has no look-ahead, so "not zero" is a CEL rule).
DURATION_PATTERN = r"^([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?$"
DURATION_CEL_RULES: list[dict[str, str]] = [
    {"rule": "self.matches('[1-9]')", "message": "duration must be positive (e.g. 30s, 15m, 12h, 7d, 1d12h)"},
]
DURATION_JSON_SCHEMA: dict[str, Any] = {
    "type": "string",
    "pattern": DURATION_PATTERN,
    "minLength": 2,
    "x-kubernetes-validations": DURATION_CEL_RULES,
}

_TERM = re.compile(r"([0-9]+)([A-Za-z]+)")
# At most 100 years: a longer retention or interval is surely a typo, and `now - retention` (the
# engine) or `now + interval` (the scheduler) must stay within datetime's years 1-9999 (found by
# bench/fuzz_policy.py: 100000000d parsed, then crashed every run with OverflowError).
MAX_DURATION = timedelta(days=36500)
_MAX_DIGITS = 15  # more digits than any duration has; int() of thousands of digits is slow


class DurationError(ValueError):
    """A duration string that is not valid; the message names the value and what is wrong."""


def parse_duration(text: str) -> timedelta:
    """Parse `30s`, `15m`, `12h`, `7d`, `1w` or compounds such as `1d12h`; reject anything else."""
    if not isinstance(text, str):
        raise DurationError(f"invalid duration {text!r}: expected a string such as '7d' or '1d12h'")
    shown = repr(text)
    if text == "":
        raise DurationError("invalid duration '': empty (expected e.g. 30s, 15m, 12h, 7d, 1d12h)")
    if text != text.strip() or any(c.isspace() for c in text):
        raise DurationError(f"invalid duration {shown}: must not contain whitespace")
    if text.startswith("-"):
        raise DurationError(f"invalid duration {shown}: must be positive")
    position = 0
    total_seconds = 0
    previous_unit_seconds: int | None = None
    for match in _TERM.finditer(text):
        if match.start() != position:
            break
        digits, unit = match.groups()
        if len(digits) > _MAX_DIGITS:
            raise DurationError(f"invalid duration {text[:20]!r}...: too large (at most 36500d)")
        if unit not in UNIT_SECONDS:
            raise DurationError(f"invalid duration {shown}: unknown unit {unit!r} (use w, d, h, m or s)")
        unit_seconds = UNIT_SECONDS[unit]
        if previous_unit_seconds is not None and unit_seconds >= previous_unit_seconds:
            raise DurationError(
                f"invalid duration {shown}: units must go from largest to smallest, each once"
            )
        previous_unit_seconds = unit_seconds
        total_seconds += int(digits) * unit_seconds
        position = match.end()
    if position != len(text) or previous_unit_seconds is None:
        rest = text[position:]
        if rest and rest[0].isdigit() and rest.isdigit():
            raise DurationError(
                f"invalid duration {shown}: missing unit after {rest!r} (use w, d, h, m or s)"
            )
        raise DurationError(f"invalid duration {shown}: expected e.g. 30s, 15m, 12h, 7d, 1d12h")
    if total_seconds == 0:
        raise DurationError(f"invalid duration {shown}: must be positive")
    if total_seconds > MAX_DURATION.total_seconds():
        raise DurationError(f"invalid duration {shown}: too large (at most 36500d, 100 years)")
    return timedelta(seconds=total_seconds)


def format_duration(value: timedelta) -> str:
    """The canonical, exact form: `1d12h`, `90s` -> `1m30s`. Sub-second parts are dropped."""
    seconds = int(value.total_seconds())
    if seconds < 0:
        return "-" + format_duration(-value)
    if seconds == 0:
        return "0s"
    parts: list[str] = []
    for unit, unit_seconds in _CANONICAL_UNITS:
        count, seconds = divmod(seconds, unit_seconds)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


def format_age(value: timedelta) -> str:
    """A compact age for people: the largest two units, truncated (`3d4h`, `5m12s`, `45s`)."""
    seconds = int(value.total_seconds())
    if seconds < 0:
        return "-" + format_age(-value)
    parts: list[str] = []
    for unit, unit_seconds in _CANONICAL_UNITS:
        count, seconds = divmod(seconds, unit_seconds)
        if count or parts:
            parts.append(f"{count}{unit}")
        if len(parts) == 2:
            break
    while len(parts) > 1 and parts[-1].startswith("0"):
        parts.pop()
    return "".join(parts) or "0s"


def _validate_duration(value: object) -> timedelta:
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise DurationError(f"invalid duration '{format_duration(value)}': must be positive")
        if value > MAX_DURATION:
            raise DurationError(f"invalid duration '{format_duration(value)}': too large (at most 36500d)")
        return value
    if isinstance(value, bool) or not isinstance(value, str):
        raise DurationError(f"invalid duration {value!r}: expected a string such as '7d' or '1d12h'")
    return parse_duration(value)


def _validate_optional_duration(value: object) -> timedelta | None:
    # An explicit null (`emptyGroupRetention:` with no value) means the same as absent: off.
    return None if value is None else _validate_duration(value)


def _serialize_optional_duration(value: timedelta | None) -> str | None:
    return None if value is None else format_duration(value)


# A positive duration that validates from the policy's string form and serialises back to the
# canonical string; its JSON schema is what the CRD gets.
Duration = Annotated[
    timedelta,
    PlainValidator(_validate_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(DURATION_JSON_SCHEMA),
]

# The same, for optional fields (absent or null = off). One plain validator instead of
# `Duration | None` keeps error paths clean and the schema free of `anyOf: [..., null]`.
OptionalDuration = Annotated[
    timedelta | None,
    PlainValidator(_validate_optional_duration),
    PlainSerializer(_serialize_optional_duration, return_type=str),
    WithJsonSchema(DURATION_JSON_SCHEMA),
]
