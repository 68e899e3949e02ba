"""One audit run: raw records -> ledgers (Spark) -> plans and what-if (driver) -> outputs.

What reaches the driver: per-partition counters, per-cluster aggregates (groups per kind, offsets,
come-backs, the idle-age histogram), and the groups some policy selects with their offsets (what
`decide_many` needs, exactly as `groupwarden plan` gathers only the selected groups). Every
offset and group of the fleet goes to the Parquet tables from the executors, never via the driver.
"""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupMatcher
from groupwarden.core.snapshot import GroupKind
from groupwarden.fleet.evaluate import ClusterAudit, LogReach, decide_clusters
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.pipeline import Ledgers, build_ledgers, selected_groups
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log.history import Comeback
from groupwarden.offsets_log.rows import group_from_row

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


@dataclass
class Collected:
    audits: list[ClusterAudit]
    groups: DataFrame  # every group with `selected` (persisted)
    ledgers: Ledgers


def collect_audits(
    spark: SparkSession,
    raw: DataFrame,
    sources: Sequence[ClusterSource],
    selects: Callable[[str], bool],
    *,
    keep_history: bool = True,
) -> Collected:
    """Builds the distributed ledgers and brings to the driver what the decision needs."""
    ledgers = build_ledgers(raw, keep_history=keep_history)
    groups = ledgers.groups.join(selected_groups(ledgers.groups, selects), ["cluster", "group"]).persist()
    audits = {s.name: ClusterAudit(s) for s in sources}

    def audit_of(cluster: str) -> ClusterAudit:
        audit = audits.get(cluster)
        if audit is None:
            raise ValueError(f"records of cluster {cluster!r} have no source description")
        return audit

    partition_rows: dict[str, list[dict[str, Any]]] = {name: [] for name in audits}
    for row in collect_arrow(ledgers.partitions).to_pylist():
        audit = audit_of(row["cluster"])
        partition_rows[audit.source.name].append(row)
        if row["next_offset"] is not None:
            audit.positions[int(row["partition"])] = int(row["next_offset"])
    for name, rows in partition_rows.items():
        audits[name].reach = _reach(rows)

    totals = groups.groupBy("cluster", "kind").agg(
        F.count(F.lit(1)).alias("groups"),
        F.sum("offset_count").alias("offsets"),
        F.sum(F.when(F.col("selected"), F.col("offset_count")).otherwise(0)).alias("selected_offsets"),
    )
    selected_offsets = 0
    for row in collect_arrow(totals).to_pylist():
        audit = audit_of(row["cluster"])
        audit.groups_by_kind[row["kind"]] = int(row["groups"])
        audit.offset_count += int(row["offsets"] or 0)
        selected_offsets += int(row["selected_offsets"] or 0)
    limit = int(spark.conf.get(MAX_SELECTED_OFFSETS_CONF, str(DEFAULT_MAX_SELECTED_OFFSETS)) or 0)
    if selected_offsets > limit:
        raise SelectionTooLarge(
            f"the policies select {selected_offsets:,} offsets, more than the driver is allowed to hold "
            f"({limit:,}); narrow the policies' include/exclude, or raise the limit with "
            f"--conf {MAX_SELECTED_OFFSETS_CONF}={selected_offsets} (and spark.driver.memory to match)"
        )
    for row in collect_arrow(ledgers.comebacks.groupBy("cluster").count()).to_pylist():
        audit_of(row["cluster"]).comeback_count = int(row["count"])

    chosen = groups.where(F.col("selected")).select("cluster", "group")
    comebacks = ledgers.comebacks.join(chosen, ["cluster", "group"], "left_semi")
    for row in collect_arrow(comebacks).to_pylist():
        audit_of(row["cluster"]).comebacks.append(
            Comeback(row["group"], GroupKind(row["kind"]), row["empty_since_ms"], row["returned_ms"])
        )
    offsets = (
        ledgers.offsets.join(chosen, ["cluster", "group"], "left_semi")
        .groupBy("cluster", "group")
        .agg(
            F.collect_list(
                F.struct(
                    "topic",
                    F.col("tp").alias("partition"),
                    "offset",
                    "commit_time_ms",
                    "expire_time_ms",
                    "leader_epoch",
                    "metadata",
                    "topic_id",
                )
            ).alias("offsets")
        )
    )
    answers_frame = groups.where(F.col("selected")).join(offsets, ["cluster", "group"], "left")
    table = collect_arrow(answers_frame)
    for batch in table.to_batches(max_chunksize=20_000):
        for row in batch.to_pylist():
            audit_of(row["cluster"]).answers.append(group_from_row(row))
    del table
    for audit in audits.values():
        audit.comebacks.sort()
        audit.answers.sort(key=lambda answer: answer[0].group_id)
    return Collected(list(audits.values()), groups, ledgers)


def replay_clusters(
    raw: DataFrame, sources: Sequence[ClusterSource], *, keep_history: bool = True
) -> list[ClusterAudit]:
    """Every group of every cluster with its offsets, on the driver (tests, small logs): the same
    distributed replay, with every group selected."""
    spark = raw.sparkSession
    collected = collect_audits(spark, raw, sources, _select_all, keep_history=keep_history)
    collected.groups.unpersist()
    collected.ledgers.release()
    return collected.audits


def run_audit(
    spark: SparkSession,
    raw: DataFrame,
    sources: Sequence[ClusterSource],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    out: Path,
    retentions: Sequence[timedelta] = (),
) -> AuditResult:
    started = time.monotonic()
    collected = collect_audits(spark, raw, sources, _selector(policies), keep_history=bool(retentions))
    audits = collected.audits
    replayed = time.monotonic()
    try:
        decide_clusters(audits, policies, now, retentions)
        decided = time.monotonic()
        from groupwarden.fleet.tables import idle_histograms, write_tables

        write_tables(out, collected.groups, collected.ledgers.offsets, now)
        histograms = idle_histograms(collected.groups, collected.ledgers.comebacks, now)
        tables = time.monotonic()
        engine = {
            "master": spark.sparkContext.master,
            "sparkVersion": spark.version,
            "defaultParallelism": spark.sparkContext.defaultParallelism,
            "replaySeconds": round(replayed - started, 3),
            "decideSeconds": round(decided - replayed, 3),
            "tablesSeconds": round(tables - decided, 3),
        }
        summary = write_outputs(
            out, audits, now, engine, histograms=histograms, spark_tables=True, policies=policies
        )
    finally:
        collected.groups.unpersist()
        collected.ledgers.release()
    return AuditResult(audits, summary)
