"""The fleet audit's reference path, the oracle of its tests and benchmarks: the tasks' rows ->
every group's core objects, per cluster -> the same `decide_many` and `what_if` as `groupwarden
plan`, in one process.

The audit itself never runs this: its tasks decide their own groups (`fleet.decide`,
`fleet.task_decide`, the common shapes on columns), and the driver never holds a cluster's groups.
This path holds them all and decides each cluster at once with the core alone, so what the audit
writes can be compared with it (DESIGN.md, "Fast paths and their oracle"). It imports the fleet,
so it needs the `[spark]` extra.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from groupwarden.core.decide_many import decide_many
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupMatcher, matching_any
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind
from groupwarden.core.whatif import PausedGroup, what_if
from groupwarden.fleet.cluster_audit import ClusterAudit, LogReach
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log.history import Comeback
from groupwarden.offsets_log.rows import group_from_row
from groupwarden.offsets_log.snapshot import (
    SHARE_STATE_SETTLED,
    SHARE_STATE_UNKNOWN,
    snapshot_from_answers,
)


def collect_reference(rows: Iterable[dict[str, Any]], sources: Sequence[ClusterSource]) -> list[ClusterAudit]:
    """The tasks' rows (`TASK_ROW_SCHEMA` as dicts) grouped per cluster, in `sources` order, with
    every group (the Spark job brings only the selected ones to the driver, `fleet.job`)."""
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
        group_offsets = offsets.get((cluster, row["group"]), [])
        audits[cluster].answers.append(group_from_row(dict(row, offsets=group_offsets)))
    for name, audit in audits.items():
        audit.reach = LogReach.of_partitions(partition_rows[name])
        audit.comebacks.sort()
        audit.answers.sort(key=lambda answer: answer[0].group_id)
        audit.totals_from_answers()
    return list(audits.values())


def decide_reference(
    audits: Sequence[ClusterAudit],
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta] = (),
) -> None:
    """Fills each audit's snapshot, plans (one per policy, `decide_many`) and what-if rows."""
    selects_id = matching_any(GroupMatcher.from_selector(p.spec.selector) for p in policies)

    def snapshot(audit: ClusterAudit, *, settled_share: bool = False) -> ClusterSnapshot:
        return snapshot_from_answers(
            audit.answers,
            now,
            cluster_id=audit.source.cluster_id,
            topics=audit.source.topics,
            selects_id=selects_id,
            share_state=SHARE_STATE_SETTLED if settled_share else SHARE_STATE_UNKNOWN,
            share_starts=None if settled_share else audit.source.share_starts,
        )

    for audit in audits:
        audit.snapshot = snapshot(audit)
        audit.groups_selected = len(audit.snapshot.groups)
        audit.plans = decide_many(policies, audit.snapshot, now)
        if retentions:
            paused = [PausedGroup(c.group, c.pause) for c in audit.comebacks]
            settled = audit.snapshot
            if audit.source.share_starts is None and any(g.kind is GroupKind.SHARE for g in settled.groups):
                # The what-if is over the policy's runs: after groupwarden has watched a share
                # group's start offsets (not in this log), an Empty one is dated by its Empty-since.
                settled = snapshot(audit, settled_share=True)
            audit.what_if = what_if(policies, settled, now, retentions, paused)
