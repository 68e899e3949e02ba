"""The audit's fleet-sized outputs, written by the executors from the tasks' rows (never via the
driver): the `offsets` and `groups` Parquet tables."""

from __future__ import annotations

import gc
import warnings
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from groupwarden.core.snapshot import GroupKind, GroupState

# Kinds whose state the log tells by their members (`offsets_log.snapshot.group_state`).
_MEMBERSHIP_KINDS = (
    GroupKind.CLASSIC.value,
    GroupKind.CONSUMER.value,
    GroupKind.SHARE.value,
    GroupKind.STREAMS.value,
)


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
