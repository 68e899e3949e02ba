"""One audit run: raw records -> ledgers (Spark) -> plans and what-if (driver) -> outputs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

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


def replay_clusters(raw: DataFrame, sources: Sequence[ClusterSource]) -> list[ClusterAudit]:
    """The distributed replay, collected per cluster (no decision yet)."""
    rows = ledger_rows(raw).toArrow().to_pylist()
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
    audits = replay_clusters(raw, sources)
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
