"""Where the raw records come from: exported Parquet directories, or a live cluster via Spark's
Kafka source. Both give `RAW_SCHEMA` columns."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from groupwarden.fleet.pipeline import ExportRecords, FrameRecords, Records, default_tasks, export_units
from groupwarden.fleet.schema import EXPORT_METADATA, RAW_SCHEMA, SHARE_STATE_EXPORT, spark_schema
from groupwarden.offsets_log.ledger import OffsetsLogRecord
from groupwarden.offsets_log.share_state import ShareStarts, ShareStateLedger, share_starts

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class ClusterSource:
    """What the audit knows about one cluster besides its records."""

    name: str  # the `cluster` column
    cluster_id: str  # the broker's cluster id (plans carry it as clusterId)
    topics: frozenset[str] | None = None
    # partition -> (first offset, end offset) of the read; end = the next offset after the read
    bounds: Mapping[int, tuple[int, int]] | None = None
    # `__share_group_state` replayed on the driver (small: pruned to the latest snapshots): each
    # share group's start offsets and when they last changed. None: not read (not readable, or an
    # export made before it was exported): share groups are then dated as a first `plan` run does.
    share_starts: ShareStarts | None = None


def export_metadata(directory: Path) -> ClusterSource:
    document = json.loads((directory / EXPORT_METADATA).read_text())
    bounds = {int(p): (int(b[0]), int(b[1])) for p, b in document.get("bounds", {}).items()}
    topics = document.get("topics")
    return ClusterSource(
        name=document["cluster"],
        cluster_id=document.get("clusterId", ""),
        topics=None if topics is None else frozenset(topics),
        bounds=bounds,
        share_starts=_exported_share_starts(directory, document.get("topicIds")),
    )


def _exported_share_starts(directory: Path, topic_ids: Mapping[str, str] | None) -> ShareStarts | None:
    """The export's `__share_group_state` records replayed (None when the export has none)."""
    path = directory / SHARE_STATE_EXPORT
    if not path.exists() or topic_ids is None:
        return None
    import pyarrow.parquet as pq

    ledger = ShareStateLedger()
    table = pq.read_table(path).sort_by([("partition", "ascending"), ("offset", "ascending")])
    for row in table.to_pylist():
        ledger.apply(row["key"], row["value"], row["timestamp"], row["partition"], row["offset"])
    return share_starts(ledger, {uuid.UUID(i): name for i, name in topic_ids.items()})


def live_share_starts(
    records: Iterable[OffsetsLogRecord], topic_names: Mapping[uuid.UUID, str]
) -> ShareStarts:
    """`__share_group_state` read by the driver (the core reader) for a live audit."""
    ledger = ShareStateLedger()
    ledger.apply_many(records)
    return share_starts(ledger, topic_names)


class OldExportLayout(ValueError):
    """An export written before format 2 (every file holds every partition)."""


def export_files(directory: Path) -> dict[int, list[str]]:
    """The export's files per partition; refuses the interleaved layout of format 1 with how to
    convert it (reading it per partition would make every task read every file)."""
    from groupwarden.fleet.export import EXPORT_FORMAT

    document = json.loads((directory / EXPORT_METADATA).read_text())
    version = document.get("format", 1)
    if version != EXPORT_FORMAT:
        raise OldExportLayout(
            f"{directory} is an export of format {version} (every file holds every partition); "
            f"this audit reads format {EXPORT_FORMAT} (one file per partition): convert it in place with "
            f"`groupwarden export-offsets-log --convert {directory}`, or export the cluster again"
        )
    return {int(p): list(names) for p, names in document.get("files", {}).items()}


def read_exports(spark: SparkSession, directories: Sequence[Path]) -> tuple[Records, list[ClusterSource]]:
    """Exported directories (several clusters may be audited together; one export per cluster)."""
    sources = [export_metadata(d) for d in directories]
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ValueError(f"two inputs hold the same cluster name ({', '.join(sorted(names))}): use --cluster")
    units = [
        unit
        for directory, source in zip(directories, sources, strict=True)
        for unit in export_units(directory, source.name, export_files(directory))
    ]
    return ExportRecords(spark, units), sources


def read_live(spark: SparkSession, kafka_options: Mapping[str, str], source: ClusterSource) -> DataFrame:
    """All records of `__consumer_offsets` between `source.bounds` (captured just before), read by
    Spark's Kafka source: explicit partitions and offsets, read_committed like the core reader.
    One Spark partition per Kafka partition (no `minPartitions`)."""
    if not source.bounds:
        raise ValueError("a live read needs the partition bounds of __consumer_offsets")
    partitions = sorted(p for p, (low, high) in source.bounds.items() if high > low)
    if not partitions:
        schema: Any = spark_schema(RAW_SCHEMA)
        return spark.createDataFrame([], schema)
    starting = {OFFSETS_TOPIC: {str(p): source.bounds[p][0] for p in partitions}}
    ending = {OFFSETS_TOPIC: {str(p): source.bounds[p][1] for p in partitions}}
    frame = (
        spark.read.format("kafka")
        .options(**kafka_options)
        .option("assign", json.dumps({OFFSETS_TOPIC: partitions}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("kafka.isolation.level", "read_committed")
        .option("failOnDataLoss", "true")
        # The read ends at fixed offsets: a fetch that finds nothing new (a partition's last
        # poll) has nothing to wait for, and the broker's 500 ms default cost ~0.5 s per partition
        # (50 partitions: 15 s scanning 1.2M records, 3-5 s with 1 ms; docs/benchmarks.md, "Live mode").
        .option("kafka.fetch.max.wait.ms", "10")
        .load()
    )
    return frame.select(
        F.lit(source.name).alias("cluster"),
        F.col("partition").cast("int"),
        F.col("offset").cast("long"),
        F.unix_millis(F.col("timestamp")).alias("timestamp"),
        F.col("key"),
        F.col("value"),
    )


def live_records(frame: DataFrame, tasks: int | None = None) -> Records:
    """`read_live`'s frame as the audit's input: each Spark partition is one whole Kafka partition,
    so the tasks audit it where it was read (no shuffle). Kafka's default 50 partitions would make
    50 tasks, each with its fixed costs, and the decision's steps inherit them: whole partitions
    are merged (a coalesce, no shuffle) into `tasks`, by default as many as for exports."""
    wanted = tasks or default_tasks(frame.sparkSession)
    if frame.rdd.getNumPartitions() > wanted:
        frame = frame.coalesce(wanted)
    return FrameRecords(frame, clustered=True)
