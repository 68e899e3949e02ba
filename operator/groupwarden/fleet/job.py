"""One audit run: raw records -> ledgers (Spark) -> plans and what-if (driver) -> outputs.

What reaches the driver: per-partition counters, per-cluster aggregates (groups per kind, offsets,
come-backs, the idle-age histogram), and the groups some policy selects with their offsets (what
`decide_many` needs, exactly as `groupwarden plan` gathers only the selected groups). Every
offset and group of the fleet goes to the Parquet tables from the tasks, never via the driver.
"""

from __future__ import annotations

import gc
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from groupwarden.cleanup.gather import gc_paused
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupMatcher
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.fleet.evaluate import ClusterAudit, LogReach, decide_clusters
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.pipeline import (
    GROUP_COLUMNS,
    Ledgers,
    Records,
    TaskSettings,
    build_ledgers,
)
from groupwarden.fleet.report import IDLE_EDGES
from groupwarden.fleet.sources import ClusterSource
from groupwarden.fleet.task_rows import MEMBER_COLUMNS
from groupwarden.fleet.task_tables import complete as complete_tables
from groupwarden.fleet.task_tables import prepare as prepare_tables
from groupwarden.offsets_log.history import Comeback
from groupwarden.offsets_log.rows import group_from_row
from groupwarden.offsets_log.views import LedgerOffset

MAX_SELECTED_OFFSETS_CONF = "spark.groupwarden.maxSelectedOffsets"
DEFAULT_MAX_SELECTED_OFFSETS = 3_000_000


class SelectionTooLarge(ValueError):
    """The policies select more offsets than the driver is allowed to hold."""


@dataclass(frozen=True)
class AuditResult:
    audits: list[ClusterAudit]
    summary: dict[str, Any]


def collect_arrow(frame: DataFrame) -> pa.Table:
    """`frame.toArrow()`, without the ResourceWarning PySpark leaves behind: it does not close the
    local socket the result came through and relies on the garbage collector (pyspark/util.py,
    `_load_from_socket`), so the socket is collected here, where the warning is expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        table = frame.toArrow()
        gc.collect()
    return table


def _selector(policies: Sequence[ConsumerGroupPolicy]) -> Callable[[str], bool]:
    matchers = [GroupMatcher.from_selector(p.spec.selector) for p in policies]

    def selects(group_id: str) -> bool:
        return any(m.matches_id(group_id) for m in matchers)

    return selects


def _select_all(_group_id: str) -> bool:
    return True


def _reach(rows: list[dict[str, Any]]) -> LogReach:
    earliest = [r["earliest_ms"] for r in rows if r["earliest_ms"] is not None and r["earliest_ms"] >= 0]
    latest = [r["latest_ms"] for r in rows if r["latest_ms"] is not None and r["latest_ms"] >= 0]
    return LogReach(
        records=sum(int(r["records"] or 0) for r in rows),
        tombstones=sum(int(r["tombstones"] or 0) for r in rows),
        replayed=sum(int(r["replayed"] or 0) for r in rows),
        corrupt=sum(int(r["corrupt"] or 0) for r in rows),
        unknown=sum(int(r["unknown"] or 0) for r in rows),
        partitions=len(rows),
        earliest_ms=min(earliest) if earliest else None,
        latest_ms=max(latest) if latest else None,
    )


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
) -> Collected:
    """Runs the audit's one stage and brings to the driver what the decision needs. With `tables`,
    the tasks write the `groups` and `offsets` tables there (`task_tables`)."""
    lap = (stopwatch or Stopwatch()).lap
    now_ms = None if now is None else int(now.timestamp() * 1000)
    if tables is not None:
        prepare_tables(tables)
    settings = TaskSettings(keep_history, selects, now_ms, None if tables is None else str(tables.resolve()))
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
            "selected_offsets",
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
    selected_offsets = 0
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
            selected_offsets += int(row["selected_offsets"] or 0)
        elif kind == "idle":
            key = (row["cluster"], row["kind"], bool(row["selected"]), int(row["bucket"]))
            idle[key] = idle.get(key, 0) + int(row["count"])
        else:
            pause_key = (row["cluster"], row["kind"], int(row["bucket"]))
            pauses[pause_key] = pauses.get(pause_key, 0) + int(row["count"])
    for name, rows in partition_rows.items():
        audits[name].reach = _reach(rows)
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
    limit = int(spark.conf.get(MAX_SELECTED_OFFSETS_CONF, str(DEFAULT_MAX_SELECTED_OFFSETS)) or 0)
    if selected_offsets > limit:
        raise SelectionTooLarge(
            f"the policies select {selected_offsets:,} offsets, more than the driver is allowed to hold "
            f"({limit:,}); narrow the policies' include/exclude, or raise the limit with "
            f"--conf {MAX_SELECTED_OFFSETS_CONF}={selected_offsets} (and spark.driver.memory to match)"
        )
    # The selected groups (with their come-backs) and their offsets, as two flat collections with
    # only their own columns (a row per group with its offsets nested outgrew a 1 GiB heap at 10M
    # records, issue 12; one collection of both carried every column for every row).
    group_columns = [c for c in GROUP_COLUMNS if c not in ("partition", "selected")]
    chosen = ledgers.rows.where(F.col("selected"))
    groups_and_comebacks = collect_arrow(
        chosen.where(F.col("row_kind").isin("group", "comeback")).select(
            "row_kind", *group_columns, *MEMBER_COLUMNS, "returned_ms"
        )
    )
    kinds = groups_and_comebacks.column("row_kind")
    comeback_rows = groups_and_comebacks.select(["cluster", "group", "kind", "empty_since_ms", "returned_ms"])
    for row in comeback_rows.filter(pc.equal(kinds, "comeback")).to_pylist():
        audit_of(row["cluster"]).comebacks.append(
            Comeback(row["group"], GroupKind(row["kind"]), row["empty_since_ms"], row["returned_ms"])
        )
    group_table = groups_and_comebacks.select([*group_columns, *MEMBER_COLUMNS]).filter(
        pc.equal(kinds, "group")
    )
    del groups_and_comebacks, comeback_rows
    offset_table = collect_arrow(
        chosen.where(F.col("row_kind") == "offset").select(
            "cluster",
            "group",
            "topic",
            F.col("tp").alias("partition"),
            "offset",
            "commit_time_ms",
            "expire_time_ms",
            "leader_epoch",
            "metadata",
            "topic_id",
        )
    )
    lap("selected groups and offsets collected")
    # The driver builds ~10^6 small objects (the selected groups' views and offsets, then the snapshot
    # and plans), none of them part of a cycle that must be reclaimed early: the cyclic collector is
    # off meanwhile, as in the operator's gather (one definition: cleanup/gather.py).
    with gc_paused():
        offsets_by_group = _offsets_by_group(offset_table)
        del offset_table
        for batch in group_table.to_batches(max_chunksize=20_000):
            for row in batch.to_pylist():
                row["offsets"] = ()
                view, _ = group_from_row(row)
                found = offsets_by_group.pop((row["cluster"], row["group"]), None)
                audit_of(row["cluster"]).answers.append((view, {} if found is None else found))
    del group_table, offsets_by_group
    for audit in audits.values():
        audit.comebacks.sort()
        audit.answers.sort(key=lambda answer: answer[0].group_id)
    lap("selected groups as the core's answers")
    return Collected(list(audits.values()), ledgers, histograms)


def _offsets_by_group(offsets: pa.Table) -> dict[tuple[str, str], dict[TopicPartition, LedgerOffset]]:
    """The selected offsets as the core's values per (cluster, group), built column by column (no
    row dicts) with one UUID per distinct topic id: what `group_from_row` builds from row dicts."""
    ids: dict[str, uuid.UUID] = {}
    by_group: dict[tuple[str, str], dict[TopicPartition, LedgerOffset]] = {}
    for batch in offsets.to_batches(max_chunksize=100_000):
        columns = [batch.column(name).to_pylist() for name in _OFFSET_FIELDS]
        for cluster, group, topic, partition, offset, commit, expire, epoch, metadata, topic_id in zip(
            *columns, strict=True
        ):
            key = (cluster, group)
            mine = by_group.get(key)
            if mine is None:
                mine = by_group[key] = {}
            if topic_id is None:
                parsed = None
            else:
                parsed = ids.get(topic_id)
                if parsed is None:
                    parsed = ids[topic_id] = uuid.UUID(topic_id)
            mine[TopicPartition(topic, partition)] = LedgerOffset(
                offset, commit, expire, epoch, metadata, parsed
            )
    return by_group


_OFFSET_FIELDS = (
    "cluster",
    "group",
    "topic",
    "partition",
    "offset",
    "commit_time_ms",
    "expire_time_ms",
    "leader_epoch",
    "metadata",
    "topic_id",
)


def replay_clusters(
    raw: Records | DataFrame,
    sources: Sequence[ClusterSource],
    *,
    keep_history: bool = True,
    spark: SparkSession | None = None,
) -> list[ClusterAudit]:
    """Every group of every cluster with its offsets, on the driver (tests, small logs): the same
    distributed replay, with every group selected."""
    session = spark if spark is not None else SparkSession.getActiveSession()
    assert session is not None, "replay_clusters needs a Spark session"
    collected = collect_audits(session, raw, sources, _select_all, keep_history=keep_history)
    collected.ledgers.release()
    return collected.audits


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
    )
    audits = collected.audits
    replayed = time.monotonic()
    try:
        with gc_paused():
            decide_clusters(audits, policies, now, retentions)
        # What is alive now (answers, snapshots, plans) lives until the end: out of the collector's
        # sight, so the collections after each Spark action (`collect_arrow`) do not walk it.
        gc.freeze()
        decided = time.monotonic()
        stopwatch.lap("decide")
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
        gc.unfreeze()
        collected.ledgers.release()
    return AuditResult(audits, summary)
