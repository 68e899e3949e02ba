"""The distributed part: raw records -> per-partition ledgers (rows of `LEDGER_ROW_SCHEMA`).

1. OffsetCommit records (types 0 and 1, nearly all of a busy log) are compacted in the JVM: per
   (cluster, partition, key without its type) only the record with the highest offset is kept,
   with counters of what it stands for. This is exact for the ledger: an offset's state is its
   latest record (types 0 and 1 name the same offset), and no other record type reads offsets
   (proof in docs/spark-audit.md; `tests/unit/fleet` replays both ways).
2. Every other record (group metadata, KIP-848 records, tombstones of those) stays, in log order,
   because history matters there (KIP-848 Empty-since, come-backs).
3. Per (cluster, partition), a Python worker applies them with the core ledger (`replay.py`).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from groupwarden.fleet.replay import replay_partition
from groupwarden.fleet.schema import LEDGER_ROW_SCHEMA, spark_schema

# Types 0 and 1: first key byte 0x00, second 0x00 or 0x01 (the ledger's fast-path test).
_IS_COMMIT = "length(key) >= 2 AND substring(key, 1, 1) = X'00' AND substring(key, 2, 1) IN (X'00', X'01')"


def compact_commits(raw: DataFrame) -> DataFrame:
    """Raw records -> the ledger's input: latest commit per offset key + all other records, each
    with the counters of the raw records it stands for."""
    is_commit = F.coalesce(F.expr(_IS_COMMIT), F.lit(False))
    commits = (
        raw.where(is_commit)
        .groupBy("cluster", "partition", F.expr("substring(key, 3)").alias("offset_key"))
        .agg(
            F.max_by(F.struct("offset", "timestamp", "key", "value"), "offset").alias("latest"),
            F.count(F.lit(1)).alias("records"),
            F.count_if(F.col("value").isNull()).alias("tombstones"),
            F.min("timestamp").alias("earliest_ms"),
            F.max("timestamp").alias("latest_ms"),
            F.min("offset").alias("first_offset"),
        )
        .select(
            "cluster",
            "partition",
            "latest.*",
            "records",
            "tombstones",
            "earliest_ms",
            "latest_ms",
            "first_offset",
        )
    )
    others = raw.where(~is_commit).select(
        "cluster",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        F.lit(1).cast("long").alias("records"),
        F.col("value").isNull().cast("long").alias("tombstones"),
        F.col("timestamp").alias("earliest_ms"),
        F.col("timestamp").alias("latest_ms"),
        F.col("offset").alias("first_offset"),
    )
    return commits.unionByName(others)


def ledger_rows(raw: DataFrame) -> Any:
    """Per-partition ledgers of every cluster in `raw`, as a DataFrame of `LEDGER_ROW_SCHEMA`."""
    return (
        compact_commits(raw)
        .groupBy("cluster", "partition")
        .applyInArrow(replay_partition, schema=spark_schema(LEDGER_ROW_SCHEMA))
    )
