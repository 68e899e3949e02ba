"""The distributed part of the audit: one Spark stage of independent tasks, each taking whole
(cluster, `__consumer_offsets` partition) units and returning their rows (`partition_audit`). No
shuffle: Kafka writes every record of a group to one partition, so a unit holds everything its
groups need (docs/spark-audit.md). Nothing is collected here: the driver takes only counters,
small per-task aggregates and the groups a policy selects (`job.py`).

Where the units come from:
- exports (`export-offsets-log`, format 2): one file per partition; the driver packs the units into
  a few tasks of about equal bytes, 4 per core (`spark.range(0, T, 1, T).mapInArrow`), each task
  reads its own files with pyarrow (Spark's file scan would split a large file across tasks);
- live: Spark's Kafka source maps one Spark partition to one Kafka partition (no `minPartitions`),
  so the same task function runs over its records with `mapInArrow`;
- any other DataFrame of raw records (`RAW_SCHEMA`; tests, notebooks): its rows are first brought
  together per (cluster, partition) by a repartition, the one shuffle of this module, on no main path.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from groupwarden.fleet.partition_audit import audit_partitions
from groupwarden.fleet.schema import RAW_SCHEMA, TASK_ROW_SCHEMA, spark_schema
from groupwarden.fleet.task_decide import (
    CLAIM_FIELD,
    DECIDE_COLUMNS,
    DECISION_ROW_KINDS,
    DECISION_SCHEMA,
    DecideSettings,
    Facts,
    Step,
    later_rows,
    run_step,
    selects_id,
)
from groupwarden.fleet.task_tables import TableWriters

Selects = Callable[[str], bool]

_frozen = False


def freeze_imports() -> None:
    """PySpark's reused Python worker runs `gc.collect()` after every task: with the imports
    (pyarrow, groupwarden) moved out of the collector's sight, that collection is cheap."""
    global _frozen
    if not _frozen:
        gc.collect()
        gc.freeze()
        _frozen = True


# The selected rows the stage hands to the decision's tasks (`TaskSettings.decision_rows`): Arrow
# IPC files, LZ4-compressed. Written once and read once, whole: writing and reading them costs less
# than Parquet's encoding and decoding (10M records' 1.24M rows: 0.66 CPU-s against 0.8-2.3); LZ4
# because uncompressed they grow to ~7 GB of scratch space at 50 clusters.
DECISION_ROWS_SUFFIX = ".arrow"
DECISION_ROWS_OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def read_decision_rows(path: str) -> pa.Table:
    with pa.OSFile(path, "rb") as source:
        return pa.ipc.open_file(source).read_all()


@dataclass(frozen=True)
class TaskSettings:
    keep_history: bool
    selects: Selects
    now_ms: int | None
    tables: str | None = None  # where the tasks write the `groups` and `offsets` tables
    # The decision's first step (COUNT, `fleet.decide`), run by the stage on each unit's selected
    # rows while they are at hand: one "counted" row per unit (its pickled result in `payload`).
    decide: DecideSettings | None = None
    # Where the tasks write their units' selected rows (groups, offsets, come-backs) for the
    # decision's later steps, one file per task, instead of returning them to Spark: the JVM would
    # turn their nested columns (members, topics) back into Arrow for the decision's tasks at a
    # cost that grows with the square of a batch (minutes per task for a whole-fleet policy).
    decision_rows: str | None = None


def _audit_tables(tables: Iterable[pa.Table], settings: TaskSettings, task: int) -> Iterator[pa.RecordBatch]:
    """One Spark task: its units' records in, their rows out (and its slices of the tables)."""
    freeze_imports()
    writers = None if settings.tables is None else TableWriters(settings.tables, task)
    decision: pa.ipc.RecordBatchFileWriter | None = None
    written_groups = 0  # the group rows in the task's file of decision rows
    try:
        for table in tables:
            enabled = gc.isenabled()
            gc.disable()  # millions of small objects, none in a cycle: reference counting frees them
            try:
                result = audit_partitions(
                    table,
                    keep_history=settings.keep_history,
                    selects=settings.selects,
                    now_ms=settings.now_ms,
                    sink=None if writers is None else writers.write,
                )
                facts = None
                audited = result
                if settings.decide is not None:
                    facts = Facts(selects_id(settings.decide))
                    result = pa.concat_tables([result, counted_rows(result, settings.decide, task, facts)])
                if settings.decision_rows is not None:
                    selected = pc.is_in(result.column("row_kind"), value_set=pa.array(DECISION_ROW_KINDS))
                    if decision is None:
                        path = Path(settings.decision_rows) / f"part-{task:05d}{DECISION_ROWS_SUFFIX}"
                        decision = pa.ipc.new_file(str(path), DECISION_SCHEMA, options=DECISION_ROWS_OPTIONS)
                    if facts is None:
                        # Columns first: the filter then copies none of the member lists.
                        later = result.select(list(DECIDE_COLUMNS)).filter(selected)
                        later = later.append_column(CLAIM_FIELD, pa.nulls(later.num_rows, pa.int64()))
                    else:
                        # Only the groups COUNT found a verdict on (the later steps need no other),
                        # with what COUNT claimed of them.
                        later = later_rows(audited, facts, written_groups)
                        written_groups += pc.sum(pc.equal(later.column("row_kind"), "group")).as_py() or 0
                    decision.write_table(later)
                    result = result.filter(pc.invert(selected))
            finally:
                if enabled:
                    gc.enable()
            yield from result.to_batches(max_chunksize=100_000)
    finally:
        if writers is not None:
            writers.close()
        if decision is not None:
            decision.close()


def counted_rows(rows: pa.Table, settings: DecideSettings, task: int, facts: Facts | None = None) -> pa.Table:
    """The COUNT step of the decision over a unit's rows, as "counted" task rows (one per cluster,
    its pickled result in `payload`)."""
    results = list(run_step(rows, Step.COUNT, settings, None, task, facts))
    n = len(results)
    columns = []
    for field in TASK_ROW_SCHEMA:
        if field.name == "cluster":
            columns.append(pa.array([c for c, _ in results], field.type))
        elif field.name == "row_kind":
            columns.append(pa.array(["counted"] * n, field.type))
        elif field.name == "payload":
            columns.append(pa.array([p for _, p in results], field.type))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=TASK_ROW_SCHEMA)


@dataclass(frozen=True)
class Unit:
    """One (cluster, partition) of an export: its files and their size."""

    cluster: str
    partition: int
    files: tuple[str, ...]
    size: int


def pack(units: Sequence[Unit], tasks: int) -> list[list[Unit]]:
    """Units into at most `tasks` lists of about equal bytes: runs of units in (cluster,
    partition) order, so that each cluster sits in few tasks (the decision's work per task and
    cluster, and plan.json's merge of the tasks' skips files, which sorts only where files
    overlap), unless runs leave the heaviest task more than `_RUNS_SLACK` heavier than packing
    the largest units first would (sizes too uneven for runs); then largest first."""
    bins = max(1, min(tasks, len(units)))
    largest_first = _largest_first(units, bins)
    runs = _runs(units, bins)
    if _heaviest(runs) <= _RUNS_SLACK * _heaviest(largest_first):
        return runs
    return largest_first


# How much heavier than the largest-first packing's heaviest task the runs' may be.
_RUNS_SLACK = 1.05


def _heaviest(packed: list[list[Unit]]) -> int:
    return max((sum(u.size for u in task) for task in packed), default=0)


def _largest_first(units: Sequence[Unit], bins: int) -> list[list[Unit]]:
    """Largest first, each to the lightest task."""
    packed: list[list[Unit]] = [[] for _ in range(bins)]
    weights = [0] * bins
    for unit in sorted(units, key=lambda u: (-u.size, u.cluster, u.partition)):
        lightest = weights.index(min(weights))
        packed[lightest].append(unit)
        weights[lightest] += unit.size
    return [b for b in packed if b]


def _runs(units: Sequence[Unit], bins: int) -> list[list[Unit]]:
    """Units in (cluster, partition) order, a task ended where its next unit's middle would pass
    the task's share of the bytes (so every task gets at least one unit while units remain)."""
    ordered = sorted(units, key=lambda u: (u.cluster, u.partition))
    total = sum(u.size for u in ordered)
    packed: list[list[Unit]] = [[]]
    taken = 0
    for index, unit in enumerate(ordered):
        to_open = bins - len(packed)
        share_end = total * len(packed) / bins
        if (
            packed[-1]
            and to_open > 0
            and (taken + unit.size / 2 > share_end or len(ordered) - index <= to_open)
        ):
            packed.append([])
        packed[-1].append(unit)
        taken += unit.size
    return [b for b in packed if b]


def _read_unit(unit: Unit) -> pa.Table:

    tables = [pq.read_table(path, schema=RAW_SCHEMA) for path in unit.files]
    table = pa.concat_tables(tables) if len(tables) != 1 else tables[0]
    # The export's `cluster` column names the export's cluster; the unit's name is authoritative.
    return table.set_column(0, "cluster", pa.array([unit.cluster] * table.num_rows, pa.string()))


class Records:
    """Where an audit's raw records come from; `task_rows` is the one stage that audits them."""

    def task_rows(self, settings: TaskSettings) -> DataFrame:
        raise NotImplementedError


def default_tasks(spark: SparkSession) -> int:
    """How many tasks the audit's stage packs its units into: 4 per core of the session (balance
    between the cores, smaller results per task, few fixed costs)."""
    return 4 * spark.sparkContext.defaultParallelism


@dataclass
class ExportRecords(Records):
    spark: SparkSession
    units: list[Unit]
    tasks: int | None = None  # default: `default_tasks`

    def task_rows(self, settings: TaskSettings) -> DataFrame:
        tasks = self.tasks or default_tasks(self.spark)
        packed = pack(self.units, tasks)
        schema: Any = spark_schema(TASK_ROW_SCHEMA)
        if not packed:
            return self.spark.createDataFrame([], schema)

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            for batch in batches:
                for task in batch.column(0).to_pylist():
                    yield from _audit_tables((_read_unit(unit) for unit in packed[task]), settings, task)

        return self.spark.range(0, len(packed), 1, len(packed)).mapInArrow(run, schema)


@dataclass
class FrameRecords(Records):
    """Raw records as a DataFrame. `clustered`: every Spark partition holds whole (cluster,
    partition) units (Spark's Kafka source); otherwise they are brought together first."""

    frame: DataFrame
    clustered: bool = False

    def task_rows(self, settings: TaskSettings) -> DataFrame:
        frame = self.frame if self.clustered else self.frame.repartition("cluster", "partition")

        def run(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
            from pyspark import TaskContext

            collected = list(batches)
            if collected:
                context = TaskContext.get()
                task = 0 if context is None else context.partitionId()
                yield from _audit_tables([pa.Table.from_batches(collected)], settings, task)

        schema: Any = spark_schema(TASK_ROW_SCHEMA)
        return frame.select(*RAW_SCHEMA.names).mapInArrow(run, schema)


def as_records(raw: Records | DataFrame) -> Records:
    return raw if isinstance(raw, Records) else FrameRecords(raw)


@dataclass
class Ledgers:
    """The tasks' rows, persisted on the executors (`release()` when done): counters, per-task
    summaries and the selected groups, their offsets and come-backs (the decision's input,
    `fleet.decide`); small next to the log."""

    rows: DataFrame

    def release(self) -> None:
        self.rows.unpersist()


def build_ledgers(raw: Records | DataFrame, settings: TaskSettings) -> Ledgers:
    return Ledgers(as_records(raw).task_rows(settings).persist(StorageLevel.MEMORY_AND_DISK))


def export_units(directory: Path, cluster: str, files: dict[int, list[str]]) -> list[Unit]:
    units = []
    for partition, names in sorted(files.items()):
        paths = tuple(str(directory / name) for name in names)
        size = sum(Path(p).stat().st_size for p in paths)
        units.append(Unit(cluster, partition, paths, size))
    return units
