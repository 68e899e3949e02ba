"""The distributed part: raw records -> per-partition ledgers (rows of `LEDGER_ROW_SCHEMA`).

1. Map side, per input split, vectorised with pyarrow (`precompact`): OffsetCommit records
   (types 0 and 1, nearly all of a busy log) are compacted to the record with the highest offset
   per (cluster, partition, key without its type), carrying counters of what they stand for.
   Without history (no --what-if) classic GroupMetadata records (type 2) are compacted too.
   This is exact for the ledger: an offset's state is its latest record (types 0 and 1 name the
   same offset), a classic group's state is its latest GroupMetadata record, and no other record
   reads them (docs/spark-audit.md; tests/unit replays both ways). Records superseded only in
   another split survive here and are applied in log order later, which changes nothing.
2. Every other record (KIP-848 records, tombstones of those, unknown types) stays, because
   history matters there (KIP-848 Empty-since, come-backs).
3. Shuffle by (cluster, partition). The worker compacts the whole partition again with the same
   function (now every superseded record is in one table: what survives is one record per slot,
   about the number of live offsets), then applies the rest with the core ledger (`replay.py`).
   The counters of what each row stands for add up across both passes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame

from groupwarden.fleet.replay import replay_partition
from groupwarden.fleet.schema import LEDGER_INPUT_SCHEMA, LEDGER_ROW_SCHEMA, spark_schema

_COMMIT_TYPES = pa.array([b"\x00\x00", b"\x00\x01"], pa.binary())
_GROUP_METADATA = pa.scalar(b"\x00\x02", pa.binary())
_OFFSET_SPAN = 1 << 40  # offsets of one partition stay below 2^40 (a trillion records)


def _as_input(
    table: pa.Table, records: Any, tombstones: Any, earliest: Any, latest: Any, first: Any
) -> pa.Table:
    return pa.Table.from_arrays(
        [
            table.column("cluster"),
            table.column("partition"),
            table.column("offset"),
            table.column("timestamp"),
            table.column("key"),
            table.column("value"),
            records,
            tombstones,
            earliest,
            latest,
            first,
        ],
        schema=LEDGER_INPUT_SCHEMA,
    )


def with_counters(table: pa.Table) -> pa.Table:
    """Raw records as ledger input: each row stands for itself."""
    return _as_input(
        table,
        pa.array(np.ones(table.num_rows, dtype=np.int64)),
        pc.cast(pc.is_null(table.column("value")), pa.int64()),
        table.column("timestamp"),
        table.column("timestamp"),
        table.column("offset"),
    )


def precompact_table(table: pa.Table, keep_history: bool) -> pa.Table:
    """One split's raw records -> the ledger's input (see the module docstring)."""
    return compact_counted(with_counters(table), keep_history)


def compact_counted(table: pa.Table, keep_history: bool) -> pa.Table:
    """Ledger input (rows with counters) -> the same, with superseded compactable rows dropped and
    their counters added to the row that supersedes them. Applying it twice is exact too."""
    if table.num_rows == 0:
        return table
    clusters = pc.unique(table.column("cluster"))
    if len(clusters) > 1:
        parts = [table.filter(pc.equal(table.column("cluster"), c)) for c in clusters]
        return pa.concat_tables([compact_counted(part, keep_history) for part in parts])
    head = pc.binary_slice(table.column("key"), 0, 2)
    is_commit = pc.fill_null(pc.is_in(head, value_set=_COMMIT_TYPES), False)
    compactable = is_commit
    if not keep_history:
        compactable = pc.or_(is_commit, pc.fill_null(pc.equal(head, _GROUP_METADATA), False))
    passed = table.filter(pc.invert(compactable))
    candidates = table.filter(compactable)
    if candidates.num_rows == 0:
        return passed
    # Types 0 and 1 name the same offset: compare keys without their type; GroupMetadata keys whole.
    keys = candidates.column("key")
    commit = pc.filter(is_commit, compactable)
    slot = pc.if_else(commit, pc.binary_slice(keys, 2, 1 << 20), keys)  # (no stop: pyarrow overflows)
    # One int64 per record of this cluster: (partition, offset) packed, so the latest record of
    # each slot is found with is_in instead of a join.
    position = pc.add(
        pc.multiply(pc.cast(candidates.column("partition"), pa.int64()), _OFFSET_SPAN),
        candidates.column("offset"),
    )
    candidates = candidates.append_column("slot", slot).append_column("position", position)
    stats = candidates.group_by(["partition", "slot"]).aggregate(
        [
            ("position", "max"),
            ("first_offset", "min"),
            ("records", "sum"),
            ("tombstones", "sum"),
            ("earliest_ms", "min"),
            ("latest_ms", "max"),
        ]
    )
    stats = stats.take(pc.sort_indices(stats.column("position_max")))
    latest = candidates.filter(
        pc.is_in(candidates.column("position"), value_set=stats.column("position_max"))
    )
    latest = latest.take(pc.sort_indices(latest.column("position")))  # aligned with `stats` row by row
    compacted = _as_input(
        latest,
        stats.column("records_sum"),
        stats.column("tombstones_sum"),
        stats.column("earliest_ms_min"),
        stats.column("latest_ms_max"),
        stats.column("first_offset_min"),
    )
    return pa.concat_tables([passed, compacted])


def precompact(keep_history: bool) -> Any:
    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        collected = list(batches)
        if not collected:
            return
        yield from precompact_table(pa.Table.from_batches(collected), keep_history).to_batches()

    return run


def ledger_rows(raw: DataFrame, *, keep_history: bool = True) -> Any:
    """Per-partition ledgers of every cluster in `raw`, as a DataFrame of `LEDGER_ROW_SCHEMA`."""

    def replay(table: pa.Table) -> pa.Table:
        return replay_partition(compact_counted(table, keep_history))

    return (
        raw.mapInArrow(precompact(keep_history), spark_schema(LEDGER_INPUT_SCHEMA))
        .groupBy("cluster", "partition")
        .applyInArrow(replay, schema=spark_schema(LEDGER_ROW_SCHEMA))
    )
