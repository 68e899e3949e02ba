"""Arrow schemas of the audit: raw records in, replayed ledger rows out (Spark types derive from them)."""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa

EXPORT_METADATA: Final = "_groupwarden_export.json"  # leading "_": Spark's Parquet reader skips it
# `__share_group_state` records (RAW_SCHEMA), read by the driver; "_" keeps them out of Spark's read.
SHARE_STATE_EXPORT: Final = "_share_group_state.parquet"

# A raw `__consumer_offsets` record as exported (`export-offsets-log`) and as read live.
RAW_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),  # record timestamp, epoch milliseconds (-1 when the log has none)
        ("key", pa.binary()),
        ("value", pa.binary()),  # null: a tombstone
    ]
)

# What a replay worker receives: raw columns plus what each row stands for after compaction.
LEDGER_INPUT_SCHEMA: Final = pa.schema(
    [
        *RAW_SCHEMA,
        ("records", pa.int64()),
        ("tombstones", pa.int64()),
        ("earliest_ms", pa.int64()),
        ("latest_ms", pa.int64()),
        ("first_offset", pa.int64()),
    ]
)

_TOPICS = pa.list_(pa.string())

OFFSET_STRUCT: Final = pa.struct(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("commit_time_ms", pa.int64()),
        ("expire_time_ms", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("topic_id", pa.string()),
    ]
)

# One row per group of a replayed partition (`groupwarden.offsets_log.rows.group_row` + the
# cluster, its come-backs), or one row of per-partition counters (`row_kind` says which).
LEDGER_ROW_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("partition", pa.int32()),
        ("row_kind", pa.string()),  # "group" | "history" (gone, came back once) | "partition"
        ("group", pa.string()),
        ("kind", pa.string()),
        ("protocol_type", pa.string()),
        ("generation", pa.int32()),
        ("protocol", pa.string()),
        ("current_state_timestamp_ms", pa.int64()),
        ("group_epoch", pa.int32()),
        ("member_count", pa.int32()),
        (
            "classic_members",
            pa.list_(
                pa.struct(
                    [
                        ("member_id", pa.string()),
                        ("group_instance_id", pa.string()),
                        ("client_id", pa.string()),
                        ("client_host", pa.string()),
                        ("subscribed_topics", _TOPICS),
                    ]
                )
            ),
        ),
        (
            "consumer_members",
            pa.list_(
                pa.struct([("member_id", pa.string()), ("topic_names", _TOPICS), ("regex", pa.string())])
            ),
        ),
        ("regex_topics", pa.list_(pa.struct([("regex", pa.string()), ("topics", _TOPICS)]))),
        ("empty_since_ms", pa.int64()),
        ("subscribed_topics", _TOPICS),
        ("offset_count", pa.int32()),
        ("offsets", pa.list_(OFFSET_STRUCT)),
        (
            "streams_topology",
            pa.struct(
                [
                    ("epoch", pa.int32()),
                    ("source_topics", _TOPICS),
                    ("repartition_topics", _TOPICS),
                    ("changelog_topics", _TOPICS),
                ]
            ),
        ),
        ("comebacks", pa.list_(pa.struct([("empty_since_ms", pa.int64()), ("returned_ms", pa.int64())]))),
        # row_kind "partition": what the partition held and what the codec made of it
        ("records", pa.int64()),
        ("tombstones", pa.int64()),
        ("replayed", pa.int64()),  # records the ledger applied after compacting commits per key
        ("corrupt", pa.int64()),
        ("unknown", pa.int64()),
        ("first_offset", pa.int64()),
        ("next_offset", pa.int64()),
        ("earliest_ms", pa.int64()),
        ("latest_ms", pa.int64()),
    ]
)


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark StructType of an Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
