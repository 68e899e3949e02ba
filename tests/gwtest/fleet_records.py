"""Log records as the fleet audit's Spark job hands one partition of them to a Python worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from groupwarden.offsets_log import LogRecord


def partition_table(cluster: str, records: list[LogRecord]) -> pa.Table:
    """One partition's records as the Spark job hands them to the worker (no compaction: every row
    stands for itself)."""
    return pa.table(
        {
            "cluster": [cluster] * len(records),
            "partition": pa.array([r[3] for r in records], pa.int32()),
            "offset": pa.array([r[4] for r in records], pa.int64()),
            "timestamp": pa.array([r[2] for r in records], pa.int64()),
            "key": pa.array([r[0] for r in records], pa.binary()),
            "value": pa.array([r[1] for r in records], pa.binary()),
            "records": pa.array([1] * len(records), pa.int64()),
            "tombstones": pa.array([int(r[1] is None) for r in records], pa.int64()),
            "earliest_ms": pa.array([r[2] for r in records], pa.int64()),
            "latest_ms": pa.array([r[2] for r in records], pa.int64()),
            "first_offset": pa.array([r[4] for r in records], pa.int64()),
        }
    )


def replay_clusters(raw: Any, sources: Sequence[Any], *, keep_history: bool = True) -> list[Any]:
    """Every group of every cluster with its offsets and come-backs, on the driver, as the core's
    answers (`ClusterAudit`s): the audit's stage with every group selected, then its rows
    collected (a check against the core ledger; the audit itself never collects them)."""
    from pyspark.sql import SparkSession

    from groupwarden.fleet.job import _select_all, collect_audits, collect_selected

    session = SparkSession.getActiveSession()
    assert session is not None, "replay_clusters needs a Spark session"
    collected = collect_audits(session, raw, sources, _select_all, keep_history=keep_history)
    try:
        collect_selected(collected)
    finally:
        collected.ledgers.release()
    return collected.audits
