"""What an audit leaves in `--out`: plan.json (the CLI's schema), summary.json, Parquet tables
`offsets`, `groups`, `plan` (one directory each), and report.html."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from groupwarden.core.durations import format_duration
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.render import plan_to_json, summary_to_json
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.fleet.cluster_audit import ClusterAudit
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
    rows = _SkipRuns(_merged_skips(skips, positions))
    with path.open("wb") as file:
        start = 0
        for index, (ci, pi, in_table) in enumerate(order):
            if not in_table:
                continue
            mark = f'"skipped": "{_SKIPS_MARK.format(index)}"'
            at = text.index(mark, start)
            indent = " " * (at - text.rindex("\n", 0, at) - 1)
            file.write(text[start:at].encode())
            file.write(b'"skipped": [')
            # each line of an entry indented one level deeper than "skipped" (json's indent=2)
            written = rows.write_plan(file, (ci << 32) | pi, indent + "  ")
            file.write(b"]" if not written else ("\n" + indent + "]").encode())
            start = at + len(mark)
        file.write(text[start:].encode())


# A skip's place in plan.json: its cluster's position, policy index, group, reason, partitions
# (`_partitions_key`) and, between otherwise equal skips, its rendered text.
_KEYS = ("cluster_position", "policy_index", "group", "reason", "partitions_key", "plan_json")
_READ_COLUMNS = ["cluster", "policy_index", "group", "reason", "partitions", "plan_json"]
# Rows read from a task's file at a time (whole row groups: SKIPS_ROW_GROUP rows each), and
# written at a time. Each read costs a binary search per file and an Arrow sort, each write three
# copies of the texts: 50 clusters (5M skips, 8 files) merged in 4.7 s with reads of 8,000 rows,
# 5.0 s with 4,000, the driver's RSS as with the row-by-row merge it replaced (11.0 s).
_MERGE_READ = 2 * SKIPS_ROW_GROUP
_WRITE_SLICE = 1024


def _partitions_key(partitions: list[dict[str, Any]]) -> bytes:
    """Bytes that sort as the skip's partitions do as a tuple of (topic, partition): per
    partition the topic's UTF-8 (a 0 byte escaped as 0 1) ended by 0 0, then the partition as a
    big-endian offset binary int32. A tuple that is a prefix of another sorts first either way."""
    return b"".join(
        p["topic"].encode().replace(b"\x00", b"\x00\x01")
        + b"\x00\x00"
        + (p["partition"] + 2**31).to_bytes(4, "big")
        for p in partitions
    )


def _keyed(batch: pa.RecordBatch, positions: dict[str, int]) -> pa.Table:
    """A read of a task's skips with the merge's keys (`_KEYS`)."""
    encoded = pc.dictionary_encode(batch.column("cluster"))
    position_of = np.array([positions[c] for c in encoded.dictionary.to_pylist()], dtype=np.int32)
    cluster_position = position_of[encoded.indices.to_numpy(zero_copy_only=False)]
    # Most skips are of whole groups: only the rows with partitions are converted.
    keys = [b""] * batch.num_rows
    column = batch.column("partitions")
    lengths = pc.fill_null(pc.list_value_length(column), 0).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(lengths).tolist():
        keys[row] = _partitions_key(column[row].as_py())
    return pa.table(
        {
            "cluster_position": pa.array(cluster_position, pa.int32()),
            "policy_index": batch.column("policy_index"),
            "group": batch.column("group"),
            "reason": batch.column("reason"),
            "partitions_key": pa.array(keys, pa.binary()),
            "plan_json": batch.column("plan_json"),
        }
    )


def _last_key(table: pa.Table) -> tuple[Any, ...]:
    return tuple(table.column(k)[table.num_rows - 1].as_py() for k in _KEYS)


def _leading_at_most(table: pa.Table, bound: tuple[Any, ...]) -> int:
    """How many of the sorted `table`'s first rows sort at or before `bound` (a `_last_key`): a
    binary search whose rows are compared key by key, each taken only when the ones before it tie
    (a whole-table comparison per read cost 16 Arrow calls over every held row)."""
    columns = [table.column(key) for key in _KEYS]

    def at_most(row: int) -> bool:
        for column, value in zip(columns, bound, strict=True):
            held = column[row].as_py()
            if held != value:
                return bool(held < value)
        return True

    low, high = 0, table.num_rows
    while low < high:
        middle = (low + high) // 2
        if at_most(middle):
            low = middle + 1
        else:
            high = middle
    return low


def _merged_skips(directory: Path, positions: dict[str, int]) -> Iterator[_MergedRead]:
    """The tasks' skips in plan.json's order (`_KEYS`), read by read, each sorted and each after
    the one before. A k-way merge by reads, not rows: every row at or
    before the least of the files' last read rows can be written (each file is sorted, so what
    it holds later sorts after its last read row); those rows are sorted together with Arrow,
    and the file whose last read row that was reads next."""

    def reads(path: Path) -> Iterator[pa.RecordBatch]:
        # pre_buffer off: by default pyarrow reads ~14 MiB of a file ahead for its first batch, and
        # with one open reader per task file that read-ahead was the driver's peak (50 clusters:
        # 355 MiB RSS at this merge, 250 without it)
        reader = pq.ParquetFile(path, pre_buffer=False)
        yield from reader.iter_batches(batch_size=_MERGE_READ, columns=_READ_COLUMNS, use_threads=False)

    files = sorted(directory.glob("*.parquet")) if directory.is_dir() else []
    readers: list[Iterator[pa.RecordBatch] | None] = [reads(f) for f in files]
    held: list[pa.Table | None] = [None] * len(files)
    sort_keys = [(key, "ascending") for key in _KEYS]
    while True:
        for index, reader in enumerate(readers):
            table = held[index]
            while reader is not None and (table is None or table.num_rows == 0):
                batch = next(reader, None)
                if batch is None:
                    readers[index] = reader = None
                else:
                    held[index] = table = _keyed(batch, positions)
        holding = {i: table for i, table in enumerate(held) if table is not None and table.num_rows}
        if not holding:
            return
        reading = [table for i, table in holding.items() if readers[i] is not None]
        bound = min(_last_key(table) for table in reading) if reading else None
        parts = []
        for index, table in holding.items():
            count = table.num_rows if bound is None else _leading_at_most(table, bound)
            if bound is not None and count < table.num_rows and _last_key(table) == bound:
                # (a file out of order: its last row not at or before itself)
                raise ValueError(f"the skips file {files[index].name} is not in plan.json's order")
            parts.append(table.slice(0, count))
            held[index] = table.slice(count)
        taken = [part for part in parts if part.num_rows]
        if len(taken) == 1:
            # one file's rows only (the stage packs each cluster's units together): in order already
            merged, order = taken[0], None
            positions_held = merged.column("cluster_position").to_numpy().astype(np.int64)
            indexes = merged.column("policy_index").to_numpy().astype(np.int64)
        else:
            merged = pa.concat_tables(parts)
            order = pc.sort_indices(merged, sort_keys=sort_keys).to_numpy()
            positions_held = merged.column("cluster_position").to_numpy()[order].astype(np.int64)
            indexes = merged.column("policy_index").to_numpy()[order].astype(np.int64)
        yield _MergedRead((positions_held << 32) | indexes, merged.column("plan_json"), order)


class _MergedRead(NamedTuple):
    """Rows of the merge, in plan.json's order: per row its plan ((cluster position << 32) |
    policy index) and, through `order` (if the rows needed a sort), its rendered text (taken a
    slice at a time, `texts`)."""

    plans: np.ndarray
    rendered: pa.ChunkedArray
    order: np.ndarray | None  # None: `rendered` is in order

    def texts(self, start: int, stop: int) -> pa.ChunkedArray:
        if self.order is None:
            return self.rendered.slice(start, stop - start)
        return self.rendered.take(self.order[start:stop])


class _SkipRuns:
    """The merged skips (`_merged_skips`) written plan by plan: each plan takes its run of rows
    and writes it as plan.json lists it, `_WRITE_SLICE` rows at a time (the texts are copied
    three times on the way: taken in order, indented, joined)."""

    def __init__(self, reads: Iterator[_MergedRead]) -> None:
        self._reads = reads
        self._read: _MergedRead | None = None
        self._at = 0

    def _next(self) -> bool:
        self._read, self._at = next(self._reads, None), 0
        return self._read is not None

    def write_plan(self, file: BinaryIO, plan: int, pad: str) -> bool:
        """Writes the skips of `plan` ((cluster position << 32) | policy index), each on a new
        line indented by `pad`, separated by commas; whether there were any."""
        written = False
        while True:
            if (self._read is None or self._at == len(self._read.plans)) and not self._next():
                return written
            assert self._read is not None
            plans = self._read.plans
            end = int(np.searchsorted(plans, plan, side="right"))
            for start in range(self._at, end, _WRITE_SLICE):
                rendered = self._read.texts(start, min(end, start + _WRITE_SLICE))
                # ",\n<pad><entry with each line break followed by pad>", the first without its comma
                entries = pc.binary_join_element_wise(
                    ",\n" + pad, pc.replace_substring(rendered, "\n", "\n" + pad), ""
                ).combine_chunks()
                _write_strings(file, entries, skip=0 if written else 1)
                written = True
            self._at = max(self._at, end)
            if self._at < len(plans):
                return written


def _write_strings(file: BinaryIO, strings: pa.Array, skip: int) -> None:
    """The strings' UTF-8 bytes one after another (their data buffer), less the first `skip`."""
    offsets = np.frombuffer(strings.buffers()[1], dtype=np.int32)[
        strings.offset : strings.offset + len(strings) + 1
    ]
    data = strings.buffers()[2]
    if data is not None and len(strings):
        file.write(memoryview(data)[int(offsets[0]) + skip : int(offsets[-1])])


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
