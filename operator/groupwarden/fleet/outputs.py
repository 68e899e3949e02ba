"""What an audit leaves in `--out`: plan.json (the CLI's schema), summary.json, Parquet tables
`offsets`, `groups`, `plan` (one directory each), and report.html."""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from groupwarden.core.durations import format_duration
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.render import plan_to_json, summary_to_json
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.fleet.evaluate import ClusterAudit
from groupwarden.fleet.report import histograms_from_answers, render_report
from groupwarden.fleet.task_decide import SKIPS_ROW_GROUP
from groupwarden.fleet.task_tables import DICTIONARY_COLUMNS, GROUPS_SCHEMA, OFFSETS_SCHEMA
from groupwarden.offsets_log.views import log_time


def plans_document(plans: Sequence[Plan]) -> dict[str, Any]:
    """Exactly what `groupwarden plan -o json` prints: one plan, or {"plans": [...]}."""
    docs = [plan_to_json(p) for p in plans]
    return docs[0] if len(docs) == 1 else {"plans": docs}


def all_plans(audits: Sequence[ClusterAudit]) -> list[Plan]:
    return [plan for audit in audits for plan in audit.plans]


SKIPS_TABLE = "skips"
_SKIPS_MARK = "@@groupwarden-skips-{}@@"


def write_plans(path: Path, audits: Sequence[ClusterAudit], skips: Path) -> None:
    """plan.json, exactly `groupwarden plan -o json`. The skips of plans decided in the tasks are
    read from their table (`skips`, one file per task, each sorted as plan.json lists them: by
    cluster, policy, group, reason, partitions) and merged into the file as they are written, so
    the driver never holds them."""
    plans = all_plans(audits)
    docs = [plan_to_json(p) for p in plans]
    order = [
        (ci, pi, audit.skips_in_table) for ci, audit in enumerate(audits) for pi in range(len(audit.plans))
    ]
    for index, (_, _, in_table) in enumerate(order):
        if in_table:
            docs[index]["skipped"] = _SKIPS_MARK.format(index)
    text = json.dumps(docs[0] if len(docs) == 1 else {"plans": docs}, indent=2) + "\n"
    if not any(in_table for _, _, in_table in order):
        path.write_text(text)
        return
    positions = {name: index for index, name in enumerate(a.source.name for a in audits)}
    rows = _merged_skips(skips, positions)
    pending = next(rows, None)
    with path.open("w") as file:
        start = 0
        for index, (ci, pi, in_table) in enumerate(order):
            if not in_table:
                continue
            mark = f'"skipped": "{_SKIPS_MARK.format(index)}"'
            at = text.index(mark, start)
            indent = " " * (at - text.rindex("\n", 0, at) - 1)
            file.write(text[start:at])
            file.write('"skipped": [')
            first = True
            # each line of an entry indented one level deeper than "skipped" (json's indent=2)
            pad = indent + "  "
            while pending is not None and pending[:2] == (ci, pi):
                # rendered by the task that decided it (`plan_json`), at indent 0
                entry = pending[5].replace("\n", "\n" + pad)
                file.write(("\n" if first else ",\n") + pad + entry)
                first = False
                pending = next(rows, None)
            file.write("]" if first else "\n" + indent + "]")
            start = at + len(mark)
        file.write(text[start:])


_MERGE_COLUMNS = ["cluster", "policy_index", "group", "reason", "partitions", "plan_json"]


def _merged_skips(directory: Path, positions: dict[str, int]) -> Iterator[tuple[Any, ...]]:
    """The tasks' skips in plan.json's order, each as (cluster position, policy index, group,
    reason, partitions, rendered JSON); the files are read a row group (SKIPS_ROW_GROUP rows) at a
    time, so the driver holds one small group per task file."""

    def rows(path: Path) -> Iterator[tuple[Any, ...]]:
        # pre_buffer off: by default pyarrow reads ~14 MiB of a file ahead for its first batch, and
        # with one open reader per task file that read-ahead was the driver's peak (50 clusters:
        # 355 MiB RSS at this merge, 250 without it)
        reader = pq.ParquetFile(path, pre_buffer=False)
        for batch in reader.iter_batches(batch_size=SKIPS_ROW_GROUP, columns=_MERGE_COLUMNS):
            clusters = [positions[c] for c in batch.column("cluster").to_pylist()]
            # Most skips are of whole groups: only the rows with partitions are converted.
            partitions: list[tuple[tuple[str, int], ...]] = [()] * batch.num_rows
            column = batch.column("partitions")
            lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(lengths).tolist():
                partitions[row] = tuple((p["topic"], p["partition"]) for p in column[row].as_py())
            yield from zip(
                clusters,
                batch.column("policy_index").to_pylist(),
                batch.column("group").to_pylist(),
                batch.column("reason").to_pylist(),
                partitions,
                batch.column("plan_json").to_pylist(),
                strict=True,
            )

    files = sorted(directory.glob("*.parquet")) if directory.is_dir() else []
    # Whole rows compared: the rendered text (last) decides only between equal keys.
    return heapq.merge(*(rows(f) for f in files))


def _time(ms: int | None) -> str | None:
    return None if ms is None else to_rfc3339(log_time(ms).at)


def summary_document(
    audits: Sequence[ClusterAudit],
    now: datetime,
    engine: dict[str, Any],
    policies: Sequence[ConsumerGroupPolicy] = (),
) -> dict[str, Any]:
    clusters = []
    for audit in audits:
        reach = audit.reach
        clusters.append(
            {
                "cluster": audit.source.name,
                "clusterId": audit.source.cluster_id,
                "log": {
                    "records": reach.records,
                    "tombstones": reach.tombstones,
                    "replayedAfterCompactingCommits": reach.replayed,
                    "corrupt": reach.corrupt,
                    "unknown": reach.unknown,
                    "partitions": reach.partitions,
                    "earliestRecord": _time(reach.earliest_ms),
                    "latestRecord": _time(reach.latest_ms),
                    "positions": {str(p): o for p, o in sorted(audit.positions.items())},
                },
                "groups": sum(audit.groups_by_kind.values()),
                "groupsByKind": dict(sorted(audit.groups_by_kind.items())),
                # Share groups' start offsets were dated by `__share_group_state` (else: first
                # observed at the audit's time, as a first `plan` run without that topic).
                "shareGroupStateRead": audit.source.share_starts is not None,
                "groupsSelected": audit.groups_selected,
                "offsets": audit.offset_count,
                "comebacks": audit.comeback_count,
                "policies": [
                    {
                        "policy": str(plan.policy),
                        "mode": plan.mode.value,
                        "summary": summary_to_json(plan.summary),
                        "skippedByReason": _skips_by_reason(audit, index),
                    }
                    for index, plan in enumerate(audit.plans)
                ],
                "whatIf": [
                    {
                        "policy": str(row.policy),
                        "rule": row.rule.value,
                        "retention": format_duration(row.retention),
                        "groups": row.groups,
                        "groupsByKind": dict(row.groups_by_kind),
                        "offsets": row.offsets,
                        "offsetsInGroups": row.offsets_in_groups,
                        "comebackGroups": row.comeback_groups,
                        "comebacks": row.comebacks,
                    }
                    for row in audit.what_if
                ],
            }
        )
    return {
        "generatedAt": to_rfc3339(now),
        "engine": engine,
        "policies": [
            {
                "policy": str(policy.ref),
                "rules": {
                    rule.value: int(r.total_seconds()) for rule, r in policy.spec.rules.enabled().items()
                },
            }
            for policy in policies
        ],
        "clusters": clusters,
    }


def _skips_by_reason(audit: ClusterAudit, index: int) -> dict[str, int]:
    if audit.skips_in_table:
        return dict(audit.skips_by_reason[index])
    return dict(sorted(Counter(s.reason_code.value for s in audit.plans[index].skipped).items()))


def groups_table(audits: Sequence[ClusterAudit]) -> pa.Table:
    rows = []
    for audit in audits:
        facts = {g.group_id: g for g in audit.snapshot.groups} if audit.snapshot else {}
        comebacks: dict[str, int] = {}
        for c in audit.comebacks:
            comebacks[c.group] = comebacks.get(c.group, 0) + 1
        for view, offsets in audit.answers:
            fact = facts.get(view.group_id)
            commits = [o.commit_time_ms for o in offsets.values() if o.commit_time_ms is not None]
            rows.append(
                {
                    "cluster": audit.source.name,
                    "group": view.group_id,
                    "kind": view.kind.value,
                    "state": None if fact is None else fact.state.value,
                    "selected": fact is not None,
                    "protocol_type": view.protocol_type,
                    "member_count": view.member_count,
                    "subscribed_topics": None
                    if view.subscribed_topics is None
                    else sorted(view.subscribed_topics),
                    "empty_since": view.empty_since_ms,
                    "offset_count": len(offsets),
                    "last_commit": max(commits) if commits else None,
                    "generation": view.generation,
                    "group_epoch": view.group_epoch,
                    "comebacks": comebacks.get(view.group_id, 0),
                }
            )
    return pa.Table.from_pylist(rows, schema=GROUPS_SCHEMA)


def offsets_table(audits: Sequence[ClusterAudit]) -> pa.Table:
    rows = [
        {
            "cluster": audit.source.name,
            "group": view.group_id,
            "topic": tp.topic,
            "partition": tp.partition,
            "offset": lo.offset,
            "commit_time": lo.commit_time_ms,
            "expire_time": lo.expire_time_ms,
            "leader_epoch": lo.leader_epoch,
            "metadata": lo.metadata,
            "topic_id": None if lo.topic_id is None else str(lo.topic_id),
        }
        for audit in audits
        for view, offsets in audit.answers
        for tp, lo in sorted(offsets.items())
    ]
    return pa.Table.from_pylist(rows, schema=OFFSETS_SCHEMA)


def plan_table(audits: Sequence[ClusterAudit]) -> pa.Table:
    rows = [
        {
            "cluster": audit.source.name,
            "cluster_id": plan.cluster_id,
            "policy": str(plan.policy),
            "mode": plan.mode.value,
            "action": action.kind.value,
            "group": action.group_id,
            "group_kind": action.group_kind.value,
            "rule": action.rule.value,
            "retention": format_duration(action.retention),
            "reason": action.reason,
            "eligible_since": action.eligible_since,
            "timestamp_source": action.timestamp_source.value,
            "age_seconds": int(action.age.total_seconds()),
            "partitions": [{"topic": p.topic, "partition": p.partition} for p in action.partitions],
        }
        for audit in audits
        for plan in audit.plans
        for action in plan.actions
    ]
    schema = pa.schema(
        [
            ("cluster", pa.string()),
            ("cluster_id", pa.string()),
            ("policy", pa.string()),
            ("mode", pa.string()),
            ("action", pa.string()),
            ("group", pa.string()),
            ("group_kind", pa.string()),
            ("rule", pa.string()),
            ("retention", pa.string()),
            ("reason", pa.string()),
            ("eligible_since", pa.timestamp("us", tz="UTC")),
            ("timestamp_source", pa.string()),
            ("age_seconds", pa.int64()),
            ("partitions", pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))),
        ]
    )
    return pa.Table.from_pylist(rows, schema=schema)


def _write_table(table: pa.Table, directory: Path, dictionary: bool | list[str] = True) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.parquet"):
        old.unlink()
    pq.write_table(table, directory / "part-00000.parquet", use_dictionary=dictionary)


def write_outputs(
    out: Path,
    audits: Sequence[ClusterAudit],
    now: datetime,
    engine: dict[str, Any],
    *,
    histograms: dict[str, Any] | None = None,
    spark_tables: bool = False,
    policies: Sequence[ConsumerGroupPolicy] = (),
) -> dict[str, Any]:
    """Writes every output; returns the summary document. With `spark_tables` the `offsets` and
    `groups` tables were already written by the audit's tasks (`fleet.task_tables`)."""
    out.mkdir(parents=True, exist_ok=True)
    write_plans(out / "plan.json", audits, out / SKIPS_TABLE)
    summary = summary_document(audits, now, engine, policies)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    if not spark_tables:
        # dictionary-encoded as the tasks write them (`task_tables.DICTIONARY_COLUMNS`)
        _write_table(offsets_table(audits), out / "offsets", list(DICTIONARY_COLUMNS["offsets"]))
        _write_table(groups_table(audits), out / "groups", list(DICTIONARY_COLUMNS["groups"]))
    _write_table(plan_table(audits), out / "plan")
    if histograms is None:
        histograms = histograms_from_answers(audits, now)
    (out / "report.html").write_text(render_report(audits, summary, now, histograms))
    return summary
