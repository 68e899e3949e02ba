"""The policy parser under hostile input: only PolicyError, bounded time and memory.

The regressions are what `bench/fuzz_policy.py` found; the last test runs a short version of that
campaign (the >= 1M-input runs and their numbers are in docs/benchmarks.md, "Fuzzing").
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import fuzz_policy
from groupwarden.core.durations import MAX_DURATION, parse_duration
from groupwarden.core.engine import decide
from groupwarden.core.policy import PolicyError, load_policy_file, parse_policy, parse_policy_yaml
from groupwarden.core.safe_yaml import MAX_DEPTH, MAX_NODES, BoundedSafeLoader
from groupwarden.core.snapshot import ClusterSnapshot

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = (REPO / "examples" / "ci-groups.yaml").read_text()
BOMB = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}" if i else "x"] * 9) + "]\n" for i in range(9))


def rejected(text: str, *, seconds: float = 5.0, peak_bytes: int = 4 << 20) -> str:
    """The PolicyError message for `text`, asserting the time and traced memory it took."""
    tracemalloc.start()
    started = time.perf_counter()
    try:
        with pytest.raises(PolicyError) as caught:
            parse_policy_yaml(text)
    finally:
        elapsed = time.perf_counter() - started
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert elapsed < seconds, f"took {elapsed:.2f}s"
    assert peak < peak_bytes, f"peak {peak} bytes"
    return str(caught.value)


def test_an_alias_bomb_is_rejected_without_expanding_it() -> None:
    """9 levels of 9 aliases: 45 s and 158 MB before the loader counted expanded nodes."""
    message = rejected(BOMB)
    assert f"a document expands to more than {MAX_NODES} nodes" in message


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "[" * 5000,  # took 43 s (quadratic scanner), then RecursionError
        "a: " + "{" * 200_000,
        "a: " + "{a: " * 3000 + "1" + "}" * 3000,  # RecursionError
        "- " * 5000 + "x",
    ],
)
def test_deep_nesting_is_rejected_quickly(text: str) -> None:
    assert f"nested deeper than {MAX_DEPTH} levels" in rejected(text)


def test_aliases_within_limits_still_work() -> None:
    text = EXAMPLE.replace('include: ["ci-*", "tmp-*"]', "include: &groups [ci-*, tmp-*]")
    text = text.replace('exclude: ["ci-keep-*"]', "exclude: *groups")
    [policy] = parse_policy_yaml(text)
    assert policy.spec.selector.exclude == ["ci-*", "tmp-*"]


def test_a_recursive_alias_is_rejected() -> None:
    assert "found a recursive alias" in rejected("a: &a [*a]\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: " + "9" * 5000, "invalid int: Exceeds the limit (4300 digits)"),  # was ValueError
        ("a: 2001-13-45", "invalid timestamp: month must be in 1..12"),  # was ValueError
        ('a: !!float ""', "invalid float"),  # was IndexError
        ('a: !!int ""', "invalid int"),  # was IndexError
        ("a: !!bool x", "invalid bool"),  # was KeyError
        ("a: !!timestamp x", "invalid timestamp"),  # was AttributeError
        ("a: !!map x", "expected a mapping, found a scalar"),  # was ValueError
        ("? [1, 2]\n: 3\n", "a key must be a scalar, found list"),  # was TypeError
        ("{? {a: 1} : 2}", "a key must be a scalar, found dict"),  # was TypeError
    ],
)
def test_constructor_errors_are_policy_errors(text: str, message: str) -> None:
    assert message in rejected(text)


def test_every_tag_on_every_shape_is_a_policy_error_or_a_value() -> None:
    tags = [t for t in BoundedSafeLoader.yaml_constructors if t] + ["tag:yaml.org,2002:merge", "!local"]
    for tag in tags:
        for value in ("", '""', "x", "0", "-", "[1]", "{a: 1}", "[]", "{}", "2001-13-45", "[[1, 2]]"):
            with contextlib.suppress(PolicyError):
                parse_policy_yaml(f"a: !<{tag}> {value}")


def test_a_huge_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(EXAMPLE + "#" * (1 << 20))
    with pytest.raises(PolicyError, match="more than the 1048576 a policy file may have"):
        load_policy_file(path)


def test_invalid_utf8_in_a_file_is_a_policy_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(EXAMPLE.encode().replace(b"ci-groups", b"ci-\xff\xfe"))
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy_file(path)


def test_a_deeply_nested_object_from_python_is_a_policy_error() -> None:
    """The operator's path (a body from the API server) has no YAML loader in front of it."""
    document: Any = yaml.safe_load(EXAMPLE)
    nested: Any = "x"
    for _ in range(5000):
        nested = [nested]
    document["metadata"]["labels"] = {"deep": nested}
    with pytest.raises(PolicyError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_policy(document)


@pytest.mark.parametrize("field", ["interval", "rules.emptyGroupRetention"])
def test_a_duration_the_engine_cannot_use_is_rejected(field: str) -> None:
    """100000000d parsed, then `now - retention` (or `now + interval`) raised OverflowError every run."""
    document: Any = yaml.safe_load(EXAMPLE)
    node = document["spec"]
    *parents, leaf = field.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = "100000000d"
    with pytest.raises(PolicyError, match="too large"):
        parse_policy(document)
    node[leaf] = "36500d"
    policy = parse_policy(document)
    assert parse_duration("36500d") == MAX_DURATION
    decide(policy, ClusterSnapshot(datetime(2026, 1, 1, tzinfo=UTC), ()), datetime(2026, 1, 1, tzinfo=UTC))


def test_short_fuzz_campaign_finds_nothing() -> None:
    """A few thousand mutated manifests (YAML text, mappings, files): only PolicyError or a valid policy."""
    campaign = fuzz_policy.run(1500, seed=20261123)
    assert campaign.finding_count == 0, [f.__dict__ for f in campaign.findings[:3]]
    assert campaign.outcomes["valid"] > 0
    assert campaign.outcomes["PolicyError:invalid YAML"] > 0
    assert campaign.outcomes["PolicyError:spec.selector"] > 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
FIELDS = st.sampled_from(
    ["apiVersion", "kind", "metadata", "spec", "kafka", "selector", "include", "rules", "limits", "mode"]
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(FIELDS | st.text(max_size=8), JSON, max_size=6))
def test_arbitrary_documents_are_a_policy_or_a_policy_error(document: dict[str, Any]) -> None:
    with contextlib.suppress(PolicyError):
        parse_policy(document)


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet=st.sampled_from([*list(":-[]{},#&*!|>'\"%@`?~ \n\tabcx019"), "é", "\x00"]), max_size=200)
)
def test_arbitrary_yaml_text_is_a_policy_or_a_policy_error(text: str) -> None:
    with contextlib.suppress(PolicyError):
        parse_policy_yaml(EXAMPLE + "\n" + text)


@pytest.mark.parametrize("value", ["!!binary /w==", "{!!binary /w==: 1}", "[a, !!binary /w==]"])
def test_binary_metadata_is_a_policy_error_not_a_crash_when_dumped(value: str) -> None:
    """Found by the 1M-input campaign (seed 4): it parsed, then model_dump(mode="json") (the CLI's
    --bootstrap-servers) raised UnicodeDecodeError."""
    text = EXAMPLE.replace("  namespace: kafka\n", f"  namespace: kafka\n  labels: {value}\n")
    with pytest.raises(PolicyError, match=r"binary data \(!!binary\) is not allowed in metadata"):
        parse_policy_yaml(text)
    [policy] = parse_policy_yaml(
        EXAMPLE.replace("  namespace: kafka\n", "  namespace: kafka\n  labels: {a: b}\n")
    )
    assert policy.with_bootstrap_servers("b:1").metadata.model_extra == {"labels": {"a": "b"}}
