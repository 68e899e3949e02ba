"""The rows a task of the audit returns (`fleet/task_rows.py`, `partition_audit.selected_rows`).

- Per-unit summaries (per-kind totals, idle-age and pause histograms), computed over whole columns,
  equal the per-row definition (a Counter over the rows) for any rows: nulls, no time known, empty
  tables.
- A group row takes its member columns from `rows.member_rows` (the selected groups only), the
  same lists `group_row` gives, without building a whole group row; its state columns are
  `rows.state_row`'s, as `group_row`'s are.
- The selected rows of a unit are the rows themselves (no copy) when all are selected.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.fleet.partition_audit import selected_rows
from groupwarden.fleet.schema import IDLE_EDGES, MEMBER_COLUMNS, TASK_ROW_SCHEMA
from groupwarden.fleet.task_rows import MEMBERSHIP_KINDS, rows_table, summaries, task_group_row
from groupwarden.offsets_log.history import ReplayWithHistory
from groupwarden.offsets_log.rows import GROUP_ROW_FIELDS, MEMBER_FIELDS, group_row, member_rows, state_row
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytestmark = pytest.mark.unit

NOW_MS = 1_800_000_000_000
KINDS = ["classic", "consumer", "simple", "share", "streams", "unknown"]


def bucket_of(seconds: float) -> int:
    """`schema.IDLE_EDGES`' bucket of a duration, by its definition (the first upper bound above)."""
    uppers = [upper for _, upper in IDLE_EDGES if upper is not None]
    return next((i for i, upper in enumerate(uppers) if seconds < upper), len(uppers))


def expected_summaries(
    groups: list[dict[str, Any]], comebacks: list[dict[str, Any]], now_ms: int | None
) -> list[pa.Table]:
    """The summaries row by row (what the tasks computed before they were vectorised)."""
    by_kind: dict[str, list[int]] = {}
    for g in groups:
        sums = by_kind.setdefault(g["kind"], [0, 0, 0])
        count = g["offset_count"] or 0
        sums[0] += 1
        sums[1] += count
        sums[2] += count if g["selected"] else 0
    totals = [
        {"kind": kind, "count": count, "offsets": offsets, "selected_offsets": selected_offsets}
        for kind, (count, offsets, selected_offsets) in sorted(by_kind.items())
    ]
    if now_ms is None:
        return [rows_table(totals, "kinds")]
    idle: Counter[tuple[str, bool, int]] = Counter()
    for g in groups:
        simple = g["kind"] == "simple"
        if not (simple or (g["kind"] in MEMBERSHIP_KINDS and not g["member_count"])):
            continue
        since = g["last_commit_ms"] if simple else g["empty_since_ms"]
        idle[(g["kind"], g["selected"], -1 if since is None else bucket_of((now_ms - since) / 1000))] += 1
    idle_rows = [{"kind": k, "selected": s, "bucket": b, "count": n} for (k, s, b), n in sorted(idle.items())]
    pauses = Counter(
        (c["kind"], bucket_of((c["returned_ms"] - c["empty_since_ms"]) / 1000)) for c in comebacks
    )
    pause_rows = [{"kind": k, "bucket": b, "count": n} for (k, b), n in sorted(pauses.items())]
    return [rows_table(totals, "kinds"), rows_table(idle_rows, "idle"), rows_table(pause_rows, "pauses")]


times = st.one_of(st.none(), st.integers(NOW_MS - 400 * 86_400_000, NOW_MS + 5_000))
GROUP_FIELDS = ["kind", "selected", "offset_count", "member_count", "last_commit_ms", "empty_since_ms"]
group_rows = st.fixed_dictionaries(
    {
        "kind": st.sampled_from(KINDS),
        "selected": st.booleans(),
        "offset_count": st.one_of(st.none(), st.integers(0, 50)),
        "member_count": st.one_of(st.none(), st.integers(0, 3)),
        "last_commit_ms": times,
        "empty_since_ms": times,
    }
)
comeback_rows = st.builds(
    lambda kind, since, pause: {"kind": kind, "empty_since_ms": since, "returned_ms": since + pause},
    st.sampled_from(KINDS),
    st.integers(NOW_MS - 86_400_000, NOW_MS),
    st.integers(1, 400 * 86_400_000),
)


def task_rows(rows: list[dict[str, Any]], names: list[str]) -> pa.Table:
    fields = [TASK_ROW_SCHEMA.field(name) for name in names]
    return pa.Table.from_pylist(rows, schema=pa.schema(fields)) if rows else pa.schema(fields).empty_table()


@settings(max_examples=300, deadline=None)
@given(
    st.lists(group_rows, max_size=40), st.lists(comeback_rows, max_size=10), st.sampled_from([None, NOW_MS])
)
def test_summaries_equal_the_per_row_definition(
    groups: list[dict[str, Any]], comebacks: list[dict[str, Any]], now_ms: int | None
) -> None:
    group_table = task_rows(groups, GROUP_FIELDS)
    comeback_table = task_rows(comebacks, ["kind", "empty_since_ms", "returned_ms"])
    got = summaries(group_table, comeback_table, now_ms)
    expected = expected_summaries(groups, comebacks, now_ms)
    assert [t.schema for t in got] == [t.schema for t in expected]
    assert [t.to_pylist() for t in got] == [t.to_pylist() for t in expected]


def test_idle_buckets_of_the_edges_themselves() -> None:
    """A duration equal to an edge falls in the bucket above it, as the definition says."""
    edges = [upper for _, upper in IDLE_EDGES if upper is not None]
    groups = [
        {
            "kind": "simple",
            "selected": True,
            "offset_count": 1,
            "member_count": 0,
            "last_commit_ms": NOW_MS - s * 1000,
            "empty_since_ms": None,
        }
        for s in [0, *edges, edges[-1] * 2]
    ]
    table = task_rows(groups, GROUP_FIELDS)
    [_, idle, _] = summaries(table, task_rows([], ["kind", "empty_since_ms", "returned_ms"]), NOW_MS)
    assert {r["bucket"]: r["count"] for r in idle.to_pylist()} == {
        0: 1,
        **{i: 1 for i in range(1, len(edges))},
        len(edges): 2,
    }


# ---------------------------------------------------------------------------------------------
# Group rows: state columns from `state_row`, member columns from `member_rows`
# ---------------------------------------------------------------------------------------------


def test_state_and_member_rows_are_the_fields_of_group_row() -> None:
    replay = ReplayWithHistory()
    replay.apply_many(synthetic_log(8_000, 150, partitions=1, seed=5))
    ledger = replay.ledger
    views = [view for g in ledger.groups() if (view := ledger.group(g)) is not None]
    assert {v.kind.value for v in views} >= {"classic", "consumer", "simple"}
    assert any(v.classic_members for v in views) and any(v.consumer_members for v in views)
    assert MEMBER_COLUMNS == MEMBER_FIELDS
    for view in views:
        full = group_row(view, ledger.offsets(view.group_id))
        assert list(full) == list(GROUP_ROW_FIELDS)
        state = state_row(view)
        assert state == {name: full[name] for name in state}
        members = member_rows(view)
        assert list(members) == list(MEMBER_FIELDS)
        assert members == {name: full[name] for name in MEMBER_FIELDS}
        chosen = task_group_row(view, True, 3, 7, 1)
        assert {name: chosen[name] for name in MEMBER_FIELDS} == members
        skipped = task_group_row(view, False, 3, 7, 1)
        assert not set(MEMBER_FIELDS) & set(skipped)
        assert {name: skipped[name] for name in state} == state
        assert {k: v for k, v in chosen.items() if k not in MEMBER_FIELDS} == skipped | {"selected": True}


# ---------------------------------------------------------------------------------------------
# Selected rows
# ---------------------------------------------------------------------------------------------


def test_selected_rows_are_the_rows_themselves_when_all_are_selected() -> None:
    rows = pa.table({"group": ["a", "b", "c"], "selected": [True, True, True]})
    assert selected_rows(rows) is rows
    empty = rows.slice(0, 0)
    assert selected_rows(empty) is empty
    some = pa.table({"group": ["a", "b", "c", "d"], "selected": pa.array([True, False, None, True])})
    assert selected_rows(some).column("group").to_pylist() == ["a", "d"]
    nulls = pa.table({"group": ["a"], "selected": pa.array([None], pa.bool_())})
    assert selected_rows(nulls).num_rows == 0
    chunked = pa.concat_tables([rows, rows])
    assert selected_rows(chunked) is chunked
    assert np.array_equal(selected_rows(some).column("selected").to_numpy(zero_copy_only=False), [True, True])
