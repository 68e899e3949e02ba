"""Raw `__consumer_offsets` records -> Parquet (`RAW_SCHEMA`) + a metadata file, for `audit --input`.

No Spark here: the export reads with the core's reader and writes with pyarrow, so it runs next
to a cluster with only the `[spark]` Python packages (no JVM)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
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


# An `OffsetsLogRecord` tuple, field by field: pyarrow converts a list of such tuples in one C++
# pass (5x faster than transposing them in Python first, measured on 100k records).
_RECORD = pa.struct(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("timestamp", pa.int64()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
    ]
)


def _batch(cluster: str, rows: list[OffsetsLogRecord]) -> pa.RecordBatch:
    key, value, timestamp, partition, offset = pa.array(rows, _RECORD).flatten()
    return pa.RecordBatch.from_arrays(
        [pa.array([cluster] * len(rows), pa.string()), partition, offset, timestamp, key, value],
        schema=RAW_SCHEMA,
    )


def _note_bounds(bounds: dict[int, list[int]], batch: pa.RecordBatch) -> None:
    """[first offset, last offset + 1] per partition (each partition comes in log order)."""
    seen = pa.Table.from_batches([batch]).group_by("partition").aggregate([("offset", "min_max")])
    for partition, extremes in zip(
        seen.column("partition").to_pylist(), seen.column("offset_min_max").to_pylist(), strict=True
    ):
        known = bounds.setdefault(partition, [extremes["min"], extremes["max"] + 1])
        known[0] = min(known[0], extremes["min"])
        known[1] = max(known[1], extremes["max"] + 1)


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
    """`records` of `__consumer_offsets` as Parquet files of up to `ROWS_PER_FILE` rows, and the
    metadata file; `share_state`, the `__share_group_state` records (None: not readable), in one
    file beside them with the topic ids they name."""
    out.mkdir(parents=True, exist_ok=True)
    for old in (*out.glob("records-*.parquet"), out / SHARE_STATE_EXPORT):
        old.unlink(missing_ok=True)
    stats = ExportStats()
    writer: pq.ParquetWriter | None = None
    in_file = 0
    iterator = iter(records)
    try:
        # Batches taken with islice and converted by pyarrow: the reader's loop is the only
        # Python code run per record.
        while rows := list(islice(iterator, _BATCH)):
            batch = _batch(cluster, rows)
            if writer is None or in_file >= ROWS_PER_FILE:
                if writer is not None:
                    writer.close()
                writer = pq.ParquetWriter(out / f"records-{stats.files:05d}.parquet", RAW_SCHEMA)
                stats.files += 1
                in_file = 0
            writer.write_batch(batch)
            _note_bounds(stats.bounds, batch)
            in_file += len(rows)
            stats.records += len(rows)
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
