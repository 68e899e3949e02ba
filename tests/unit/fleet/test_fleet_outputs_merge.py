"""plan.json's skips come from every task's `skips` file, merged by the driver a read at a time
(`outputs._merged_skips`) and written plan by plan (`outputs._SkipRuns`). Their order must be the
one plan.json has always had: Python's order of (cluster position, policy index, group, reason,
partitions as (topic, partition) tuples, rendered text), whatever the files, reads and strings."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from groupwarden.fleet import outputs
from groupwarden.fleet.task_decide import SKIPS_SCHEMA

pytestmark = pytest.mark.unit

CLUSTERS = ["east", "west", "north"]
# strings whose bytes test the order: prefixes of each other, a 0 byte, non-ASCII and astral text
texts = st.text(alphabet=st.sampled_from(["a", "b", "\x00", "\x01", "é", "\U0001f600", "-"]), max_size=4)
partitions = st.lists(st.tuples(texts, st.sampled_from([0, 1, 255, 256, 2**31 - 1])), max_size=3)
skip_rows = st.builds(
    lambda cluster, policy, group, reason, parts, text: (
        cluster,
        policy,
        group,
        reason,
        parts,
        # rendered as a task would: the skip's keys in the text (with line breaks to indent)
        f"{{\n{group!r} {reason} {parts!r}\n{text}}}",
    ),
    st.sampled_from(CLUSTERS),
    st.integers(0, 2),
    texts,
    st.sampled_from(["LimitReached", "Limit", "BlastRadius"]),
    partitions,
    st.text(alphabet=st.sampled_from(["{", "}", "\n", " ", "x", "é"]), max_size=6),
)


def _python_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    cluster, policy, group, reason, parts, rendered = row
    return (CLUSTERS.index(cluster), policy, group, reason, tuple(parts), rendered)


def _write_file(path: Path, rows: list[tuple[Any, ...]], row_group: int) -> None:
    columns: dict[str, list[Any]] = {f.name: [] for f in SKIPS_SCHEMA}
    for cluster, policy, group, reason, parts, rendered in sorted(rows, key=_python_key):
        columns["cluster"].append(cluster)
        columns["cluster_id"].append(f"id-{cluster}")
        columns["policy"].append(f"ns/p{policy}")
        columns["policy_index"].append(policy)
        columns["group"].append(group)
        columns["reason"].append(reason)
        columns["detail"].append("")
        columns["group_kind"].append(None)
        columns["partitions"].append([{"topic": t, "partition": p} for t, p in parts])
        columns["plan_json"].append(rendered)
    table = pa.Table.from_arrays(
        [pa.array(columns[f.name], f.type) for f in SKIPS_SCHEMA], schema=SKIPS_SCHEMA
    )
    pq.write_table(table, path, row_group_size=row_group)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(skip_rows, max_size=60),
    st.integers(1, 5),
    st.integers(1, 7),
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from(["  ", "      "]),
    st.booleans(),
)
def test_the_merged_skips_are_in_plan_json_order_and_written_per_plan(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    rows: list[tuple[Any, ...]],
    files: int,
    read: int,
    row_group: int,
    write: int,
    pad: str,
    in_runs: bool,
) -> None:
    directory = tmp_path_factory.mktemp("skips")
    # interleaved (every file holds every plan), or runs of plan.json's order (a cluster's units
    # packed together: reads that take one file's rows only, unsorted)
    ordered = sorted(rows, key=_python_key)
    for index in range(files):
        mine = (
            ordered[index * len(rows) // files : (index + 1) * len(rows) // files]
            if in_runs
            else rows[index::files]
        )
        _write_file(directory / f"part-{index:05d}.parquet", mine, row_group)
    monkeypatch.setattr(outputs, "_MERGE_READ", read)
    monkeypatch.setattr(outputs, "_WRITE_SLICE", write)
    positions = {name: index for index, name in enumerate(CLUSTERS)}
    expected = sorted(rows, key=_python_key)

    # (only what plan.json needs is kept: each rendered text names its keys, so any key out of
    # order shows as text out of order)
    merged = [
        (CLUSTERS[plan >> 32], plan & 0xFFFFFFFF, text)
        for read in outputs._merged_skips(directory, positions)
        for plan, text in zip(read.plans.tolist(), read.texts(0, len(read.plans)).to_pylist(), strict=True)
    ]
    assert merged == [(r[0], r[1], r[5]) for r in expected]

    # each plan (cluster position, policy index) written as plan.json lists its skips
    runs = outputs._SkipRuns(outputs._merged_skips(directory, positions))
    for position in range(len(CLUSTERS)):
        for policy in range(3):
            file = io.BytesIO()
            written = runs.write_plan(file, (position << 32) | policy, pad)
            entries = [r[5] for r in expected if _python_key(r)[:2] == (position, policy)]
            assert written == bool(entries)
            assert file.getvalue().decode() == ",".join(
                "\n" + pad + entry.replace("\n", "\n" + pad) for entry in entries
            )


def test_a_partitions_key_sorts_as_the_partitions_do() -> None:
    """`_partitions_key` against Python's tuple order on the cases that break naive encodings."""
    cases = [
        [],
        [("a", 1)],
        [("a", 1), ("a", 0)],
        [("a", 2)],
        [("a\x00", 0)],
        [("a\x00b", 0)],
        [("a\x01", 0)],
        [("ab", 0)],
        [("b", 0)],
        [("é", 0)],
        [("\U0001f600", 0)],
        [("a", 256)],
        [("a", 2**31 - 1)],
    ]
    keys = [outputs._partitions_key([{"topic": t, "partition": p} for t, p in case]) for case in cases]
    by_key = [case for _, case in sorted(zip(keys, cases, strict=True))]
    assert by_key == sorted(cases)
