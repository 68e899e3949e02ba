"""Arrow schemas of the audit: raw records in, replayed ledger rows out (Spark types derive from them)."""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa

from groupwarden.offsets_log.rows import GROUP_ROW_FIELDS, MEMBER_FIELDS, OFFSET_ROW_FIELDS

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

# Idle-age and pause histogram buckets (upper bound in seconds): the tasks count into them
# (`task_rows.summaries`), the report draws them.
IDLE_EDGES: tuple[tuple[str, int | None], ...] = (
    ("< 1m", 60),
    ("1m-10m", 600),
    ("10m-1h", 3600),
    ("1h-6h", 6 * 3600),
    ("6h-1d", 86400),
    ("1d-3d", 3 * 86400),
    ("3d-7d", 7 * 86400),
    ("7d-14d", 14 * 86400),
    ("14d-30d", 30 * 86400),
    ("30d-90d", 90 * 86400),
    ("90d-1y", 365 * 86400),
    (">= 1y", None),
)

_TOPICS = pa.list_(pa.string())

# Column names of the task rows (`TASK_ROW_SCHEMA`) as the ledger's rows name them
# (`offsets_log.rows`): an offset row (its partition is `tp` here: `partition` is the
# `__consumer_offsets` partition), a group row without its members and offsets, its members.
OFFSET_COLUMNS: Final = ("group", *("tp" if f == "partition" else f for f in OFFSET_ROW_FIELDS))
MEMBER_COLUMNS: Final = MEMBER_FIELDS
GROUP_COLUMNS: Final = tuple(f for f in GROUP_ROW_FIELDS if f not in (*MEMBER_FIELDS, "offsets"))

CLASSIC_MEMBERS: Final = pa.list_(
    pa.struct(
        [
            ("member_id", pa.string()),
            ("group_instance_id", pa.string()),
            ("client_id", pa.string()),
            ("client_host", pa.string()),
            ("subscribed_topics", _TOPICS),
        ]
    )
)
CONSUMER_MEMBERS: Final = pa.list_(
    pa.struct([("member_id", pa.string()), ("topic_names", _TOPICS), ("regex", pa.string())])
)
REGEX_TOPICS: Final = pa.list_(pa.struct([("regex", pa.string()), ("topics", _TOPICS)]))
STREAMS_TOPOLOGY: Final = pa.struct(
    [
        ("epoch", pa.int32()),
        ("source_topics", _TOPICS),
        ("repartition_topics", _TOPICS),
        ("changelog_topics", _TOPICS),
    ]
)

# What one task of the audit returns per (cluster, `__consumer_offsets` partition), one flat table
# (`row_kind` says which columns a row uses):
# - "group": one row per group (the `groups` table's columns; the members' lists and the streams
#   topology only for the groups a policy selects: only the driver's decision needs them);
# - "offset": one row per live offset (the `offsets` table), with its group's `selected`;
# - "comeback": one row per come-back (`empty_since_ms`, `returned_ms`), with `selected`;
# - "partition": the partition's counters.
TASK_ROW_SCHEMA: Final = pa.schema(
    [
        ("cluster", pa.string()),
        ("partition", pa.int32()),
        ("row_kind", pa.string()),
        ("group", pa.string()),
        ("selected", pa.bool_()),
        # group
        ("kind", pa.string()),
        ("protocol_type", pa.string()),
        ("generation", pa.int32()),
        ("protocol", pa.string()),
        ("current_state_timestamp_ms", pa.int64()),
        ("group_epoch", pa.int32()),
        ("member_count", pa.int32()),
        ("classic_members", CLASSIC_MEMBERS),
        ("consumer_members", CONSUMER_MEMBERS),
        ("regex_topics", REGEX_TOPICS),
        ("streams_topology", STREAMS_TOPOLOGY),
        ("empty_since_ms", pa.int64()),  # also a come-back's start
        ("subscribed_topics", _TOPICS),
        ("offset_count", pa.int32()),
        ("last_commit_ms", pa.int64()),
        ("comeback_count", pa.int32()),
        # offset
        ("topic", pa.string()),
        ("tp", pa.int32()),
        ("offset", pa.int64()),
        ("commit_time_ms", pa.int64()),
        ("expire_time_ms", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("topic_id", pa.string()),
        # comeback
        ("returned_ms", pa.int64()),
        # partition: what the partition held and what the codec made of it
        ("records", pa.int64()),
        ("tombstones", pa.int64()),
        ("replayed", pa.int64()),  # records applied after compacting commits per key
        ("corrupt", pa.int64()),
        ("unknown", pa.int64()),
        ("first_offset", pa.int64()),
        ("next_offset", pa.int64()),
        ("earliest_ms", pa.int64()),
        ("latest_ms", pa.int64()),
        # "kinds": per group kind, groups (`count`), their offsets and the selected groups' offsets;
        # "idle": Empty groups per (kind, selected, idle-age `bucket`; -1: no idle time known);
        # "pauses": come-backs per (kind, pause `bucket`) (buckets: IDLE_EDGES)
        ("bucket", pa.int32()),
        ("count", pa.int64()),
        ("offsets", pa.int64()),
        ("selected_offsets", pa.int64()),
        # "counted": the decision's first step over the unit's selected groups (`fleet.decide`)
        ("payload", pa.binary()),
    ]
)


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark StructType of an Arrow schema."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(schema)
