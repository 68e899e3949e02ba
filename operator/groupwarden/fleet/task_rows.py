"""The rows one audit task returns (`schema.TASK_ROW_SCHEMA`), assembled from a unit's ledger and
its vectorised offsets (`partition_audit`): group rows, offset rows, per-kind totals and the
idle-age / pause histograms the driver adds up."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupwarden.core.snapshot import GroupKind
from groupwarden.fleet.schema import IDLE_EDGES, OFFSET_COLUMNS, TASK_ROW_SCHEMA
from groupwarden.offsets_log.ledger import OffsetsLedger
from groupwarden.offsets_log.rows import member_rows, state_row
from groupwarden.offsets_log.views import LedgerGroup

# Kinds whose state the log tells by their members (`offsets_log.snapshot.group_state`).
MEMBERSHIP_KINDS = (
    GroupKind.CLASSIC.value,
    GroupKind.CONSUMER.value,
    GroupKind.SHARE.value,
    GroupKind.STREAMS.value,
)


def ledger_offsets(ledger: OffsetsLedger) -> pa.Table:
    columns: dict[str, list[Any]] = {name: [] for name in OFFSET_COLUMNS}
    for group_id in ledger.groups():
        for tp, lo in ledger.offsets(group_id).items():
            columns["group"].append(group_id)
            columns["topic"].append(tp.topic)
            columns["tp"].append(tp.partition)
            columns["offset"].append(lo.offset)
            columns["commit_time_ms"].append(lo.commit_time_ms)
            columns["expire_time_ms"].append(lo.expire_time_ms)
            columns["leader_epoch"].append(lo.leader_epoch)
            columns["metadata"].append(lo.metadata)
            columns["topic_id"].append(None if lo.topic_id is None else str(lo.topic_id))
    return pa.table(
        {name: pa.array(values, TASK_ROW_SCHEMA.field(name).type) for name, values in columns.items()}
    )


def task_group_row(
    view: LedgerGroup, chosen: bool, count: int, last_commit: int | None, comebacks: int
) -> dict[str, Any]:
    row = state_row(view)
    row["selected"] = chosen
    row["offset_count"] = count
    row["last_commit_ms"] = last_commit
    row["comeback_count"] = comebacks
    if chosen:  # only the decision reads members: for the groups a policy selects
        row.update(member_rows(view))
    return row


def simple_groups(stats: pa.Table, selected: list[bool], comebacks: Counter[str]) -> pa.Table:
    """Groups with offsets only, all of them plain commits (never in the ledger): simple groups.
    `stats`: per group, `tp_count` and `commit_time_ms_max` of its offsets."""
    ids = stats.column("group").combine_chunks()
    n = len(ids)
    comeback_count = pa.repeat(pa.scalar(0, pa.int32()), n)
    if comebacks:
        names = pa.array(list(comebacks), pa.string())
        counts = pa.array(list(comebacks.values()), pa.int32())
        comeback_count = pc.fill_null(counts.take(pc.index_in(ids, value_set=names)), 0)
    return pa.table(
        {
            "group": ids,
            "selected": pa.array(selected, pa.bool_()),
            "kind": repeat("simple", pa.string(), n),
            "protocol_type": repeat("", pa.string(), n),
            "member_count": repeat(0, pa.int32(), n),
            "subscribed_topics": pa.ListArray.from_arrays(
                pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], pa.string())
            ),
            "offset_count": stats.column("tp_count").cast(pa.int32()),
            "last_commit_ms": stats.column("commit_time_ms_max").cast(pa.int64()),
            "comeback_count": comeback_count,
        }
    )


def _bucket(seconds: np.ndarray) -> np.ndarray:
    """Index of `schema.IDLE_EDGES`' bucket per value (the report's `_bucket`, vectorised)."""
    uppers = np.array([upper for _, upper in IDLE_EDGES if upper is not None], dtype=np.float64)
    return np.searchsorted(uppers, seconds, side="right").astype(np.int32)


def summaries(groups: pa.Table, comebacks: pa.Table, now_ms: int | None) -> list[pa.Table]:
    """Per-kind totals, and with `now_ms` the idle-age and pause histograms: small rows the driver
    adds up (no shuffle, no group rows to the driver). Computed with Arrow and numpy over whole
    columns (a unit holds thousands of groups)."""
    selected = groups.column("selected").to_numpy(zero_copy_only=False).astype(bool)
    offset_count = groups.column("offset_count").fill_null(0).to_numpy().astype(np.int64)
    kinds = groups.column("kind")
    per_kind = pa.table(
        {
            "kind": kinds,
            "offsets": offset_count,
            "selected_offsets": np.where(selected, offset_count, 0),
        }
    )
    totals = _aggregated(
        per_kind,
        ["kind"],
        [
            ([], "count_all", "count"),
            ("offsets", "sum", "offsets"),
            ("selected_offsets", "sum", "selected_offsets"),
        ],
        "kinds",
    )
    if now_ms is None:
        return [totals]
    kind_array = np.array(kinds.to_pylist(), dtype=object)
    members = groups.column("member_count").fill_null(0).to_numpy().astype(np.int64)
    simple = kind_array == GroupKind.SIMPLE.value
    membership = np.isin(kind_array, MEMBERSHIP_KINDS)
    empty = simple | (membership & (members == 0))
    since = np.where(
        simple,
        _nullable(groups.column("last_commit_ms")),
        _nullable(groups.column("empty_since_ms")),
    )[empty]
    idle = pa.table(
        {
            "kind": kinds.filter(pa.array(empty)),
            "selected": selected[empty],
            "bucket": np.where(np.isnan(since), -1, _bucket((now_ms - since) / 1000)).astype(np.int32),
        }
    )
    idle_rows = _aggregated(idle, ["kind", "selected", "bucket"], [([], "count_all", "count")], "idle")
    returned = comebacks.column("returned_ms").to_numpy(zero_copy_only=False)
    pause = (returned - comebacks.column("empty_since_ms").to_numpy(zero_copy_only=False)) / 1000
    pauses = pa.table({"kind": comebacks.column("kind"), "bucket": _bucket(pause)})
    pause_rows = _aggregated(pauses, ["kind", "bucket"], [([], "count_all", "count")], "pauses")
    return [totals, idle_rows, pause_rows]


Aggregate = tuple[str | list[str], str, str]  # (column(s), Arrow aggregation, output column)


def _aggregated(table: pa.Table, keys: list[str], aggregates: list[Aggregate], kind: str) -> pa.Table:
    """`aggregates` per distinct `keys` (sorted by them), laid out as `rows_table` lays out rows of
    those names: columns in name order with the task rows' types, then `row_kind`."""
    if table.num_rows == 0:
        return rows_table([], kind)
    grouped = table.group_by(keys, use_threads=False).aggregate(
        [(column, how) for column, how, _ in aggregates]
    )
    # Arrow names an aggregate `<column>_<how>`, or `<how>` over no column (`count_all`).
    names = {f"{column}_{how}" if column else how: name for column, how, name in aggregates}
    grouped = grouped.rename_columns([names.get(c, c) for c in grouped.column_names])
    grouped = grouped.sort_by([(key, "ascending") for key in keys])
    columns = sorted(grouped.column_names)
    return with_kind(
        pa.Table.from_arrays(
            [grouped.column(name).cast(TASK_ROW_SCHEMA.field(name).type) for name in columns],
            schema=pa.schema([TASK_ROW_SCHEMA.field(name) for name in columns]),
        ),
        kind,
    )


def _nullable(column: pa.ChunkedArray) -> np.ndarray:
    values: np.ndarray = column.cast(pa.float64()).fill_null(np.nan).to_numpy()
    return values


def rows_table(rows: Iterable[dict[str, Any]], kind: str) -> pa.Table:
    rows = list(rows)
    names = sorted({name for row in rows for name in row})
    fields = [TASK_ROW_SCHEMA.field(name) for name in names]
    table = pa.Table.from_pylist(rows, schema=pa.schema(fields)) if rows else pa.schema(fields).empty_table()
    return table.append_column("row_kind", repeat(kind, pa.string(), table.num_rows))


def with_kind(table: pa.Table, kind: str) -> pa.Table:
    return table.append_column("row_kind", repeat(kind, pa.string(), table.num_rows))


def repeat(value: Any, type_: pa.DataType, n: int) -> pa.Array:
    return pa.repeat(pa.scalar(value, type_), n)


def complete(part: pa.Table, cluster: str, partition: int) -> pa.Table:
    n = part.num_rows
    columns = []
    for field in TASK_ROW_SCHEMA:
        if field.name == "cluster":
            columns.append(repeat(cluster, pa.string(), n))
        elif field.name == "partition":
            columns.append(repeat(partition, pa.int32(), n))
        elif field.name in part.column_names:
            column = part.column(field.name)
            columns.append(column if column.type == field.type else column.cast(field.type))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=TASK_ROW_SCHEMA)
