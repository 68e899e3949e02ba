"""One audit run: raw records -> the audit's stage (Spark tasks: ledgers, tables, selection) ->
the decision in the tasks (`fleet.decide`) -> outputs.

What reaches the driver: per-partition counters, per-cluster aggregates (groups per kind, offsets,
come-backs, the idle-age and pause histograms), the policies' counts, limit cut-offs, actions and
what-if rows. Every group, offset and skip of the fleet goes to the Parquet tables the tasks write,
never via the driver.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from groupwarden.core.gc_pause import gc_paused
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupMatcher, matching_any
from groupwarden.fleet.cluster_audit import ClusterAudit, LogReach
from groupwarden.fleet.decide import decide_in_tasks, decide_settings
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.pipeline import (
    Ledgers,
    Records,
    TaskSettings,
    build_ledgers,
)
from groupwarden.fleet.schema import IDLE_EDGES
from groupwarden.fleet.session import collect_arrow
from groupwarden.fleet.sources import ClusterSource
from groupwarden.fleet.task_decide import INPUT_COLUMNS, DecideSettings, parts_of
from groupwarden.fleet.task_tables import complete as complete_tables
from groupwarden.fleet.task_tables import prepare as prepare_tables


@dataclass(frozen=True)
class AuditResult:
    audits: list[ClusterAudit]
    summary: dict[str, Any]


def _selector(policies: Sequence[ConsumerGroupPolicy]) -> Callable[[str], bool]:
    """Whether any policy's globs accept a group id: asked once per group of the fleet."""
    return matching_any(GroupMatcher.from_selector(p.spec.selector) for p in policies)


def _select_all(_group_id: str) -> bool:
    return True


class Stopwatch:
    """Wall seconds per step of an audit (summary.json's `engine.steps`). Spark is lazy: a step's
    time is that of the actions it runs, including the distributed work they trigger first."""

    def __init__(self) -> None:
        self.steps: dict[str, float] = {}
        self._last = time.monotonic()

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.steps[name] = round(self.steps.get(name, 0.0) + now - self._last, 3)
        self._last = now


@dataclass
class Collected:
    audits: list[ClusterAudit]
    ledgers: Ledgers
    histograms: dict[str, Any] | None = None


_SMALL_ROWS = ("partition", "kinds", "idle", "pauses")


def collect_audits(
    spark: SparkSession,
    raw: Records | DataFrame,
    sources: Sequence[ClusterSource],
    selects: Callable[[str], bool],
    *,
    keep_history: bool = True,
    stopwatch: Stopwatch | None = None,
    now: datetime | None = None,
    tables: Path | None = None,
    decide: DecideSettings | None = None,
    decision_rows: Path | None = None,
) -> Collected:
    """Runs the audit's one stage and brings to the driver its counters and totals. With `tables`,
    the tasks write the `groups` and `offsets` tables there (`task_tables`); with `decide`, they
    also run the decision's first step on each unit (`fleet.decide`)."""
    lap = (stopwatch or Stopwatch()).lap
    now_ms = None if now is None else int(now.timestamp() * 1000)
    if tables is not None:
        prepare_tables(tables)
    settings = TaskSettings(
        keep_history,
        selects,
        now_ms,
        None if tables is None else str(tables.resolve()),
        decide,
        None if decision_rows is None else str(decision_rows.resolve()),
    )
    ledgers = build_ledgers(raw, settings)
    audits = {s.name: ClusterAudit(s) for s in sources}

    def audit_of(cluster: str) -> ClusterAudit:
        audit = audits.get(cluster)
        if audit is None:
            raise ValueError(f"records of cluster {cluster!r} have no source description")
        return audit

    small = collect_arrow(
        ledgers.rows.where(F.col("row_kind").isin(*_SMALL_ROWS)).select(
            "cluster",
            "partition",
            "row_kind",
            "kind",
            "selected",
            "bucket",
            "count",
            "offsets",
            "comeback_count",
            "records",
            "tombstones",
            "replayed",
            "corrupt",
            "unknown",
            "first_offset",
            "next_offset",
            "earliest_ms",
            "latest_ms",
        )
    ).to_pylist()
    partition_rows: dict[str, list[dict[str, Any]]] = {name: [] for name in audits}
    idle: dict[tuple[str, str, bool, int], int] = {}
    pauses: dict[tuple[str, str, int], int] = {}
    for row in small:
        audit = audit_of(row["cluster"])
        kind = row["row_kind"]
        if kind == "partition":
            partition_rows[audit.source.name].append(row)
            if row["next_offset"] is not None:
                audit.positions[int(row["partition"])] = int(row["next_offset"])
            audit.comeback_count += int(row["comeback_count"] or 0)
        elif kind == "kinds":
            audit.groups_by_kind[row["kind"]] = audit.groups_by_kind.get(row["kind"], 0) + int(row["count"])
            audit.offset_count += int(row["offsets"] or 0)
        elif kind == "idle":
            key = (row["cluster"], row["kind"], bool(row["selected"]), int(row["bucket"]))
            idle[key] = idle.get(key, 0) + int(row["count"])
        else:
            pause_key = (row["cluster"], row["kind"], int(row["bucket"]))
            pauses[pause_key] = pauses.get(pause_key, 0) + int(row["count"])
    for name, rows in partition_rows.items():
        audits[name].reach = LogReach.of_partitions(rows)
    histograms = None
    if now is not None:
        histograms = {
            "edges": [label for label, _ in IDLE_EDGES],
            "idle": [
                {"cluster": c, "kind": k, "selected": s, "bucket": b, "count": n}
                for (c, k, s, b), n in sorted(idle.items())
            ],
            "comebacks": [
                {"cluster": c, "kind": k, "bucket": b, "count": n} for (c, k, b), n in sorted(pauses.items())
            ],
        }
    if tables is not None:
        complete_tables(tables)
    lap("one stage over the units (tables written), counters and totals")
    return Collected(list(audits.values()), ledgers, histograms)


def collect_selected(collected: Collected) -> None:
    """Every selected group with its offsets and come-backs, on the driver, as the core's answers
    (tests and small logs: the audit itself decides in the tasks, `fleet.decide`)."""
    audits = {a.source.name: a for a in collected.audits}
    rows = collect_arrow(
        collected.ledgers.rows.where(
            F.col("selected") & F.col("row_kind").isin("group", "offset", "comeback")
        ).select(*INPUT_COLUMNS)
    )
    with gc_paused():
        for part in parts_of(rows):
            audit = audits.get(part.cluster)
            if audit is None:
                raise ValueError(f"records of cluster {part.cluster!r} have no source description")
            audit.answers.extend(part.answers)
            audit.comebacks.extend(part.comebacks)
    for audit in audits.values():
        audit.comebacks.sort()
        audit.answers.sort(key=lambda answer: answer[0].group_id)


# The selected rows the stage's tasks write for the decision's later steps (removed at the end).
DECISION_ROWS = "_decision"


def prepare_decision_rows(out: Path) -> Path:
    directory = out / DECISION_ROWS
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    return directory


def run_audit(
    spark: SparkSession,
    raw: Records | DataFrame,
    sources: Sequence[ClusterSource],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    out: Path,
    retentions: Sequence[timedelta] = (),
) -> AuditResult:
    started = time.monotonic()
    stopwatch = Stopwatch()
    collected = collect_audits(
        spark,
        raw,
        sources,
        _selector(policies),
        keep_history=bool(retentions),
        stopwatch=stopwatch,
        now=now,
        tables=out,
        decide=decide_settings(sources, policies, now, retentions),
        decision_rows=prepare_decision_rows(out),
    )
    audits = collected.audits
    replayed = time.monotonic()
    try:
        decide_in_tasks(
            spark,
            collected.ledgers,
            audits,
            policies,
            now,
            retentions,
            out,
            out / DECISION_ROWS,
        )
        decided = time.monotonic()
        stopwatch.lap("decide (in the tasks)")
        histograms = collected.histograms
        tables = time.monotonic()
        engine = {
            "master": spark.sparkContext.master,
            "sparkVersion": spark.version,
            "defaultParallelism": spark.sparkContext.defaultParallelism,
            "replaySeconds": round(replayed - started, 3),
            "decideSeconds": round(decided - replayed, 3),
            "tablesSeconds": round(tables - decided, 3),
            "steps": stopwatch.steps,
        }
        summary = write_outputs(
            out, audits, now, engine, histograms=histograms, spark_tables=True, policies=policies
        )
    finally:
        collected.ledgers.release()
        shutil.rmtree(out / DECISION_ROWS, ignore_errors=True)
    return AuditResult(audits, summary)
