"""Fuzz the policy parser (`parse_policy`, `parse_policy_yaml`, `load_policy_file`) with mutated manifests.

Seeds are the manifests in examples/ (the demo's with their placeholders filled). Each input is
one of:
- yaml (20%): a seed's text mutated 1-4 times (YAML punctuation and odd characters inserted, ranges
  and lines deleted, duplicated, swapped or re-indented, words replaced by tricky scalars such as
  `9`x5000, `2001-13-45`, `!!binary`, anchors/aliases, merge keys, tags, deep nesting, alias
  bombs), then `parse_policy_yaml`;
- tree (75%): a seed's mapping mutated 1-4 times (values replaced by other types, extremes and
  typos, keys dropped, renamed or added, subtrees moved), then `parse_policy` (the operator's path
  for objects from the API server);
- file (5%): mutated bytes (invalid UTF-8 too) written to a file, then `load_policy_file`.

Allowed outcomes: a valid policy, or `PolicyError`. A valid policy must also keep the invariants
the rest of the product relies on (a non-empty include, durations within bounds, a lossless
round trip, and `decide` runs on it); a violation counts as a crash. An input over `--time-limit`
is a hang; over `--memory-limit` traced bytes, a memory finding.

    .venv/bin/python -m bench.fuzz_policy --inputs 250000 --seed 1 [--out bench/out/fuzz_policy]
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from bench.fuzzlib import Campaign, print_report
from groupwarden.core.durations import MAX_DURATION
from groupwarden.core.engine import decide
from groupwarden.core.policy import (
    ConsumerGroupPolicy,
    PolicyError,
    load_policy_file,
    parse_policy,
    parse_policy_yaml,
    validate_glob,
)
from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
    TimestampSource,
    TopicPartition,
)

REPO = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 11, 23, tzinfo=UTC)
MAX_TEXT = 16_384

SCALARS: tuple[Any, ...] = (
    None, "", " ", "*", "?", "[", "ci-[", "[z-a]", "0", "0s", "1s", "-1d", "7d", "1w2d", "36500d", "36501d",
    "100000000d", "9" * 30 + "d", "1.5h", "DryRun", "Enforce", "enforce", "Delete", "classic", "share",
    "consumer", "simple", "groupwarden.io/v1beta1", "ConsumerGroupPolicy", "127.0.0.1:9092", "a:1,,b:2",
    0, 1, -1, 2, 100, 10_000, 2**31, 2**63, -(2**63), 10**400, 0.5, 1.0, 1.5, 0.0, -0.5, 1e-300, 1e308,
    float("nan"), float("inf"), -float("inf"), True, False, [], {}, ["*"], [""], ["*", "*"], {"include": []},
    {"include": ["*"]}, {"name": ""}, b"\xff\x00", "é" * 50, "\u2028", "\x00", "x" * 10_000,
    datetime(2001, 12, 14, tzinfo=UTC), timedelta(days=1), timedelta(0), timedelta(days=10**6), (1, 2),
    {"a": {"b": {"c": [1, 2, {"d": None}]}}}, frozenset({"a"}),
)  # fmt: skip
KEYS = (
    "apiVersion", "kind", "metadata", "spec", "status", "name", "namespace", "kafka", "bootstrapServers",
    "authSecretRef", "selector", "include", "exclude", "groupTypes", "rules", "emptyGroupRetention",
    "unsubscribedOffsetRetention", "simpleGroupOffsetRetention", "mode", "interval", "suspend", "limits",
    "maxGroupDeletionsPerRun", "maxOffsetDeletionsPerRun", "maxDeletionRatio", "empty_group_retention",
    "Selector", "includes", "emptyGroupRetension", "", "x" * 300, 1, None, True,
)  # fmt: skip
YAML_CHARS = ":-[]{},#&*!|>'\"%@`?~ \n\t\\"
TEXT_TOKENS = (
    "null", "~", "yes", "no", "on", "0x1F", "0o17", "1e400", "9" * 5000, ".nan", "-.inf", "2001-13-45",
    "2001-12-14t21:59:43.10-05:00", "!!binary aGVsbG8=", "!!binary ===", "!!str", "!!int x", "!!float",
    "!!set {a, b}", "!!omap [a]", "!!python/object:os.system", "!!python/name:os.system", "&a", "*a",
    "&a [1, 2]", "<<: {x: 1}", "<<: *a", "? [1, 2]\n: 3", "{? {a: 1} : 2}", "---", "...", "%YAML 1.1",
    "%TAG ! tag:x,2000:", "|\n  block", ">-\n  folded", "'quoted''s'", '"\\x00\\uD800"', "\ufeff", "\x85",
    "\x00", "\U0001f600", "\\", "[[[[[[[[", "{{{{{{{{", "- - - - - -", "a: &x [*x]",
)  # fmt: skip
BOMB = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}" if i else "x"] * 9) + "]\n" for i in range(9))


def seed_texts() -> list[str]:
    """The examples; all but the first without their comment lines (shorter text, more inputs/s)."""
    texts = []
    for number, path in enumerate(sorted((REPO / "examples").rglob("*.yaml"))):
        text = path.read_text()
        text = text.replace("__BOOTSTRAP__", "127.0.0.1:9092").replace("__NAMESPACE__", "demo")
        text = text.replace("__MODE__", "DryRun")
        if number:
            text = "\n".join(line for line in text.split("\n") if not line.lstrip().startswith("#"))
        texts.append(text)
    return texts


def seed_trees(texts: list[str]) -> list[dict[str, Any]]:
    trees = []
    for text in texts:
        for document in yaml.safe_load_all(text):
            if isinstance(document, dict) and document.get("kind") == "ConsumerGroupPolicy":
                trees.append(document)
    return trees


# -- tree mutations ------------------------------------------------------------------------------


def _slots(node: Any, depth: int = 0) -> list[tuple[Any, Any]]:
    """(container, key or index) of every value in a tree of dicts and lists."""
    found: list[tuple[Any, Any]] = []
    if depth > 12:
        return found
    if isinstance(node, dict):
        for key in list(node):
            found.append((node, key))
            found += _slots(node[key], depth + 1)
    elif isinstance(node, list):
        for index in range(len(node)):
            found.append((node, index))
            found += _slots(node[index], depth + 1)
    return found


def _value(rng: random.Random) -> Any:
    value = rng.choice(SCALARS)
    value = copy.deepcopy(value) if isinstance(value, dict | list) else value
    if rng.random() < 0.05:  # a deeply nested value (the operator path has no YAML depth limit)
        for _ in range(rng.choice((10, 70, 500))):
            value = [value] if rng.random() < 0.5 else {"k": value}
    return value


def mutate_tree(tree: dict[str, Any], rng: random.Random) -> None:
    slots = _slots(tree)
    if not slots:
        tree[rng.choice(KEYS)] = _value(rng)
        return
    container, key = rng.choice(slots)
    choice = rng.randrange(7)
    if choice <= 1:
        container[key] = _value(rng)
    elif choice == 2:
        del container[key]
    elif choice == 3 and isinstance(container, dict):
        container[rng.choice(KEYS)] = container.pop(key)  # renamed, maybe to a typo or a non-string
    elif choice == 4:
        target, target_key = rng.choice(slots)
        with_copy = None if _deeper_than(container[key], 20) else copy.deepcopy(container[key])
        target[target_key] = with_copy
    elif choice == 5:
        container[key] = [container[key]] if rng.random() < 0.5 else {rng.choice(KEYS): container[key]}
    elif isinstance(container[key], dict | list) and container[key]:
        inner = container[key]
        container[key] = inner[rng.choice(list(inner))] if isinstance(inner, dict) else inner[0]
    else:
        container[key] = _value(rng)


def _deeper_than(node: Any, limit: int) -> bool:
    """Whether a tree nests deeper than `limit` (recursion bounded by `limit`)."""
    if not isinstance(node, dict | list) or not node:
        return False
    if limit <= 0:
        return True
    children = node.values() if isinstance(node, dict) else node
    return any(_deeper_than(child, limit - 1) for child in children)


# -- text mutations ------------------------------------------------------------------------------


def mutate_text(text: str, rng: random.Random, texts: list[str]) -> str:
    choice = rng.randrange(11)
    position = rng.randrange(len(text) + 1)
    if choice == 0:
        return text[:position] + rng.choice(YAML_CHARS) * rng.randrange(1, 4) + text[position:]
    if choice == 1:
        return text[:position] + text[position + rng.randrange(1, 20) :]
    lines = text.split("\n")
    line = rng.randrange(len(lines))
    if choice == 2:
        lines.insert(line, lines[rng.randrange(len(lines))])
    elif choice == 3:
        other = rng.randrange(len(lines))
        lines[line], lines[other] = lines[other], lines[line]
    elif choice == 4:
        shift = rng.choice((-4, -2, -1, 1, 2, 4))
        lines[line] = " " * shift + lines[line] if shift > 0 else lines[line][-shift:]
    elif choice == 5:
        del lines[line]
    elif choice in (6, 7):  # a word or value replaced by a tricky scalar
        words = list(re.finditer(r"[A-Za-z0-9_.*\-/:]+", lines[line]))
        if words:
            word = rng.choice(words)
            token = rng.choice(TEXT_TOKENS)
            lines[line] = lines[line][: word.start()] + token + lines[line][word.end() :]
    elif choice == 8:
        other = rng.choice(texts)
        cut = rng.randrange(len(other) + 1)
        return (text[:position] + other[cut:])[:MAX_TEXT]
    elif choice == 9:
        return text[:position]
    else:
        blob = rng.choice(
            (BOMB, "x: " + "[" * 200 + "]" * 200 + "\n", "x: " + "{a: " * 100 + "1" + "}" * 100)
        )
        lines.insert(line, blob)
    return "\n".join(lines)[:MAX_TEXT]


# -- the target ----------------------------------------------------------------------------------


def _snapshot() -> ClusterSnapshot:
    old = SourcedTime(NOW - timedelta(days=400), TimestampSource.OFFSETS_LOG)
    offsets = (CommittedOffset(TopicPartition("t", 0), 5, old),)
    groups = (
        GroupFacts("ci-1", GroupKind.CLASSIC, GroupState.EMPTY, "consumer", 0, frozenset(), old, offsets),
        GroupFacts(
            "svc-1", GroupKind.CONSUMER, GroupState.STABLE, "consumer", 1, frozenset({"u"}), None, offsets
        ),
        GroupFacts("spark-1", GroupKind.SIMPLE, GroupState.EMPTY, "", 0, None, old, offsets),
    )
    return ClusterSnapshot(taken_at=NOW, groups=groups, offsets_log_available=True)


SNAPSHOT = _snapshot()


def check_invariants(policy: ConsumerGroupPolicy) -> None:
    """What the engine, the CRD and the operator rely on for every policy the parser accepts."""
    spec = policy.spec
    if not spec.selector.include:
        raise AssertionError("a valid policy with an empty selector.include")
    for pattern in (*spec.selector.include, *spec.selector.exclude):
        validate_glob(pattern)
    for duration in (spec.interval, *spec.rules.enabled().values()):
        if not timedelta(0) < duration <= MAX_DURATION:
            raise AssertionError(f"duration out of bounds: {duration}")
    limits = spec.limits
    if not (0 < limits.max_deletion_ratio <= 1 and limits.max_group_deletions_per_run >= 0):
        raise AssertionError(f"limits out of bounds: {limits}")
    dumped = policy.model_dump(mode="json", exclude_none=True)  # as with_bootstrap_servers does
    again = parse_policy(dumped)
    if (again.ref, again.spec) != (policy.ref, policy.spec):
        raise AssertionError("the policy does not survive a round trip through its manifest")
    decide(policy, SNAPSHOT, NOW)


_FIELDS = frozenset(
    {"apiVersion", "kind", "metadata", "spec", "(document)"}
    | {f"metadata.{name}" for name in ("name", "namespace")}
    | {f"spec.{name}" for name in ("kafka", "selector", "rules", "mode", "interval", "suspend", "limits")}
)


def _outcome(error: PolicyError) -> str:
    """A coarse class of the first problem: invalid YAML, unknown field, or the field path (2 levels)."""
    problem = re.sub(r"^document \d+: ", "", error.problems[0])
    if problem.startswith(("invalid YAML", "no policy found", "cannot read policy file")):
        return "PolicyError:" + problem.split(":", 1)[0].split(" (", 1)[0]
    head, _, rest = problem.partition(": ")
    if rest.startswith("unknown field"):
        return "PolicyError:unknown field"
    field = ".".join(re.sub(r"\[\d+\]", "", head).split(".")[:2])
    return f"PolicyError:{field}" if field in _FIELDS else "PolicyError:other"


def from_text(text: str) -> str:
    try:
        policies = parse_policy_yaml(text, "fuzz.yaml")
    except PolicyError as error:
        return _outcome(error)
    for policy in policies:
        check_invariants(policy)
    return "valid"


def from_tree(tree: dict[str, Any]) -> str:
    try:
        policy = parse_policy(tree)
    except PolicyError as error:
        return _outcome(error)
    check_invariants(policy)
    return "valid"


def from_file(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    try:
        policies = load_policy_file(path)
    except PolicyError as error:
        return _outcome(error)
    for policy in policies:
        check_invariants(policy)
    return "valid"


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randrange(1, 5)):
        position = rng.randrange(len(out) + 1)
        choice = rng.randrange(3)
        if choice == 0 and out:
            out[min(position, len(out) - 1)] ^= 1 << rng.randrange(8)
        elif choice == 1:
            out[position:position] = rng.choice(
                (b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", rng.randbytes(4))
            )
        else:
            del out[position : position + rng.randrange(1, 10)]
    return bytes(out)


def run(
    inputs: int,
    seed: int,
    *,
    time_limit: float = 5.0,
    memory_limit: int = 8 << 20,
    out: Path | None = None,
    progress: Callable[[int], None] | None = None,
    max_seconds: float | None = None,
) -> Campaign:
    """`inputs` inputs from `seed` (fewer if `max_seconds` runs out first: the report says how many)."""
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    rng = random.Random(seed)
    texts = seed_texts()
    trees = seed_trees(texts)
    campaign = Campaign(time_limit, memory_limit, out)
    with tempfile.TemporaryDirectory(prefix="fuzz-policy-") as scratch:
        path = Path(scratch) / "policy.yaml"
        for number in range(inputs):
            draw = rng.random()
            if draw < 0.2:
                text = rng.choice(texts)
                for _ in range(rng.randrange(1, 5)):
                    text = mutate_text(text, rng, texts)
                campaign.run(from_text, text, size=len(text), show=lambda t=text: f"yaml {t!r}")
            elif draw < 0.95:
                tree = copy.deepcopy(rng.choice(trees))
                for _ in range(rng.randrange(1, 5)):
                    mutate_tree(tree, rng)
                campaign.run(
                    from_tree,
                    tree,
                    size=lambda t=tree: len(repr(t)),
                    show=lambda t=tree: f"tree {t!r}"[:5000],
                )
            else:
                data = mutate_bytes(rng.choice(texts).encode(), rng)
                campaign.run(from_file, path, data, size=len(data), show=lambda d=data: f"file {d!r}")
            if progress is not None and number % 50_000 == 0:
                progress(number)
            if deadline is not None and number % 1000 == 0 and time.monotonic() > deadline:
                break
    return campaign


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--inputs", type=int, default=250_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per input (a hang)")
    parser.add_argument("--memory-limit", type=int, default=8 << 20, help="traced bytes per input")
    parser.add_argument("--out", type=Path, help="write summary.json and findings.jsonl here")
    parser.add_argument("--max-seconds", type=float, help="stop early (to hold the bench lock <10 min)")
    args = parser.parse_args()
    texts = seed_texts()
    print(
        f"python {sys.version.split()[0]}; pid {os.getpid()}; {len(texts)} seed files, "
        f"{len(seed_trees(texts))} seed policies; seed {args.seed}",
        flush=True,
    )
    campaign = run(
        args.inputs,
        args.seed,
        time_limit=args.time_limit,
        memory_limit=args.memory_limit,
        out=args.out,
        progress=lambda n: print(f"  ... {n:,}", flush=True),
        max_seconds=args.max_seconds,
    )
    summary = campaign.report(f"fuzz_policy seed {args.seed}")
    print_report(summary, campaign.findings)
    sys.exit(1 if campaign.finding_count else 0)


if __name__ == "__main__":
    main()
