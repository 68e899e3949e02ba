"""The audit's fleet-sized outputs, written and aggregated by the executors (never via the driver):
the `offsets` and `groups` Parquet tables and the idle-age histogram of the report."""

from __future__ import annotations

import gc
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from groupwarden.core.snapshot import GroupKind, GroupState
from groupwarden.fleet.report import IDLE_EDGES

# Kinds whose state the log tells by their members (`offsets_log.snapshot.group_state`).
_MEMBERSHIP_KINDS = (
    GroupKind.CLASSIC.value,
    GroupKind.CONSUMER.value,
    GroupKind.SHARE.value,
    GroupKind.STREAMS.value,
)


def _bucket(seconds: Any) -> Any:
    expr = None
    for index, (_, upper) in enumerate(IDLE_EDGES):
        if upper is None:
            break
        expr = F.when(seconds < upper, index) if expr is None else expr.when(seconds < upper, index)
    assert expr is not None
    return expr.otherwise(len(IDLE_EDGES) - 1)


def _state() -> Any:
    kind = F.col("kind")
    return (
        F.when(kind == GroupKind.SIMPLE.value, F.lit(GroupState.EMPTY.value))
        .when(
            kind.isin(*_MEMBERSHIP_KINDS),
            F.when(F.col("member_count") > 0, F.lit(GroupState.STABLE.value)).otherwise(
                F.lit(GroupState.EMPTY.value)
            ),
        )
        .otherwise(F.lit(GroupState.UNKNOWN.value))
    )


def _write(frame: DataFrame, directory: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        frame.write.mode("overwrite").option("compression", "snappy").parquet(str(directory))
        gc.collect()


def write_tables(out: Path, groups: DataFrame, offsets: DataFrame, now: datetime) -> None:
    spark = groups.sparkSession
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
    _write(
        offsets.select(
            "cluster",
            "group",
            "topic",
            F.col("tp").alias("partition"),
            "offset",
            F.timestamp_millis("commit_time_ms").alias("commit_time"),
            F.timestamp_millis("expire_time_ms").alias("expire_time"),
            "leader_epoch",
            "metadata",
            "topic_id",
        ),
        out / "offsets",
    )
    _write(
        groups.select(
            "cluster",
            "group",
            "kind",
            F.when(F.col("selected"), _state()).alias("state"),
            "selected",
            "protocol_type",
            "member_count",
            F.when(F.col("subscribed_topics").isNotNull(), F.array_sort("subscribed_topics")).alias(
                "subscribed_topics"
            ),
            F.timestamp_millis("empty_since_ms").alias("empty_since"),
            "offset_count",
            F.timestamp_millis("last_commit_ms").alias("last_commit"),
            "generation",
            "group_epoch",
            F.col("comeback_count").cast("int").alias("comebacks"),
        ),
        out / "groups",
    )


def idle_histograms(groups: DataFrame, comebacks: DataFrame, now: datetime) -> dict[str, Any]:
    """Per cluster and group kind: how long Empty groups have been idle at `now` (since their
    Empty-since, or their last commit for simple groups; groups with neither are counted apart),
    and the come-backs' pauses, on the same buckets. Small: clusters x kinds x buckets."""
    from groupwarden.fleet.job import collect_arrow

    now_ms = int(now.timestamp() * 1000)
    idle_since = F.when(F.col("kind") == GroupKind.SIMPLE.value, F.col("last_commit_ms")).when(
        F.col("member_count") == 0, F.col("empty_since_ms")
    )
    empty = groups.where(
        F.col("kind").isin(GroupKind.SIMPLE.value, *_MEMBERSHIP_KINDS)
        & ((F.col("kind") == GroupKind.SIMPLE.value) | (F.col("member_count") == 0))
    ).select("cluster", "kind", "selected", ((F.lit(now_ms) - idle_since) / 1000).alias("idle"))
    idle = empty.groupBy(
        "cluster",
        "kind",
        "selected",
        F.when(F.col("idle").isNull(), -1).otherwise(_bucket(F.col("idle"))).alias("bucket"),
    ).count()
    pauses = (
        comebacks.select(
            "cluster", "kind", ((F.col("returned_ms") - F.col("empty_since_ms")) / 1000).alias("pause")
        )
        .groupBy("cluster", "kind", _bucket(F.col("pause")).alias("bucket"))
        .count()
    )
    return {
        "edges": [label for label, _ in IDLE_EDGES],
        "idle": collect_arrow(idle).to_pylist(),
        "comebacks": collect_arrow(pauses).to_pylist(),
    }
