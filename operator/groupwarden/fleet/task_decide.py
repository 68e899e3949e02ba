"""The decision in the audit's tasks: each task decides the groups its units hold (core/parts.py).

The audit's stage runs COUNT on each unit's selected rows (the groups, their offsets and
come-backs: `schema.TASK_ROW_SCHEMA`) and writes the rows the later steps need to a file per task
(`later_rows`); a task of the later jobs reads one such file. Each step turns the rows into the
core's facts per cluster (the same `snapshot_from_answers` as `groupwarden plan`; the common
shapes on columns, `columnar_count` / `columnar_decide`) and runs one step of `core.parts` on them:
- COUNT: each policy's counts, the sets of policies selecting a group together, the oldest
  candidates as if no breaker tripped, and the what-if rows;
- KEYS: the oldest candidates with the breakers known (only when a tripped breaker refuses what
  another policy would delete);
- DECIDE: the actions up to the limits' cut-offs (at most the limits over all tasks), skip counts
  by reason, the topics of the deleted groups' offsets (the report's reclaimed offsets), and
  every skip written to the task's file of the `skips` table.
What a task returns is one small row per cluster (a pickled `core.parts` value): the driver never
sees a group, an offset or a skip.
"""

from __future__ import annotations

import pickle
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from groupwarden.core.engine import Cutoffs, PolicyTotals
from groupwarden.core.parts import PartCounts, PartDecision, PartKeys, count_part, decide_part, keys_part
from groupwarden.core.plan import Action, ActionKind, Skip, SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.render import indented_skip_json, json_string, whole_group_skip_json
from groupwarden.core.selection import GroupMatcher, matching_any
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind, TopicPartition
from groupwarden.core.whatif import PausedGroup, WhatIfRow, what_if
from groupwarden.fleet.columnar_claims import CLAIM_COLUMN, handed_claims
from groupwarden.fleet.columnar_count import Claimed, add_claimed, split_count
from groupwarden.fleet.columnar_decide import GroupSkips, split_decide
from groupwarden.fleet.schema import GROUP_COLUMNS, MEMBER_COLUMNS, OFFSET_COLUMNS, TASK_ROW_SCHEMA
from groupwarden.offsets_log.history import Comeback
from groupwarden.offsets_log.rows import group_from_row, topology_from_row
from groupwarden.offsets_log.share_state import ShareStarts
from groupwarden.offsets_log.snapshot import (
    SHARE_STATE_SETTLED,
    SHARE_STATE_UNKNOWN,
    LedgerAnswer,
    snapshot_from_answers,
)
from groupwarden.offsets_log.views import LedgerGroup, LedgerOffset, LogTimes

# What a decision task returns: one row per cluster of its units.
RESULT_SCHEMA = pa.schema([("cluster", pa.string()), ("payload", pa.binary())])

_PARTITIONS = pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))
SKIPS_SCHEMA = pa.schema(
    [
        ("cluster", pa.string()),
        ("cluster_id", pa.string()),
        ("policy", pa.string()),
        ("policy_index", pa.int32()),
        ("group", pa.string()),
        ("reason", pa.string()),
        ("detail", pa.string()),
        ("group_kind", pa.string()),
        ("partitions", _PARTITIONS),
        # the skip as plan.json lists it (`indented_json` at indent 0), rendered by the task:
        # the driver only indents and copies it (a whole-fleet plan lists up to a skip per group)
        ("plan_json", pa.string()),
    ]
)
# Rows per row group of a task's skips file: the driver merges every task's file at once.
SKIPS_ROW_GROUP = 4_000


class Step(Enum):
    COUNT = "count"
    KEYS = "keys"
    DECIDE = "decide"


@dataclass(frozen=True)
class ClusterContext:
    """What the tasks need about a cluster besides its rows (broadcast: small)."""

    cluster_id: str
    topics: frozenset[str] | None
    # `__share_group_state` replayed: one entry per share group and share-partition (None: not read)
    share_starts: ShareStarts | None


@dataclass(frozen=True)
class DecideSettings:
    policies: tuple[ConsumerGroupPolicy, ...]
    now: datetime
    retentions: tuple[timedelta, ...]
    clusters: Mapping[str, ClusterContext]  # in the order of the audit's sources
    skips: str | None = None  # the `skips` table's directory (DECIDE)


@dataclass(frozen=True)
class Globals:
    """What the driver found between the steps, per cluster."""

    totals: Mapping[str, Sequence[PolicyTotals]]
    cuts: Mapping[str, Sequence[Cutoffs]] = field(default_factory=dict)


@dataclass
class Counted:
    counts: PartCounts
    what_if: list[WhatIfRow]


@dataclass
class Decided:
    actions: list[list[Action]]
    skips_by_reason: list[Counter[SkipReason]]
    # per policy: the topics of the offsets its DeleteGroup actions remove
    reclaimed: list[Counter[str]]


@dataclass
class Part:
    cluster: str
    answers: list[LedgerAnswer]
    comebacks: list[Comeback]


OFFSET_FIELDS = ("cluster", *OFFSET_COLUMNS)
GROUP_FIELDS = ("cluster", *GROUP_COLUMNS, *MEMBER_COLUMNS)
# The columns of a group row the decision reads: everything but the member lists.
LEAN_GROUP_FIELDS = ("cluster", *GROUP_COLUMNS, "streams_topology")
COMEBACK_FIELDS = ("cluster", "group", "kind", "empty_since_ms", "returned_ms")
# The columns of the task rows that make a group's facts (`job.collect_selected`).
INPUT_COLUMNS = tuple(dict.fromkeys(("row_kind", *GROUP_FIELDS, *OFFSET_FIELDS, "returned_ms")))
DECISION_ROW_KINDS = ("group", "offset", "comeback")
# The columns a decision task reads (`run_step`: the groups without their member lists).
DECIDE_COLUMNS = tuple(dict.fromkeys(("row_kind", *LEAN_GROUP_FIELDS, *OFFSET_FIELDS, "returned_ms")))
# The selected rows the stage writes for the decision's later steps (`pipeline.TaskSettings`,
# `later_rows`), with COUNT's claims.
CLAIM_FIELD = pa.field(CLAIM_COLUMN, pa.int64())
DECISION_SCHEMA = pa.schema([*(TASK_ROW_SCHEMA.field(name) for name in DECIDE_COLUMNS), CLAIM_FIELD])


def offsets_by_group(offsets: pa.Table) -> dict[tuple[str, str], dict[TopicPartition, LedgerOffset]]:
    """Offset rows as the core's values per (cluster, group), built column by column (no row
    dicts) with one UUID per distinct topic id and one `TopicPartition` per distinct partition:
    what `group_from_row` builds from row dicts. Each group's offsets come in partition order (a
    sort in Arrow), so the core's `sorted` of them (`group_facts`) finds them in order."""
    ids: dict[str, uuid.UUID] = {}
    partitions: dict[tuple[str, int], TopicPartition] = {}
    by_group: dict[tuple[str, str], dict[TopicPartition, LedgerOffset]] = {}
    mine: dict[TopicPartition, LedgerOffset] = {}
    last: tuple[str, str] | None = None
    table = offsets.select(list(OFFSET_FIELDS))
    if table.num_rows > 1:
        order = pc.sort_indices(
            table,
            sort_keys=[
                ("cluster", "ascending"),
                ("group", "ascending"),
                ("topic", "ascending"),
                ("tp", "ascending"),
            ],
        )
        table = table.take(order)
    for batch in table.to_batches(max_chunksize=100_000):
        columns = [batch.column(name).to_pylist() for name in OFFSET_FIELDS]
        for cluster, group, topic, partition, offset, commit, expire, epoch, metadata, topic_id in zip(
            *columns, strict=True
        ):
            key = (cluster, group)
            if key != last:
                found = by_group.get(key)
                mine = by_group[key] = {} if found is None else found
                last = key
            if topic_id is None:
                parsed = None
            else:
                parsed = ids.get(topic_id)
                if parsed is None:
                    parsed = ids[topic_id] = uuid.UUID(topic_id)
            tp_key = (topic, partition)
            tp = partitions.get(tp_key)
            if tp is None:
                tp = partitions[tp_key] = TopicPartition(topic, partition)
            mine[tp] = LedgerOffset(offset, commit, expire, epoch, metadata, parsed)
    return by_group


def parts_of(rows: pa.Table, *, members: bool = True) -> list[Part]:
    """The rows of a task (selected groups, offsets, come-backs of any clusters) per cluster.
    `members=False`: the groups' member lists are left out of their views (`lean_views`), as the
    decision never reads them."""
    kinds = rows.column("row_kind")
    # Columns first, then rows: a filter of the nested member columns is slow, and a step reads
    # none of them.
    offsets = offsets_by_group(rows.select(list(OFFSET_FIELDS)).filter(pc.equal(kinds, "offset")))
    parts: dict[str, Part] = {}

    def part(cluster: str) -> Part:
        found = parts.get(cluster)
        if found is None:
            found = parts[cluster] = Part(cluster, [], [])
        return found

    fields = GROUP_FIELDS if members else LEAN_GROUP_FIELDS
    groups = rows.select(list(fields)).filter(pc.equal(kinds, "group"))
    views: Iterator[tuple[str, LedgerGroup]]
    if members:
        views = (
            (row["cluster"], group_from_row({**row, "offsets": ()})[0])
            for batch in groups.to_batches(max_chunksize=20_000)
            for row in batch.to_pylist()
        )
    else:
        views = lean_views(groups)
    for cluster, view in views:
        found = offsets.pop((cluster, view.group_id), None)
        part(cluster).answers.append((view, {} if found is None else found))
    for row in rows.select(list(COMEBACK_FIELDS)).filter(pc.equal(kinds, "comeback")).to_pylist():
        part(row["cluster"]).comebacks.append(
            Comeback(row["group"], GroupKind(row["kind"]), row["empty_since_ms"], row["returned_ms"])
        )
    return list(parts.values())


def lean_views(groups: pa.Table) -> Iterator[tuple[str, LedgerGroup]]:
    """(cluster, view) per group row, built column by column, as `group_from_row` builds it but
    without its member lists: their number stays (`member_count`), and the core's facts
    (`group_facts`: state, subscriptions, internal topics) read nothing else of them. The member
    lists of a whole-fleet selection (nested lists, a dict per member) were a third of the cost
    of the decision's rows."""
    for batch in groups.select(list(LEAN_GROUP_FIELDS)).to_batches(max_chunksize=50_000):
        columns = [batch.column(name).to_pylist() for name in LEAN_GROUP_FIELDS]
        for (
            cluster,
            group_id,
            kind,
            protocol_type,
            generation,
            protocol,
            state_ms,
            group_epoch,
            member_count,
            empty_since_ms,
            subscribed,
            offset_count,
            topology,
        ) in zip(*columns, strict=True):
            yield (
                cluster,
                LedgerGroup(
                    group_id=group_id,
                    kind=GroupKind(kind),
                    protocol_type=protocol_type,
                    generation=generation,
                    protocol=protocol,
                    current_state_timestamp_ms=state_ms,
                    group_epoch=group_epoch,
                    classic_members=(),
                    consumer_members={},
                    regex_topics={},
                    empty_since_ms=empty_since_ms,
                    subscribed_topics=None if subscribed is None else frozenset(subscribed),
                    offset_count=offset_count,
                    modern_member_count=member_count or 0,
                    streams_topology=topology_from_row(topology),
                ),
            )


def selects_id(settings: DecideSettings) -> Callable[[str], bool]:
    """Whether any policy's globs accept a group id (the policies' matchers built once per task)."""
    return matching_any(GroupMatcher.from_selector(p.spec.selector) for p in settings.policies)


@dataclass
class Facts:
    """What a task builds once per part and every step reads (`run_step`)."""

    selects_id: Callable[[str], bool]
    times: LogTimes = field(default_factory=LogTimes)
    # COUNT: per cluster, the groups some policy's evaluation has a verdict on (a candidate or a
    # skip). The later steps need no other group: a group without a verdict under any policy
    # makes no candidate, key, block, action or skip (`core.parts`).
    judged: dict[str, set[str]] = field(default_factory=dict)
    # COUNT on columns: per row of its input, the claims DECIDE is handed (`later_rows`)
    claims: np.ndarray | None = None


def _snapshot(
    part: Part, settings: DecideSettings, facts: Facts | None = None, *, settled_share: bool = False
) -> ClusterSnapshot:
    """The part's snapshot as `groupwarden plan` builds it. `settled_share`: share groups dated
    as over the policy's runs (`SHARE_STATE_SETTLED`: an Empty one by its Empty-since), not by
    `__share_group_state` (the what-if)."""
    context = settings.clusters[part.cluster]
    built = Facts(selects_id(settings)) if facts is None else facts
    return snapshot_from_answers(
        part.answers,
        settings.now,
        cluster_id=context.cluster_id,
        topics=context.topics,
        selects_id=built.selects_id,
        share_state=SHARE_STATE_SETTLED if settled_share else SHARE_STATE_UNKNOWN,
        share_starts=None if settled_share else context.share_starts,
        times=built.times,
    )


def count(part: Part, settings: DecideSettings, facts: Facts | None = None) -> Counted:
    snapshot = _snapshot(part, settings, facts)
    evaluated, counts = count_part(settings.policies, snapshot, settings.now)
    if facts is not None:
        judged = facts.judged.setdefault(part.cluster, set())
        for evaluation in evaluated.evaluations:
            judged.update(c.group.group_id for c in evaluation.group_candidates)
            judged.update(c.group.group_id for c in evaluation.offset_candidates)
            judged.update(s.group_id for s in evaluation.skipped)
    rows: list[WhatIfRow] = []
    if settings.retentions:
        settled = snapshot
        context = settings.clusters[part.cluster]
        if context.share_starts is None and any(g.kind is GroupKind.SHARE for g in snapshot.groups):
            # As `testing.fleet_oracle.decide_reference`: over the policy's runs, an Empty share group's
            # start offsets (not in this log) are dated by its Empty-since.
            settled = _snapshot(part, settings, facts, settled_share=True)
        paused = [PausedGroup(c.group, c.pause) for c in part.comebacks]
        rows = what_if(settings.policies, settled, settings.now, settings.retentions, paused)
    return Counted(counts, rows)


def keys(part: Part, settings: DecideSettings, found: Globals, facts: Facts | None = None) -> PartKeys:
    snapshot = _snapshot(part, settings, facts)
    return keys_part(settings.policies, snapshot, settings.now, found.totals[part.cluster])


def decide(
    part: Part,
    settings: DecideSettings,
    found: Globals,
    facts: Facts | None = None,
    claimed_skips: Sequence[Sequence[Skip]] | None = None,
    claimed_group_skips: Sequence[Sequence[GroupSkips]] | None = None,
) -> tuple[Decided, PartDecision]:
    """`claimed_skips` / `claimed_group_skips`: per policy, the skips of this part's groups
    decided on columns (`columnar_decide.split_decide`), added to the core's (the latter are counted
    here and written by `skips_table`, never made `Skip`s)."""
    snapshot = _snapshot(part, settings, facts)
    decision = decide_part(
        settings.policies, snapshot, settings.now, found.totals[part.cluster], found.cuts[part.cluster]
    )
    if claimed_skips is not None:
        for mine, theirs in zip(decision.skips, claimed_skips, strict=True):
            mine.extend(theirs)
    by_reason = decision.skips_by_reason()
    if claimed_group_skips is not None:
        for counts, blocks in zip(by_reason, claimed_group_skips, strict=True):
            for block in blocks:
                if block.ids:
                    counts[block.reason] += len(block.ids)
    offsets = {view.group_id: offsets for view, offsets in part.answers}
    reclaimed = [
        Counter(
            tp.topic
            for a in actions
            if a.kind is ActionKind.DELETE_GROUP
            for tp in offsets.get(a.group_id, {})
        )
        for actions in decision.actions
    ]
    return Decided(decision.actions, by_reason, reclaimed), decision


# plan.json's order of a policy's skips: by group, reason, partitions (the last first)
_SKIP_ORDER = (itemgetter(2), itemgetter(1), itemgetter(0))


def skips_table(
    cluster: str,
    cluster_id: str,
    settings: DecideSettings,
    decision: PartDecision,
    group_skips: Sequence[Sequence[GroupSkips]] | None = None,
) -> pa.Table:
    """A part's skips (the decision's, and `group_skips` per policy) as rows of the `skips` table,
    in the order plan.json lists them (per policy: by group, reason, partitions)."""
    parts: list[pa.Table] = []
    for index, (policy, skips) in enumerate(zip(settings.policies, decision.skips, strict=True)):
        blocks = () if group_skips is None else group_skips[index]
        if skips or not blocks:
            parts.append(_listed_skips(cluster, cluster_id, str(policy.ref), index, skips, blocks))
        else:
            parts.append(_whole_group_skips(cluster, cluster_id, str(policy.ref), index, blocks))
    return pa.concat_tables(parts) if parts else SKIPS_SCHEMA.empty_table()


def _listed_skips(
    cluster: str,
    cluster_id: str,
    policy: str,
    index: int,
    skips: Sequence[Skip],
    blocks: Sequence[GroupSkips],
) -> pa.Table:
    """A policy's skips row by row (any skip, of whole groups or of partitions)."""
    # Column by column, not row by row. Each skip is a tuple (group, reason, partitions, detail,
    # kind, rendered) sorted by its first three.
    rows = [
        (s.group_id, s.reason_code, s.partitions, s.detail, s.group_kind, indented_skip_json(s))
        for s in skips
    ]
    for block in blocks:
        rendered = {}
        for kind in set(block.kinds):
            rendered[kind] = whole_group_skip_json(block.reason, block.detail, kind)
        reason, detail = block.reason, block.detail
        rows.extend(
            (g, reason, (), detail, k, rendered[k][0] + json_string(g) + rendered[k][1])
            for g, k in zip(block.ids, block.kinds, strict=True)
        )
    # Stable sorts from the last key to the first: the same order as one sort by all three,
    # without a key tuple per row (runs of equal reasons and partitions cost ~nothing).
    for key in _SKIP_ORDER:
        rows.sort(key=key)
    n = len(rows)
    columns: dict[str, Any] = {
        "cluster": [cluster] * n,
        "cluster_id": [cluster_id] * n,
        "policy": [policy] * n,
        "policy_index": [index] * n,
        "group": [r[0] for r in rows],
        # (`StrEnum`s: Arrow takes them as the strings they are)
        "reason": [r[1] for r in rows],
        "detail": [r[3] for r in rows],
        "group_kind": [r[4] for r in rows],
        # (a skip of a whole group: its empty tuple as it is)
        "partitions": [
            [{"topic": p.topic, "partition": p.partition} for p in r[2]] if r[2] else r[2] for r in rows
        ],
        "plan_json": [r[5] for r in rows],
    }
    arrays = [pa.array(columns[f.name], f.type) for f in SKIPS_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=SKIPS_SCHEMA)


# What `json_string` (`json.encoder.encode_basestring_ascii`) writes as it is: printable ASCII
# but the quote and the backslash. A group id with any other character is escaped by it.
_NEEDS_ESCAPE = r"[^\x20\x21\x23-\x5b\x5d-\x7e]"


def _whole_group_skips(
    cluster: str, cluster_id: str, policy: str, index: int, blocks: Sequence[GroupSkips]
) -> pa.Table:
    """A policy's skips when all are of whole groups (`GroupSkips`: a whole-fleet policy defers
    a group per row), as `_listed_skips` writes them, on Arrow columns: sorted by group, then
    reason (a stable sort: Arrow orders strings by their UTF-8 bytes, which is Python's order by
    code points), each rendered as head + the id as a JSON string + its kind's tail."""
    # One entry per (block, kind): its reason, detail, kind and rendered tail; per row its entry.
    entries: list[tuple[str, str, str | None, str]] = []
    entry_of_row: list[int] = []
    ids: list[str] = []
    head = ""
    for block in blocks:
        position: dict[GroupKind | None, int] = {}
        for kind in dict.fromkeys(block.kinds):
            head, tail = whole_group_skip_json(block.reason, block.detail, kind)
            position[kind] = len(entries)
            entries.append((block.reason, block.detail, kind, tail))
        ids.extend(block.ids)
        entry_of_row.extend([position[k] for k in block.kinds])
    n = len(ids)
    group = pa.array(ids, pa.string())
    if pc.any(pc.match_substring_regex(group, _NEEDS_ESCAPE)).as_py():
        quoted = pa.array([json_string(g) for g in ids], pa.string())
    else:
        quoted = pc.binary_join_element_wise('"', group, '"', "")
    # Sorted by group, then reason: the reasons by their rank among the entries' reasons.
    reasons = sorted({e[0] for e in entries})
    rank = np.array([reasons.index(e[0]) for e in entries], dtype=np.int32)
    entry = np.array(entry_of_row, dtype=np.int32)
    unsorted = pa.table({"group": group, "rank": rank[entry]})
    order = pc.sort_indices(unsorted, sort_keys=[("group", "ascending"), ("rank", "ascending")])
    entry_in_order = pa.array(entry).take(order)

    def per_row(field: int) -> pa.Array:
        return pa.array([e[field] for e in entries], pa.string()).take(entry_in_order)

    columns = {
        "cluster": pa.repeat(pa.scalar(cluster, pa.string()), n),
        "cluster_id": pa.repeat(pa.scalar(cluster_id, pa.string()), n),
        "policy": pa.repeat(pa.scalar(policy, pa.string()), n),
        "policy_index": pa.repeat(pa.scalar(index, pa.int32()), n),
        "group": group.take(order),
        "reason": per_row(0),
        "detail": per_row(1),
        "group_kind": per_row(2),
        "partitions": pa.ListArray.from_arrays(
            pa.array(np.zeros(n + 1, dtype=np.int32)), pa.array([], _PARTITIONS.value_type)
        ),
        "plan_json": pc.binary_join_element_wise(head, quoted.take(order), per_row(3), ""),
    }
    return pa.Table.from_arrays([columns[f.name] for f in SKIPS_SCHEMA], schema=SKIPS_SCHEMA)


def skip_from_row(row: Mapping[str, Any]) -> Skip:
    """The inverse of a `skips` row: the core's `Skip`."""
    kind = row["group_kind"]
    return Skip(
        row["group"],
        SkipReason(row["reason"]),
        row["detail"],
        None if kind is None else GroupKind(kind),
        tuple(TopicPartition(p["topic"], p["partition"]) for p in row["partitions"] or ()),
    )


def run_step(
    rows: pa.Table,
    step: Step,
    settings: DecideSettings,
    found: Globals | None,
    task: int,
    facts: Facts | None = None,
    *,
    columns: bool = True,
) -> Iterator[tuple[str, bytes]]:
    """One decision task: (cluster, pickled result) per cluster of its rows. `facts`: what the
    step leaves for the caller (COUNT: the groups the later steps need, `judged_rows`).
    `columns=False`: COUNT and DECIDE build every group's facts with the core (the fast path's
    oracle)."""
    if facts is None:
        facts = Facts(selects_id(settings))
    claimed: dict[str, Claimed] = {}
    claimed_skips: dict[str, list[list[Skip]]] = {}
    claimed_group_skips: dict[str, list[list[GroupSkips]]] = {}
    if step is Step.COUNT and columns:
        # The common shapes counted on columns; the core counts the other groups (columnar_count.py).
        ids = {name: context.cluster_id for name, context in settings.clusters.items()}
        split = split_count(rows, settings.policies, settings.now, settings.retentions, ids)
        claimed = split.claimed
        facts.claims = split.row_claims
        rows = split.rest
    elif step is Step.DECIDE and columns:
        # The common shapes' skips on columns; the core decides the other groups and every action.
        assert found is not None
        decide_split = split_decide(rows, settings.policies, settings.now, found.totals, found.cuts)
        claimed_skips = decide_split.skips
        claimed_group_skips = decide_split.group_skips
        rows = decide_split.rest
    parts = parts_of(rows, members=False)
    known = {part.cluster for part in parts}
    parts.extend(Part(cluster, [], []) for cluster in [*claimed, *claimed_skips] if cluster not in known)
    order = {name: index for index, name in enumerate(settings.clusters)}
    parts.sort(key=lambda p: order[p.cluster])
    skip_tables: list[pa.Table] = []
    for part in parts:
        result: Any
        if step is Step.COUNT:
            result = count(part, settings, facts)
            mine = claimed.get(part.cluster)
            if mine is not None:
                result.counts, result.what_if = add_claimed(
                    result.counts, result.what_if, mine, settings.policies
                )
                facts.judged.setdefault(part.cluster, set()).update(mine.judged)
        elif step is Step.KEYS:
            assert found is not None
            result = keys(part, settings, found, facts)
        else:
            assert found is not None
            blocks = claimed_group_skips.get(part.cluster)
            result, decision = decide(part, settings, found, facts, claimed_skips.get(part.cluster), blocks)
            if settings.skips is not None:
                context = settings.clusters[part.cluster]
                skip_tables.append(skips_table(part.cluster, context.cluster_id, settings, decision, blocks))
        yield part.cluster, pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    if skip_tables and settings.skips is not None:
        table = pa.concat_tables(skip_tables)
        if table.num_rows:
            pq.write_table(
                table, Path(settings.skips) / f"part-{task:05d}.parquet", row_group_size=SKIPS_ROW_GROUP
            )


def judged_rows(rows: pa.Table, facts: Facts) -> pa.Table:
    """The group and offset rows of the groups COUNT found a verdict on (`Facts.judged`): all
    the later steps read (come-backs only count in COUNT's what-if)."""
    return rows.filter(pa.array(_judged(rows, facts)))


def later_rows(rows: pa.Table, facts: Facts, first_group: int = 0) -> pa.Table:
    """What the stage writes of a unit's rows (COUNT's input) for the later steps: the judged
    rows (`judged_rows`) with `DECIDE_COLUMNS`, and COUNT's claims (`CLAIM_COLUMN`, null where
    COUNT claimed nothing) so DECIDE's fast path need not claim them again. `first_group`: the
    group rows of the file written before these (the claims point at the file's group rows)."""
    keep = _judged(rows, facts)
    # Columns first: the filter then copies none of the member lists.
    later = rows.select(list(DECIDE_COLUMNS)).filter(pa.array(keep))
    claims: pa.Array
    if facts.claims is None or len(facts.claims) != rows.num_rows:
        claims = pa.nulls(later.num_rows, pa.int64())
    else:
        claims = pa.array(handed_claims(facts.claims, rows.column("row_kind"), keep, first_group), pa.int64())
    return later.append_column(CLAIM_FIELD, claims)


def _judged(rows: pa.Table, facts: Facts) -> np.ndarray:
    keep = np.zeros(rows.num_rows, dtype=bool)
    if not facts.judged:
        return keep
    # Each cluster's ids looked up among its own rows only (a task holds units of several
    # clusters): one pass over the rows, not one per cluster.
    encoded = pc.dictionary_encode(rows.column("cluster")).combine_chunks()
    codes = pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False)
    code_of = {name: code for code, name in enumerate(encoded.dictionary.to_pylist())}
    groups = rows.column("group")
    for cluster, judged in facts.judged.items():
        code = code_of.get(cluster)
        if code is None or not judged:
            continue
        positions = np.flatnonzero(codes == code)
        judged_ids = pa.array(sorted(judged), pa.string())
        found = pc.is_in(groups.take(pa.array(positions, pa.int64())), value_set=judged_ids)
        keep[positions[pc.fill_null(found, False).to_numpy(zero_copy_only=False)]] = True
    kinds = pc.is_in(rows.column("row_kind"), value_set=pa.array(["group", "offset"]))
    keep &= pc.fill_null(kinds, False).to_numpy(zero_copy_only=False)
    return keep


def results_table(results: Sequence[tuple[str, bytes]]) -> pa.Table:
    return pa.table(
        {"cluster": [c for c, _ in results], "payload": [p for _, p in results]}, schema=RESULT_SCHEMA
    )
