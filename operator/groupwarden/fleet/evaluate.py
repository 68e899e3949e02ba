"""The driver's part: ledger rows -> one snapshot per cluster -> the same `decide_many` as the CLI.

The decision is global per policy (limits oldest-first, the blast-radius breaker, overlapping
policies), so it runs once per cluster over all its groups; the rows carry exactly the ledger's
answers (`offsets_log.rows`), so the snapshot is the one `groupwarden plan` would build.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from groupwarden.core.decide_many import decide_many
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupMatcher, matching_any
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind
from groupwarden.core.whatif import PausedGroup, WhatIfRow, what_if
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log.history import Comeback
from groupwarden.offsets_log.rows import group_from_row
from groupwarden.offsets_log.snapshot import SHARE_STATE_SETTLED, LedgerAnswer, snapshot_from_answers


@dataclass(frozen=True)
class LogReach:
    """What the log of one cluster held: how far back the audit can see."""

    records: int = 0
    tombstones: int = 0
    replayed: int = 0
    corrupt: int = 0
    unknown: int = 0
    partitions: int = 0
    earliest_ms: int | None = None
    latest_ms: int | None = None


@dataclass
class ClusterAudit:
    source: ClusterSource
    answers: list[LedgerAnswer] = field(default_factory=list)
    comebacks: list[Comeback] = field(default_factory=list)
    reach: LogReach = field(default_factory=LogReach)
    positions: dict[int, int] = field(default_factory=dict)
    snapshot: ClusterSnapshot | None = None
    plans: list[Plan] = field(default_factory=list)
    what_if: list[WhatIfRow] = field(default_factory=list)
    # Totals over every group of the cluster (computed where the data is, not from `answers`,
    # which holds only the groups some policy selects).
    groups_by_kind: dict[str, int] = field(default_factory=dict)
    offset_count: int = 0
    comeback_count: int = 0
    # Idle-age histogram inputs: (kind, idle seconds at `now`, measured from) per selected group
    idle: list[tuple[str, float, str]] = field(default_factory=list)
    # The groups some policy selects (the snapshot's groups)
    groups_selected: int = 0
    # Decided in the tasks (`fleet.decide`): the plans' skips are in the `skips` table, not in
    # `plans` (their counts are: per plan, by reason here); the topics of the offsets the plans'
    # DeleteGroup actions remove (the report's reclaimed offsets).
    skips_in_table: bool = False
    skips_by_reason: list[dict[str, int]] = field(default_factory=list)
    reclaimed: Counter[str] | None = None

    def totals_from_answers(self) -> None:
        """Totals when `answers` holds every group (the in-memory path and unit tests)."""
        kinds: dict[str, int] = {}
        for view, _ in self.answers:
            kinds[view.kind.value] = kinds.get(view.kind.value, 0) + 1
        self.groups_by_kind = dict(sorted(kinds.items()))
        self.offset_count = sum(len(offsets) for _, offsets in self.answers)
        self.comeback_count = len(self.comebacks)


def _reach(rows: list[dict[str, Any]]) -> LogReach:
    def total(name: str) -> int:
        return sum(int(r[name] or 0) for r in rows)

    earliest = [r["earliest_ms"] for r in rows if r["earliest_ms"] is not None and r["earliest_ms"] >= 0]
    latest = [r["latest_ms"] for r in rows if r["latest_ms"] is not None and r["latest_ms"] >= 0]
    return LogReach(
        records=total("records"),
        tombstones=total("tombstones"),
        replayed=total("replayed"),
        corrupt=total("corrupt"),
        unknown=total("unknown"),
        partitions=len(rows),
        earliest_ms=min(earliest) if earliest else None,
        latest_ms=max(latest) if latest else None,
    )


def collect_clusters(rows: Iterable[dict[str, Any]], sources: Sequence[ClusterSource]) -> list[ClusterAudit]:
    """The tasks' rows (`TASK_ROW_SCHEMA` as dicts) grouped per cluster, in `sources` order, with
    every group (tests, small logs: the Spark job brings only the selected ones to the driver)."""
    audits = {s.name: ClusterAudit(s) for s in sources}
    partition_rows: dict[str, list[dict[str, Any]]] = {s.name: [] for s in sources}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    offsets: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        audit = audits.get(row["cluster"])
        if audit is None:
            raise ValueError(f"records of cluster {row['cluster']!r} have no source description")
        kind = row["row_kind"]
        if kind == "partition":
            partition_rows[audit.source.name].append(row)
            if row["next_offset"] is not None:
                audit.positions[int(row["partition"])] = int(row["next_offset"])
        elif kind == "comeback":
            audit.comebacks.append(
                Comeback(row["group"], GroupKind(row["kind"]), row["empty_since_ms"], row["returned_ms"])
            )
        elif kind == "group":
            groups[(row["cluster"], row["group"])] = row
        elif kind == "offset":
            offsets.setdefault((row["cluster"], row["group"]), []).append(dict(row, partition=row["tp"]))
    for (cluster, _), row in groups.items():
        mine = offsets.get((cluster, row["group"]), [])
        audits[cluster].answers.append(group_from_row(dict(row, offsets=mine)))
    for name, audit in audits.items():
        audit.reach = _reach(partition_rows[name])
        audit.comebacks.sort()
        audit.answers.sort(key=lambda answer: answer[0].group_id)
        audit.totals_from_answers()
    return list(audits.values())


def decide_clusters(
    audits: Sequence[ClusterAudit],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta] = (),
) -> None:
    """Fills each audit's snapshot, plans (one per policy, `decide_many`) and what-if rows."""
    selects_id = matching_any(GroupMatcher.from_selector(p.spec.selector) for p in policies)

    for audit in audits:
        audit.snapshot = snapshot_from_answers(
            audit.answers,
            now,
            cluster_id=audit.source.cluster_id,
            topics=audit.source.topics,
            selects_id=selects_id,
            share_starts=audit.source.share_starts,
        )
        audit.groups_selected = len(audit.snapshot.groups)
        audit.plans = decide_many(policies, audit.snapshot, now)
        if retentions:
            paused = [PausedGroup(c.group, c.pause) for c in audit.comebacks]
            settled = audit.snapshot
            if audit.source.share_starts is None and any(g.kind is GroupKind.SHARE for g in settled.groups):
                # The what-if is over the policy's runs: after groupwarden has watched a share
                # group's start offsets (not in this log), an Empty one is dated by its Empty-since.
                settled = snapshot_from_answers(
                    audit.answers,
                    now,
                    cluster_id=audit.source.cluster_id,
                    topics=audit.source.topics,
                    selects_id=selects_id,
                    share_state=SHARE_STATE_SETTLED,
                )
            audit.what_if = what_if(policies, settled, now, retentions, paused)
