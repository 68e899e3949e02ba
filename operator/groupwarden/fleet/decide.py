"""The audit's decision, distributed: the tasks decide their groups, the driver merges counts.

The audit's stage (`pipeline.build_ledgers`) ran the first step of `core/parts.py` (COUNT) in its
tasks, kept each task's counts in its persisted rows, and wrote the rows the later steps read, a
file per task (`TaskSettings.decision_rows`). One or two more narrow jobs, a task per file (no
shuffle), run the other steps in the tasks (`task_decide`); between them the driver runs only
what is global per cluster and policy:
1. COUNT: the counts are summed; each policy's breaker is decided; the what-if rows are summed.
2. KEYS, only when a tripped breaker refuses what another policy would delete: the oldest
   candidates again, with the breakers known.
3. the limits' cut-offs from each task's oldest candidates (at most `limit` keys per task), then
   DECIDE: the actions (at most the limits), skip counts by reason; the skips themselves are
   written by the tasks (`skips/`), and plan.json lists them from there (`outputs`).
The driver holds counts, cut-offs, actions and what-if rows: nothing that grows with the groups.
"""

from __future__ import annotations

import gc
import pickle
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from groupwarden.core.engine import Cutoffs
from groupwarden.core.parts import (
    PartCounts,
    PartKeys,
    PlanParts,
    assemble_plans,
    cluster_cutoffs,
    keys_need_breakers,
    merge_counts,
    merge_what_if,
)
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.whatif import what_if
from groupwarden.fleet.cluster_audit import ClusterAudit
from groupwarden.fleet.pipeline import (
    DECISION_ROWS_SUFFIX,
    Ledgers,
    freeze_imports,
    read_decision_rows,
)
from groupwarden.fleet.schema import spark_schema
from groupwarden.fleet.session import collect_arrow
from groupwarden.fleet.sources import ClusterSource
from groupwarden.fleet.task_decide import (
    RESULT_SCHEMA,
    ClusterContext,
    Counted,
    Decided,
    DecideSettings,
    Globals,
    Step,
    results_table,
    run_step,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SKIPS_TABLE = "skips"


def files_step_frame(
    spark: SparkSession, files: Sequence[str], step: Step, settings: Any, found: Any
) -> DataFrame:
    """One step over the selected rows the stage's tasks wrote (`TaskSettings.decision_rows`), a
    task per file, read with pyarrow (never through the JVM)."""

    def task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for index in batch.column(0).to_pylist():
                freeze_imports()
                enabled = gc.isenabled()
                gc.disable()  # many small objects, none in a cycle: reference counting frees them
                try:
                    table = read_decision_rows(files[index])
                    known = None if found is None else found.value
                    results = list(run_step(table, step, settings.value, known, index))
                finally:
                    if enabled:
                        gc.enable()
                if results:
                    yield from results_table(results).to_batches()

    schema: Any = spark_schema(RESULT_SCHEMA)
    return spark.range(0, len(files), 1, max(1, len(files))).mapInArrow(task, schema)


def _run(
    spark: SparkSession, files: Sequence[str], step: Step, settings: Any, found: Globals | None
) -> dict[str, list[Any]]:
    """One narrow job over the stage's files: the results per cluster."""
    broadcast_found = None if found is None else spark.sparkContext.broadcast(found)
    try:
        table = collect_arrow(files_step_frame(spark, files, step, settings, broadcast_found))
    finally:
        if broadcast_found is not None:
            broadcast_found.destroy()
    return _payloads(table)


def _payloads(table: pa.Table) -> dict[str, list[Any]]:
    """The tasks' results (pickled `core.parts` values) per cluster."""
    found_by_cluster: dict[str, list[Any]] = {}
    for cluster, payload in zip(
        table.column("cluster").to_pylist(), table.column("payload").to_pylist(), strict=True
    ):
        found_by_cluster.setdefault(cluster, []).append(pickle.loads(payload))
    return found_by_cluster


def prepare_skips(out: Path) -> Path:
    directory = out / SKIPS_TABLE
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.parquet"):
        old.unlink()
    return directory


# One step run over every task's rows: each task's results per cluster.
Runner = Callable[[Step, Globals | None], dict[str, list[Any]]]


def decide_in_tasks(
    spark: SparkSession,
    ledgers: Ledgers,
    audits: Sequence[ClusterAudit],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta],
    out: Path | None,
    rows_written: Path,
) -> None:
    """Fills each audit's plans (their skips in `out/skips`), what-if rows and selection counts.
    The stage ran the COUNT step (`pipeline.TaskSettings.decide`, the same settings as
    `decide_settings` here: its persisted rows hold the results) and wrote the rows the later
    steps read to `rows_written` (`TaskSettings.decision_rows`)."""
    from pyspark.sql import functions as F

    skips = None if out is None else prepare_skips(out)
    settings = decide_settings([a.source for a in audits], policies, now, retentions, skips)
    broadcast = spark.sparkContext.broadcast(settings)
    files = [str(p) for p in sorted(rows_written.glob(f"*{DECISION_ROWS_SUFFIX}"))]

    def run(step: Step, found: Globals | None) -> dict[str, list[Any]]:
        if step is Step.COUNT:
            return _payloads(collect_arrow(ledgers.rows.where(F.col("row_kind") == "counted")))
        return _run(spark, files, step, broadcast, found)

    try:
        decide_with(run, audits, policies, now, retentions)
    finally:
        broadcast.destroy()
    for audit in audits:
        audit.skips_in_table = skips is not None


def decide_settings(
    sources: Sequence[ClusterSource],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta],
    skips: Path | None = None,
) -> DecideSettings:
    """What the decision's tasks need (broadcast): the policies, the time, and per cluster its id,
    topics and `__share_group_state` replayed (one entry per share group and share-partition)."""
    contexts = {s.name: ClusterContext(s.cluster_id, s.topics, s.share_starts) for s in sources}
    return DecideSettings(
        tuple(policies), now, tuple(retentions), contexts, None if skips is None else str(skips.resolve())
    )


def decide_with(
    run: Runner,
    audits: Sequence[ClusterAudit],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta] = (),
) -> None:
    """The driver's part, between the tasks' steps (`run`): only counts, keys and actions."""
    counted: dict[str, list[Counted]] = run(Step.COUNT, None)
    counts: dict[str, PartCounts] = {}
    for audit in audits:
        name = audit.source.name
        mine = counted.get(name, [])
        counts[name] = merge_counts((c.counts for c in mine), len(policies))
        if retentions:
            zero = what_if(policies, _header(audit, now), now, retentions, ())
            audit.what_if = merge_what_if([zero, *(c.what_if for c in mine)])
        audit.groups_selected = counts[name].groups
    totals = {name: found.totals for name, found in counts.items()}
    again = {name for name, found in counts.items() if keys_need_breakers(policies, found)}
    keys: dict[str, PartKeys] = {}
    if again:
        for name, parts in run(Step.KEYS, Globals(totals)).items():
            merged = PartKeys.empty(len(policies))
            for part in parts:
                merged.add(part)
            keys[name] = merged
    cuts: dict[str, list[Cutoffs]] = {
        name: cluster_cutoffs(
            policies, found, keys.get(name, PartKeys.empty(len(policies))) if name in again else None
        )
        for name, found in counts.items()
    }
    decided: dict[str, list[Decided]] = run(Step.DECIDE, Globals(totals, cuts))
    for audit in audits:
        name = audit.source.name
        plan_parts = [PlanParts() for _ in policies]
        reclaimed: Counter[str] = Counter()
        for part in decided.get(name, []):
            for index, plan_part in enumerate(plan_parts):
                plan_part.actions.extend(part.actions[index])
                plan_part.skips_by_reason.update(part.skips_by_reason[index])
                reclaimed.update(part.reclaimed[index])
        audit.plans = assemble_plans(policies, _header(audit, now), now, counts[name], plan_parts)
        audit.skips_by_reason = [
            {r.value: n for r, n in sorted(p.skips_by_reason.items())} for p in plan_parts
        ]
        audit.reclaimed = reclaimed


def _header(audit: ClusterAudit, now: datetime) -> ClusterSnapshot:
    """The cluster's snapshot without its groups: what a plan says about the cluster itself (its
    id and warnings), as `snapshot_from_answers` builds it."""
    return ClusterSnapshot(
        taken_at=now,
        groups=(),
        cluster_id=audit.source.cluster_id,
        topics=audit.source.topics,
        offsets_log_available=True,
    )
