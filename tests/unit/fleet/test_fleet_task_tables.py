"""The `groups` and `offsets` tables as written (`fleet/task_tables.py` by the tasks, `outputs` on
the driver): the same rows as before, dictionary-encoded only on the columns whose values repeat
(`DICTIONARY_COLUMNS`: kinds, states, protocol types, topics, small counts), never on the nearly
unique ones (group ids, offsets, times)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_fleet_driver_side import NOW, policy
from test_fleet_partition_audit import raw_table

from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.partition_audit import audit_unit
from groupwarden.fleet.sources import ClusterSource
from groupwarden.fleet.task_tables import (
    DICTIONARY_COLUMNS,
    TABLES,
    TableWriters,
    groups_slice,
    offsets_slice,
    prepare,
)
from groupwarden.testing.fleet_oracle import collect_reference, decide_reference
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytestmark = pytest.mark.unit

DICTIONARY_ENCODINGS = {"RLE_DICTIONARY", "PLAIN_DICTIONARY"}


def dictionary_columns(path: Path) -> dict[str, bool]:
    """Per leaf column of a Parquet file: whether every row group dictionary-encodes it."""
    metadata = pq.ParquetFile(path).metadata
    encoded: dict[str, bool] = {}
    for group in range(metadata.num_row_groups):
        row_group = metadata.row_group(group)
        for index in range(row_group.num_columns):
            chunk = row_group.column(index)
            uses = bool(DICTIONARY_ENCODINGS & set(chunk.encodings)) and chunk.has_dictionary_page
            encoded[chunk.path_in_schema] = encoded.get(chunk.path_in_schema, True) and uses
    return encoded


def expected_encoding(table: str, path: Path) -> dict[str, bool]:
    schema = pq.ParquetFile(path).schema
    columns = [schema.column(i).path for i in range(len(schema))]  # e.g. subscribed_topics.list.element
    assert set(DICTIONARY_COLUMNS[table]) <= set(columns), "every named column is a leaf of the table"
    return {column: column in DICTIONARY_COLUMNS[table] for column in columns}


def test_the_tasks_write_the_same_rows_dictionary_encoded_only_where_values_repeat(tmp_path: Path) -> None:
    log = list(synthetic_log(8_000, 200, partitions=2, seed=9))
    prepare(tmp_path)
    writers = TableWriters(str(tmp_path), 7)
    slices: dict[str, list[pa.Table]] = {"groups": [], "offsets": []}

    def sink(groups: pa.Table, offsets: pa.Table) -> None:
        slices["groups"].append(groups_slice(groups))
        slices["offsets"].append(offsets_slice(offsets))
        writers.write(groups, offsets)

    for partition in (0, 1):  # two units: two row groups
        mine = [r for r in log if r[3] == partition]
        audit_unit(raw_table("east", mine), sink=sink, selects=lambda g: g.startswith("app-1"), now_ms=10**13)
    writers.close()
    for table, schema in TABLES.items():
        path = tmp_path / table / "part-00007.parquet"
        written = pq.read_table(path)
        assert written.schema == schema
        assert written.to_pylist() == pa.concat_tables(slices[table]).to_pylist()
        assert written.num_rows > 0
        assert dictionary_columns(path) == expected_encoding(table, path)
    assert "group" not in DICTIONARY_COLUMNS["groups"] and "group" not in DICTIONARY_COLUMNS["offsets"]


def test_the_drivers_tables_are_encoded_as_the_tasks_write_them(tmp_path: Path) -> None:
    log = list(synthetic_log(4_000, 100, partitions=1, seed=2))
    rows = audit_unit(raw_table("east", log), selects=lambda g: g.startswith("app-1"), now_ms=10**13)
    [audit] = collect_reference(rows.to_pylist(), [ClusterSource("east", "cluster-east")])
    decide_reference([audit], [policy()], NOW, [])
    write_outputs(tmp_path, [audit], NOW, {"master": "test"})
    for table in TABLES:
        path = tmp_path / table / "part-00000.parquet"
        assert pq.read_table(path).num_rows > 0
        assert dictionary_columns(path) == expected_encoding(table, path)
