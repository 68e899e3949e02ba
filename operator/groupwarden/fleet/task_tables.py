"""The audit's fleet-sized tables, `groups` and `offsets`, written by the tasks with pyarrow (never
via the driver, never through Spark's rows): each task writes its units' slices as row groups of
one file per table (`part-NNNNN.parquet`, the task's partition id). Same columns and types as the
in-memory path (`outputs.groups_table` / `offsets_table`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from groupwarden.core.snapshot import GroupKind, GroupState

_MS = pa.timestamp("ms", tz="UTC")
GROUPS_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("group", pa.string()),
        ("kind", pa.string()),
        ("state", pa.string()),
        ("selected", pa.bool_()),
        ("protocol_type", pa.string()),
        ("member_count", pa.int32()),
        ("subscribed_topics", pa.list_(pa.string())),
        ("empty_since", _MS),
        ("offset_count", pa.int32()),
        ("last_commit", _MS),
        ("generation", pa.int32()),
        ("group_epoch", pa.int32()),
        ("comebacks", pa.int32()),
    ]
)
OFFSETS_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("commit_time", _MS),
        ("expire_time", _MS),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("topic_id", pa.string()),
    ]
)
TABLES = {"groups": GROUPS_SCHEMA, "offsets": OFFSETS_SCHEMA}
# The Parquet columns (leaf paths) whose values repeat: a few clusters, kinds, states and protocol
# types, the fleet's topics and topic ids, small counts and partition numbers. Only these are
# dictionary-encoded: the others (group ids, offsets, times) are nearly unique, where a dictionary
# costs a hash per value and is given up for plain encoding once it outgrows its page.
DICTIONARY_COLUMNS: dict[str, tuple[str, ...]] = {
    "groups": (
        "cluster",
        "kind",
        "state",
        "protocol_type",
        "member_count",
        "subscribed_topics.list.element",
        "offset_count",
        "comebacks",
    ),
    "offsets": ("cluster", "topic", "partition", "leader_epoch", "metadata", "topic_id"),
}

# Kinds whose state the log tells by their members (`offsets_log.snapshot.group_state`).
_MEMBERSHIP_KINDS = (
    GroupKind.CLASSIC.value,
    GroupKind.CONSUMER.value,
    GroupKind.SHARE.value,
    GroupKind.STREAMS.value,
)


def _state(groups: pa.Table) -> pa.Array:
    """A selected group's state as its snapshot says it (simple: Empty; membership kinds: members ->
    Stable, none -> Empty; other kinds: Unknown); null for groups no policy selects."""
    kinds = np.array(groups.column("kind").to_pylist(), dtype=object)
    members = groups.column("member_count").fill_null(0).to_numpy()
    selected = groups.column("selected").fill_null(False).to_numpy(zero_copy_only=False)
    state = np.full(len(kinds), GroupState.UNKNOWN.value, dtype=object)
    membership = np.isin(kinds, _MEMBERSHIP_KINDS)
    state[membership & (members > 0)] = GroupState.STABLE.value
    state[(membership & (members == 0)) | (kinds == GroupKind.SIMPLE.value)] = GroupState.EMPTY.value
    return pa.array(state.tolist(), pa.string(), mask=~selected.astype(bool))


def _ms(column: pa.ChunkedArray | pa.Array) -> pa.Array | pa.ChunkedArray:
    return pc.cast(column, _MS)


def groups_slice(groups: pa.Table) -> pa.Table:
    """`TASK_ROW_SCHEMA` group rows -> rows of the `groups` table."""
    return pa.Table.from_arrays(
        [
            groups.column("cluster"),
            groups.column("group"),
            groups.column("kind"),
            _state(groups),
            groups.column("selected"),
            groups.column("protocol_type"),
            groups.column("member_count"),
            groups.column("subscribed_topics"),
            _ms(groups.column("empty_since_ms")),
            groups.column("offset_count"),
            _ms(groups.column("last_commit_ms")),
            groups.column("generation"),
            groups.column("group_epoch"),
            groups.column("comeback_count"),
        ],
        schema=GROUPS_SCHEMA,
    )


def offsets_slice(offsets: pa.Table) -> pa.Table:
    """`TASK_ROW_SCHEMA` offset rows -> rows of the `offsets` table."""
    return pa.Table.from_arrays(
        [
            offsets.column("cluster"),
            offsets.column("group"),
            offsets.column("topic"),
            offsets.column("tp"),
            offsets.column("offset"),
            _ms(offsets.column("commit_time_ms")),
            _ms(offsets.column("expire_time_ms")),
            offsets.column("leader_epoch"),
            offsets.column("metadata"),
            offsets.column("topic_id"),
        ],
        schema=OFFSETS_SCHEMA,
    )


class TableWriters:
    """One file per table for one task, a row group per unit (opened on the first slice)."""

    def __init__(self, directory: str, task: int) -> None:
        self._directory = Path(directory)
        self._name = f"part-{task:05d}.parquet"
        self._writers: dict[str, pq.ParquetWriter] = {}

    def write(self, groups: pa.Table, offsets: pa.Table) -> None:
        for table, slice_ in (("groups", groups_slice(groups)), ("offsets", offsets_slice(offsets))):
            writer = self._writers.get(table)
            if writer is None:
                writer = self._writers[table] = pq.ParquetWriter(
                    self._directory / table / self._name,
                    TABLES[table],
                    compression="snappy",
                    use_dictionary=list(DICTIONARY_COLUMNS[table]),
                )
            writer.write_table(slice_)

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def prepare(out: Path) -> None:
    """Empty `groups/` and `offsets/` under `out` before the tasks write into them."""
    for table in TABLES:
        directory = out / table
        directory.mkdir(parents=True, exist_ok=True)
        for old in directory.iterdir():
            if old.is_file():
                old.unlink()


def complete(out: Path) -> None:
    """A table no task wrote (no records at all) gets an empty file, so it can be read."""
    for table, schema in TABLES.items():
        directory = out / table
        if not any(directory.glob("*.parquet")):
            pq.write_table(schema.empty_table(), directory / "part-00000.parquet")
