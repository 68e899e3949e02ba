"""What a Spark worker runs per `__consumer_offsets` partition: the core ledger over its records.

A group lives in exactly one partition of `__consumer_offsets`, so one `OffsetsLedger` per
(cluster, partition) holds the whole state of its groups: the union of the per-partition ledgers
is the ledger of the cluster. The records arrive as one Arrow table (Spark `applyInArrow`), are
put in log order and applied by the core (`ReplayWithHistory` around `OffsetsLedger.apply`), and
each group leaves as `groupwarden.offsets_log.rows.group_row`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from groupwarden.fleet.schema import LEDGER_ROW_SCHEMA
from groupwarden.offsets_log.history import Comeback, ReplayWithHistory
from groupwarden.offsets_log.rows import group_row


def _total(table: pa.Table, column: str) -> int:
    value = pc.sum(table.column(column)).as_py()
    return int(value or 0)


def _extreme(table: pa.Table, column: str, largest: bool) -> int | None:
    values = table.column(column)
    value = (pc.max(values) if largest else pc.min(values)).as_py()
    return None if value is None else int(value)


def replay_partition(table: pa.Table) -> pa.Table:
    """Input: one partition's records (`records`, `tombstones`, `earliest_ms`, `latest_ms`,
    `first_offset` count what each input row stands for after commit compaction).
    Output: `LEDGER_ROW_SCHEMA` rows."""
    if table.num_rows == 0:
        return LEDGER_ROW_SCHEMA.empty_table()
    table = table.take(pc.sort_indices(table, sort_keys=[("offset", "ascending")]))
    cluster = table.column("cluster")[0].as_py()
    partition = int(table.column("partition")[0].as_py())
    replay = ReplayWithHistory()
    apply = replay.apply
    for key, value, timestamp_ms, offset in zip(
        table.column("key").to_pylist(),
        table.column("value").to_pylist(),
        table.column("timestamp").to_pylist(),
        table.column("offset").to_pylist(),
        strict=True,
    ):
        apply(key, value, timestamp_ms, partition, offset)
    ledger = replay.ledger
    comebacks: dict[str, list[Comeback]] = defaultdict(list)
    for comeback in replay.comebacks:
        comebacks[comeback.group].append(comeback)

    rows: list[dict[str, Any]] = []
    for group_id in ledger.groups():
        view = ledger.group(group_id)
        if view is None:
            continue
        row = group_row(view, ledger.offsets(group_id))
        row.update(cluster=cluster, partition=partition, row_kind="group")
        row["comebacks"] = _comeback_rows(comebacks.pop(group_id, []))
        rows.append(row)
    for group_id, gone in sorted(comebacks.items()):
        rows.append(
            {
                "cluster": cluster,
                "partition": partition,
                "row_kind": "history",
                "group": group_id,
                "kind": gone[0].kind.value,
                "comebacks": _comeback_rows(gone),
            }
        )
    rows.append(
        {
            "cluster": cluster,
            "partition": partition,
            "row_kind": "partition",
            "records": _total(table, "records"),
            "tombstones": _total(table, "tombstones"),
            "replayed": ledger.records,
            "corrupt": ledger.corrupt,
            "unknown": ledger.unknown,
            "first_offset": _extreme(table, "first_offset", largest=False),
            "next_offset": max(ledger.positions.values()) if ledger.positions else None,
            "earliest_ms": _extreme(table, "earliest_ms", largest=False),
            "latest_ms": _extreme(table, "latest_ms", largest=True),
        }
    )
    return pa.Table.from_pylist(rows, schema=LEDGER_ROW_SCHEMA)


def _comeback_rows(comebacks: list[Comeback]) -> list[dict[str, int]]:
    return [{"empty_since_ms": c.empty_since_ms, "returned_ms": c.returned_ms} for c in comebacks]
