"""Raw `__consumer_offsets` records -> Parquet (`RAW_SCHEMA`) + a metadata file, for `audit --input`.

No Spark here: the export reads with the core's reader and writes with pyarrow, so it runs next
to a cluster with only the `[spark]` Python packages (no JVM)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from groupwarden.cleanup.gateway import OffsetsLogRecord
from groupwarden.fleet.schema import EXPORT_METADATA, RAW_SCHEMA, SHARE_STATE_EXPORT

ROWS_PER_FILE = 2_000_000
_BATCH = 100_000


@dataclass
class ExportStats:
    records: int = 0
    files: int = 0
    # partition -> [first offset seen, next offset after the last one]
    bounds: dict[int, list[int]] = field(default_factory=dict)


def _batch(cluster: str, rows: list[OffsetsLogRecord]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [
            pa.array([cluster] * len(rows), pa.string()),
            pa.array([r.partition for r in rows], pa.int32()),
            pa.array([r.offset for r in rows], pa.int64()),
            pa.array([r.timestamp_ms for r in rows], pa.int64()),
            pa.array([r.key for r in rows], pa.binary()),
            pa.array([r.value for r in rows], pa.binary()),
        ],
        schema=RAW_SCHEMA,
    )


def write_export(
    out: Path,
    cluster: str,
    cluster_id: str,
    topics: Iterable[str],
    records: Iterable[OffsetsLogRecord],
    *,
    share_state: Iterable[OffsetsLogRecord] | None = None,
    topic_ids: Mapping[uuid.UUID, str] | None = None,
) -> ExportStats:
    """`records` of `__consumer_offsets` as Parquet; `share_state`, the `__share_group_state`
    records (None: not readable), in one file beside them with the topic ids they name."""
    out.mkdir(parents=True, exist_ok=True)
    for old in (*out.glob("records-*.parquet"), out / SHARE_STATE_EXPORT):
        old.unlink(missing_ok=True)
    stats = ExportStats()
    writer: pq.ParquetWriter | None = None
    in_file = 0
    pending: list[OffsetsLogRecord] = []

    def flush() -> None:
        nonlocal writer, in_file
        if not pending:
            return
        if writer is None or in_file >= ROWS_PER_FILE:
            if writer is not None:
                writer.close()
            writer = pq.ParquetWriter(out / f"records-{stats.files:05d}.parquet", RAW_SCHEMA)
            stats.files += 1
            in_file = 0
        writer.write_batch(_batch(cluster, pending))
        in_file += len(pending)
        pending.clear()

    try:
        for record in records:
            pending.append(record)
            seen = stats.bounds.setdefault(record.partition, [record.offset, record.offset + 1])
            seen[1] = record.offset + 1
            stats.records += 1
            if len(pending) >= _BATCH:
                flush()
        flush()
    finally:
        if writer is not None:
            writer.close()
    metadata: dict[str, Any] = {
        "cluster": cluster,
        "clusterId": cluster_id,
        "topics": sorted(topics),
        "records": stats.records,
        "bounds": {str(p): b for p, b in sorted(stats.bounds.items())},
    }
    if share_state is not None:
        rows = list(share_state)
        pq.write_table(pa.Table.from_batches([_batch(cluster, rows)]), out / SHARE_STATE_EXPORT)
        metadata["shareStateRecords"] = len(rows)
        metadata["topicIds"] = {str(i): name for i, name in sorted((topic_ids or {}).items(), key=str)}
    (out / EXPORT_METADATA).write_text(json.dumps(metadata, indent=2) + "\n")
    return stats
