"""One audit run: raw records -> ledgers (Spark) -> plans and what-if (driver) -> outputs."""

from __future__ import annotations

import gc
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.fleet.evaluate import ClusterAudit, collect_clusters, decide_clusters
from groupwarden.fleet.ledger_job import ledger_rows
from groupwarden.fleet.outputs import write_outputs
from groupwarden.fleet.sources import ClusterSource


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


def replay_clusters(
    raw: DataFrame, sources: Sequence[ClusterSource], *, keep_history: bool = True
) -> list[ClusterAudit]:
    """The distributed replay, collected per cluster (no decision yet). Without history, classic
    group records are compacted too (faster) and no come-backs are found."""
    rows = collect_arrow(ledger_rows(raw, keep_history=keep_history)).to_pylist()
    return collect_clusters(rows, sources)


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
    audits = replay_clusters(raw, sources, keep_history=bool(retentions))
    replayed = time.monotonic()
    decide_clusters(audits, policies, now, retentions)
    engine = {
        "master": spark.sparkContext.master,
        "sparkVersion": spark.version,
        "defaultParallelism": spark.sparkContext.defaultParallelism,
        "replaySeconds": round(replayed - started, 3),
        "decideSeconds": round(time.monotonic() - replayed, 3),
    }
    summary = write_outputs(out, audits, now, engine)
    return AuditResult(audits, summary)
