"""The distributed part of the audit: raw records -> compacted offsets (JVM) + the core ledger over
everything else (Python workers) -> per-group and per-partition DataFrames. Nothing is collected
here: the driver takes only aggregates and the groups a policy selects (`job.py`).

1. OffsetCommit records (types 0 and 1, nearly all of a log) are decoded by Spark SQL expressions
   (`jvm_codec`) and compacted in the JVM to the latest record per (cluster, partition, key without
   its type), with fixed-width hash-aggregation buffers: counters plus `max_by(field, offset)` per
   decoded field (integers only; no string or binary in the buffer). The key is decoded after the
   aggregation, on the survivors only (`slots`, about one row per live offset).
2. A survivor the JVM could not decode (unknown version, corrupt bytes, rare v4 forms: status
   PYTHON) or whose key is not decodable, and every record that is not an OffsetCommit (group
   metadata, KIP-848, share/streams and unknown types) go to the Python workers: per (cluster,
   partition) the core `OffsetsLedger` (with come-back history) replays them in log order
   (`replay.replay_partition`), exactly as before. A survivor with non-empty metadata gets its
   string from its raw record (a join on the records that are not the plain empty-metadata shape).
3. A group lives in one partition; its offsets are the union of the JVM's and the ledger's (each
   offset key has exactly one survivor, on one side), and its group state is the ledger's (a group
   with offsets only is a simple group, as in the ledger).
Why compacting first is exact: docs/spark-audit.md ("Why compacting commits first is exact").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, StructField, StructType

from groupwarden.fleet.jvm_codec import (
    OK,
    PYTHON,
    decode_keys,
    decode_values,
    is_commit_key,
    metadata,
    topic_id,
)
from groupwarden.fleet.ledger_job import compact_counted
from groupwarden.fleet.replay import replay_partition
from groupwarden.fleet.schema import LEDGER_INPUT_SCHEMA, LEDGER_ROW_SCHEMA, spark_schema

_VALUE_FIELDS = (
    "v_status",
    "v_offset",
    "v_epoch",
    "v_commit",
    "v_expire",
    "v_meta_len",
    "v_tid_hi",
    "v_tid_lo",
)

# The two shapes brokers write for a commit without metadata: v3, and v4 with no tag or only the
# TopicId. Records of any other shape may need their bytes again after compaction (metadata, or
# the core codec): only those are kept for the join.
_PLAIN_VALUE = (
    "(length(value) = 24 and substring(value, 1, 2) = X'0003' and substring(value, 15, 2) = X'0000')"
    " or (substring(value, 1, 2) = X'0004' and substring(value, 15, 1) = X'01' and"
    " ((length(value) = 24 and substring(value, 24, 1) = X'00')"
    " or (length(value) = 42 and substring(value, 24, 3) = X'010010')))"
)

# What a group row holds besides its scalars (members, a streams topology): only the selected
# groups need them (on the driver).
MEMBER_COLUMNS = ("classic_members", "consumer_members", "regex_topics", "streams_topology")

OFFSET_COLUMNS = (
    "cluster",
    "partition",
    "group",
    "topic",
    "tp",
    "offset",
    "commit_time_ms",
    "expire_time_ms",
    "leader_epoch",
    "metadata",
    "topic_id",
)


@dataclass
class Ledgers:
    """The audit's distributed state (persisted DataFrames; `release()` when done)."""

    slots: DataFrame  # compacted OffsetCommit survivors, decoded
    python_rows: DataFrame  # LEDGER_ROW_SCHEMA rows of the Python ledgers
    offsets: DataFrame  # every live offset: OFFSET_COLUMNS
    groups: DataFrame  # one row per group (GROUP_ROW fields but members and offsets) + cluster/partition
    members: DataFrame  # (cluster, group, MEMBER_COLUMNS) of the groups the Python ledgers hold
    partitions: DataFrame  # per (cluster, partition) counters
    comebacks: DataFrame  # (cluster, group, kind, empty_since_ms, returned_ms)
    _persisted: dict[str, DataFrame] = field(default_factory=dict)

    def parts(self) -> dict[str, DataFrame]:
        """The persisted frames by what they hold, in the order they are computed (benchmarks
        materialise them one by one to see where the time goes)."""
        return dict(self._persisted)

    def release(self) -> None:
        for frame in self._persisted.values():
            frame.unpersist()


def compacted_commits(raw: DataFrame) -> DataFrame:
    """Latest OffsetCommit record per (cluster, partition, key without its type), decoded."""
    commits = raw.where(is_commit_key()).select(
        "cluster",
        "partition",
        "offset",
        "timestamp",
        F.expr("substring(key, 3)").alias("slot"),
        "value",
    )
    # Shuffled by key as raw records, then decoded and aggregated: no map-side (partial)
    # aggregation. A key's commits are spread over the whole log, so a partial aggregation per
    # input split reduces little, and its buffers (counters + a max_by pair per decoded field) are
    # far wider than the raw record: it spilled, and its shuffle was wider. Measured on 10M commits
    # (docs/benchmarks.md, issue 12, third round): 69.5 -> 30.2 JVM CPU-s, 38.2 -> 15.9 s.
    decoded = decode_values(commits.repartition("cluster", "partition", "slot"))
    agg = decoded.groupBy("cluster", "partition", "slot").agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.when(F.col("value").isNull(), 1).otherwise(0)).alias("tombstones"),
        F.min(F.when(F.col("timestamp") >= 0, F.col("timestamp"))).alias("earliest_ms"),
        F.max("timestamp").alias("latest_ms"),
        F.min("offset").alias("first_offset"),
        F.max("offset").alias("pos"),
        F.max_by("timestamp", "offset").alias("ts"),
        *[F.max_by(name, "offset").alias(name) for name in _VALUE_FIELDS],
    )
    return decode_keys(agg)


def not_plain(raw: DataFrame) -> DataFrame:
    """Records that are not plain commits: everything that is not an OffsetCommit, and commits of a
    rarer shape (one of them may be the survivor whose bytes are needed again). A second scan of
    the input (Spark cannot feed one scan to two aggregations without caching the whole input,
    which does not fit a default heap at 10M records); it reads and filters, it does not decode."""
    return raw.where(
        ~is_commit_key() | (F.col("value").isNotNull() & ~F.coalesce(F.expr(_PLAIN_VALUE), F.lit(False)))
    )


def _python_input(frame: DataFrame) -> DataFrame:
    """Raw-shaped rows -> the replay's input (each row stands for itself)."""
    return frame.select(
        "cluster",
        "partition",
        "offset",
        "timestamp",
        "key",
        "value",
        F.lit(1).cast("long").alias("records"),
        F.when(F.col("value").isNull(), 1).otherwise(0).cast("long").alias("tombstones"),
        F.col("timestamp").alias("earliest_ms"),
        F.col("timestamp").alias("latest_ms"),
        F.col("offset").alias("first_offset"),
    )


def build_ledgers(raw: DataFrame, *, keep_history: bool = True) -> Ledgers:
    storage = StorageLevel.MEMORY_AND_DISK
    # The key bytes stay only where the JVM could not decode the key (the Python ledger needs them
    # there): the persisted survivors are read four times and should fit a default heap.
    slots = compacted_commits(raw).withColumn("slot", F.when(~F.col("k_ok"), F.col("slot"))).persist(storage)
    others = not_plain(raw).persist(storage)
    needs_bytes = slots.where(
        F.col("k_ok")
        & ((F.col("v_status") == PYTHON) | ((F.col("v_status") == OK) & (F.col("v_meta_len") > 0)))
    ).select("cluster", "partition", F.col("pos").alias("offset"), "k_ok", "group", "topic", "tp")
    fetched = others.where(is_commit_key()).join(needs_bytes, ["cluster", "partition", "offset"], "inner")
    # Persisted (few rows): a barrier, so the filters below do not get the whole decode expression
    # pushed into them (the optimizer would inline it once per reference: generated code too large).
    fetched_values = decode_values(fetched).persist(storage)
    with_metadata = fetched_values.where(F.col("v_status") == OK).select(
        "cluster",
        "partition",
        F.col("offset").alias("pos"),
        metadata("value", "v_meta_start", "v_meta_len").alias("metadata"),
    )
    to_python = fetched_values.where(F.col("v_status") == PYTHON).select(*raw.columns)
    bad_keys = slots.where(~F.col("k_ok")).select(
        "cluster",
        "partition",
        F.col("pos").alias("offset"),
        F.col("ts").alias("timestamp"),
        F.concat(F.lit(b"\x00\x01"), F.col("slot")).alias("key"),
        F.lit(None).cast("binary").alias("value"),
    )
    python_input = _python_input(others.where(~is_commit_key())).unionByName(
        _python_input(to_python.unionByName(bad_keys))
    )

    def replay(table: pa.Table) -> pa.Table:
        return replay_partition(compact_counted(table, keep_history))

    python_rows = (
        python_input.select(*LEDGER_INPUT_SCHEMA.names)
        .groupBy("cluster", "partition")
        .applyInArrow(replay, schema=spark_schema(LEDGER_ROW_SCHEMA))
        .persist(storage)
    )

    plain = slots.where(F.col("k_ok") & (F.col("v_status") == OK))
    jvm_offsets = plain.join(with_metadata, ["cluster", "partition", "pos"], "left").select(
        "cluster",
        "partition",
        "group",
        "topic",
        "tp",
        F.col("v_offset").alias("offset"),
        F.col("v_commit").alias("commit_time_ms"),
        F.when(F.col("v_expire") >= 0, F.col("v_expire")).alias("expire_time_ms"),
        F.when(F.col("v_epoch") >= 0, F.col("v_epoch")).alias("leader_epoch"),
        F.coalesce(F.col("metadata"), F.lit("")).alias("metadata"),
        topic_id("v_tid_hi", "v_tid_lo").alias("topic_id"),
    )
    python_offsets = (
        python_rows.where(F.col("row_kind") == "group")
        .select("cluster", "partition", "group", F.explode("offsets").alias("o"))
        .select(
            "cluster",
            "partition",
            "group",
            F.col("o.topic").alias("topic"),
            F.col("o.partition").alias("tp"),
            F.col("o.offset").alias("offset"),
            F.col("o.commit_time_ms").alias("commit_time_ms"),
            F.col("o.expire_time_ms").alias("expire_time_ms"),
            F.col("o.leader_epoch").alias("leader_epoch"),
            F.col("o.metadata").alias("metadata"),
            F.col("o.topic_id").alias("topic_id"),
        )
    )
    # Not persisted: a projection of the persisted survivors and Python rows (+ a join with the few
    # fetched metadata strings), computed again for each of its three readers (per-group totals,
    # the selected offsets, the Parquet table) rather than held as a second copy of every offset
    # next to `slots` in a default heap (docs/benchmarks.md, issue 12, second round).
    offsets = jvm_offsets.unionByName(python_offsets)

    per_group = offsets.groupBy("cluster", "group").agg(
        F.first("partition").alias("o_partition"),
        F.count(F.lit(1)).alias("o_count"),
        F.max("commit_time_ms").alias("last_commit_ms"),
    )
    ledger_groups = python_rows.where(F.col("row_kind") == "group").drop(
        "offsets", "offset_count", *MEMBER_COLUMNS
    )
    # Not persisted here: the audit persists it once with its `selected` column (job.py). Narrow
    # (the members' lists stay in `python_rows`; only the selected groups need them).
    groups = ledger_groups.join(per_group, ["cluster", "group"], "full_outer").select(
        "cluster",
        F.coalesce("partition", "o_partition").alias("partition"),
        "group",
        F.coalesce("kind", F.lit("simple")).alias("kind"),
        F.when(F.col("row_kind").isNull(), F.lit(""))
        .otherwise(F.col("protocol_type"))
        .alias("protocol_type"),
        "generation",
        "protocol",
        "current_state_timestamp_ms",
        "group_epoch",
        F.coalesce("member_count", F.lit(0)).alias("member_count"),
        "empty_since_ms",
        F.when(F.col("row_kind").isNull(), F.array().cast("array<string>"))
        .otherwise(F.col("subscribed_topics"))
        .alias("subscribed_topics"),
        F.coalesce("o_count", F.lit(0)).cast("int").alias("offset_count"),
        "last_commit_ms",
        F.size(F.coalesce("comebacks", F.array())).alias("comeback_count"),
    )
    members = python_rows.where(F.col("row_kind") == "group").select("cluster", "group", *MEMBER_COLUMNS)

    comebacks = (
        python_rows.where(F.col("row_kind").isin("group", "history"))
        .select("cluster", "group", "kind", F.explode("comebacks").alias("c"))
        .select("cluster", "group", "kind", "c.empty_since_ms", "c.returned_ms")
    )

    partitions = _partition_counters(slots, others, python_rows)
    return Ledgers(
        slots,
        python_rows,
        offsets,
        groups,
        members,
        partitions,
        comebacks,
        {
            "compacted commits (JVM decode + aggregation)": slots,
            "records that are not plain commits (second scan)": others,
            "survivors' bytes joined back and decoded": fetched_values,
            "Python ledgers over the rest": python_rows,
        },
    )


def _partition_counters(slots: DataFrame, others: DataFrame, python_rows: DataFrame) -> DataFrame:
    from_slots = slots.select(
        "cluster",
        "partition",
        "records",
        "tombstones",
        "earliest_ms",
        "latest_ms",
        "first_offset",
        F.col("pos").alias("last_offset"),
        F.when(F.col("k_ok") & (F.col("v_status") != PYTHON), 1).otherwise(0).alias("replayed"),
        F.lit(0).alias("corrupt"),
        F.lit(0).alias("unknown"),
    )
    not_commits = others.where(~is_commit_key()).select(
        "cluster",
        "partition",
        F.lit(1).alias("records"),
        F.when(F.col("value").isNull(), 1).otherwise(0).alias("tombstones"),
        F.when(F.col("timestamp") >= 0, F.col("timestamp")).alias("earliest_ms"),
        F.col("timestamp").alias("latest_ms"),
        F.col("offset").alias("first_offset"),
        F.col("offset").alias("last_offset"),
        F.lit(0).alias("replayed"),
        F.lit(0).alias("corrupt"),
        F.lit(0).alias("unknown"),
    )
    from_python = python_rows.where(F.col("row_kind") == "partition").select(
        "cluster",
        "partition",
        F.lit(0).alias("records"),
        F.lit(0).alias("tombstones"),
        F.lit(None).cast("long").alias("earliest_ms"),
        F.lit(None).cast("long").alias("latest_ms"),
        F.lit(None).cast("long").alias("first_offset"),
        F.lit(None).cast("long").alias("last_offset"),
        "replayed",
        "corrupt",
        "unknown",
    )
    every = from_slots.unionByName(not_commits).unionByName(from_python)
    return every.groupBy("cluster", "partition").agg(
        F.sum("records").cast("long").alias("records"),
        F.sum("tombstones").cast("long").alias("tombstones"),
        F.sum("replayed").cast("long").alias("replayed"),
        F.sum("corrupt").cast("long").alias("corrupt"),
        F.sum("unknown").cast("long").alias("unknown"),
        F.min("first_offset").alias("first_offset"),
        (F.max("last_offset") + 1).alias("next_offset"),
        F.min("earliest_ms").alias("earliest_ms"),
        F.max("latest_ms").alias("latest_ms"),
    )


def with_selection(groups: DataFrame, selects: Any) -> DataFrame:
    """`groups` with `selected` by the policies' own matcher (`selects(group_id) -> bool`), in
    the Python workers: exactly `GroupMatcher.matches_id`, no translation of globs. One pass (the
    rows go through as Arrow batches), so the groups are computed once, without a join."""

    def run(batches: Any) -> Any:
        for batch in batches:
            ids = batch.column("group").to_pylist()
            yield batch.append_column("selected", pa.array([selects(g) for g in ids], pa.bool_()))

    schema = StructType([*groups.schema.fields, StructField("selected", BooleanType(), nullable=False)])
    return groups.mapInArrow(run, schema)
