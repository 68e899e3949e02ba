from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from groupwarden.core.durations import (
    DURATION_JSON_SCHEMA,
    DURATION_PATTERN,
    Duration,
    DurationError,
    OptionalDuration,
    format_age,
    format_duration,
    parse_duration,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("1w", timedelta(days=7)),
        ("2w3d", timedelta(days=17)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("90m", timedelta(minutes=90)),
        ("007d", timedelta(days=7)),
        ("0d1s", timedelta(seconds=1)),
    ],
)
def test_parse_accepts(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "invalid duration '': empty"),
        ("0s", "invalid duration '0s': must be positive"),
        ("0d0h", "invalid duration '0d0h': must be positive"),
        ("-1d", "invalid duration '-1d': must be positive"),
        ("7x", "invalid duration '7x': unknown unit 'x'"),
        ("7D", "invalid duration '7D': unknown unit 'D'"),
        ("5ms", "invalid duration '5ms': unknown unit 'ms'"),
        ("7", "invalid duration '7': missing unit after '7'"),
        ("1d2", "invalid duration '1d2': missing unit after '2'"),
        ("d", "invalid duration 'd': expected e.g."),
        ("1.5h", "invalid duration '1.5h': expected e.g."),
        ("+7d", "invalid duration '+7d': expected e.g."),
        (" 7d", "invalid duration ' 7d': must not contain whitespace"),
        ("7d ", "invalid duration '7d ': must not contain whitespace"),
        ("1d 12h", "invalid duration '1d 12h': must not contain whitespace"),
        ("30m1h", "invalid duration '30m1h': units must go from largest to smallest"),
        ("1h1h", "invalid duration '1h1h': units must go from largest to smallest"),
        ("99999999999999d", "invalid duration '99999999999999d': too large"),
        ("36501d", "invalid duration '36501d': too large (at most 36500d, 100 years)"),
        ("5215w", "invalid duration '5215w': too large"),
        ("9" * 5000 + "d", "invalid duration '99999999999999999999'...: too large"),
        ("P7D", "invalid duration 'P7D'"),
    ],
)
def test_parse_rejects_with_a_message_naming_the_value(text: str, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text)
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("value", "canonical"),
    [
        (timedelta(days=7), "7d"),
        (timedelta(days=14), "14d"),
        (timedelta(days=1, hours=12), "1d12h"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(seconds=3725), "1h2m5s"),
        (timedelta(seconds=30, microseconds=900), "30s"),
        (timedelta(0), "0s"),
        (timedelta(hours=-2), "-2h"),
    ],
)
def test_format_duration_is_exact_and_canonical(value: timedelta, canonical: str) -> None:
    assert format_duration(value) == canonical


@pytest.mark.parametrize(
    ("value", "age"),
    [
        (timedelta(days=3, hours=4, minutes=59, seconds=59), "3d4h"),
        (timedelta(days=3, minutes=5), "3d"),
        (timedelta(hours=5, minutes=12, seconds=9), "5h12m"),
        (timedelta(minutes=5, seconds=12), "5m12s"),
        (timedelta(seconds=45, milliseconds=999), "45s"),
        (timedelta(minutes=1), "1m"),
        (timedelta(0), "0s"),
        (timedelta(days=400, hours=1), "400d1h"),
        (timedelta(hours=-3), "-3h"),
    ],
)
def test_format_age_shows_the_largest_two_units(value: timedelta, age: str) -> None:
    assert format_age(value) == age


@given(st.integers(min_value=1, max_value=10**9))
def test_canonical_form_round_trips(seconds: int) -> None:
    value = timedelta(seconds=seconds)
    assert parse_duration(format_duration(value)) == value


class _Holder(BaseModel):
    every: Duration
    maybe: OptionalDuration = None


def test_pydantic_type_validates_strings_and_serialises_canonically() -> None:
    holder = _Holder.model_validate({"every": "1w", "maybe": "90m"})
    assert holder.every == timedelta(days=7)
    assert holder.model_dump(mode="json") == {"every": "7d", "maybe": "1h30m"}
    assert _Holder.model_validate({"every": "1s", "maybe": None}).maybe is None
    assert _Holder(every=timedelta(hours=1)).every == timedelta(hours=1)


@pytest.mark.parametrize("bad", [600, 1.5, True, None, ["7d"], timedelta(0), "0s"])
def test_pydantic_type_rejects_non_strings_and_non_positive(bad: object) -> None:
    with pytest.raises(ValidationError, match="invalid duration"):
        _Holder.model_validate({"every": bad})


def test_json_schema_is_a_plain_string_with_pattern_and_cel_rule() -> None:
    schema = _Holder.model_json_schema()
    for name in ("every", "maybe"):
        field = schema["properties"][name]
        assert field["type"] == "string"
        assert "anyOf" not in field
        assert field["pattern"].startswith("^")
        assert field["x-kubernetes-validations"][0]["rule"] == "self.matches('[1-9]')"


@given(st.text(alphabet="0123dhmswx -", max_size=8))
def test_crd_pattern_and_cel_rule_agree_with_the_parser(text: str) -> None:
    """kubectl apply (OpenAPI pattern + CEL) and the CLI accept exactly the same strings."""
    admitted = (
        re.fullmatch(DURATION_PATTERN, text) is not None
        and re.search("[1-9]", text) is not None
        and len(text) >= DURATION_JSON_SCHEMA["minLength"]
    )
    try:
        parse_duration(text)
        parsed = True
    except DurationError:
        parsed = False
    assert admitted == parsed
