"""DECIDE on columns: the skips of the claimed groups (`columnar_claims`) that make no action,
without the core's objects; every claimed group that makes an action goes to the core.

A MIRROR of the core (DESIGN.md, "Fast paths and their oracle"): a claimed group is selected by one
policy and has no overlap block, so `core.engine.settle` leaves its candidate as it is unless the
policy's breaker tripped (a BlastRadiusExceeded skip), and `core.engine.take` (`_limit_groups`,
`_limit_offsets`) defers it (a LimitReached skip) unless its key is within the limit's cut-off.
The skip texts are the core's (`breaker_detail`, `group_limit_detail`, `offset_limit_detail`).
`tests/unit/fleet/test_fleet_columnar.py` proves DECIDE's actions, skip counts and every row of
the `skips` table equal the core's alone, and that every claimed group with an action reaches it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa

from groupwarden.core.engine import (
    Cutoffs,
    GroupKey,
    PartitionKey,
    PolicyTotals,
    breaker_detail,
    group_limit_detail,
    offset_limit_detail,
)
from groupwarden.core.plan import Skip, SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.fleet.columnar_claims import read_claimed
from groupwarden.fleet.columnar_rules import KINDS, Columns, candidates, from_micros, micros


@dataclass(frozen=True)
class GroupSkips:
    """Skips of whole groups that share a reason and a detail (a policy's deferred or refused
    groups), kept as columns: a whole-fleet audit skips a group per row, and a `Skip` each cost
    more than deciding them (`task_decide.skips_table` writes these without one)."""

    ids: list[str]
    kinds: list[GroupKind]
    reason: SkipReason
    detail: str

    @classmethod
    def of(cls, columns: Columns, rows: list[int], reason: SkipReason, detail: str) -> GroupSkips:
        ids = columns.ids
        codes = columns.kind[np.array(rows, dtype=np.int64)].tolist() if rows else []
        return cls([ids[r] for r in rows], [KINDS[c] for c in codes], reason, detail)

    def skips(self) -> list[Skip]:
        """The same skips as the core's values."""
        return [Skip(g, self.reason, self.detail, k) for g, k in zip(self.ids, self.kinds, strict=True)]


@dataclass
class DecideSplit:
    """DECIDE of the claimed groups that make no action: their skips per cluster and policy (of
    parts of groups as `Skip`s, of whole groups as `GroupSkips`); and the rows the core decides
    (the other groups, and the claimed ones that make an action)."""

    skips: dict[str, list[list[Skip]]]
    group_skips: dict[str, list[list[GroupSkips]]]
    rest: pa.Table
    policy_of: np.ndarray  # per group row (`claim`)
    acting: np.ndarray  # per group row: claimed, but given to the core for its action


def split_decide(
    rows: pa.Table,
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    totals: Mapping[str, Sequence[PolicyTotals]],
    cuts: Mapping[str, Sequence[Cutoffs]],
) -> DecideSplit:
    """DECIDE (`core.parts.decide_part`) on columns for the claimed groups (see the module
    docstring). A candidate with an action (at most the limits over all tasks) goes to the core
    with its rows."""
    read = read_claimed(rows, policies, now)
    columns = read.columns
    acting = np.zeros(len(read.policy_of), dtype=bool)
    skips: dict[str, list[list[Skip]]] = {}
    group_skips: dict[str, list[list[GroupSkips]]] = {}
    for cluster, policy_of in read.in_clusters().items():
        cluster_skips: list[list[Skip]] = [[] for _ in policies]
        skips[cluster] = cluster_skips
        cluster_group_skips: list[list[GroupSkips]] = [[] for _ in policies]
        group_skips[cluster] = cluster_group_skips
        for index, policy in enumerate(policies):
            claimed_by = policy_of == index
            if not bool(np.any(claimed_by)):
                continue
            found = candidates(columns, claimed_by, policy)
            policy_totals = totals[cluster][index]
            partitions = _old_partitions(columns, found.old_offsets)
            if policy_totals.trips(policy):
                # `settle`: the breaker refuses every candidate
                detail = breaker_detail(policy, policy_totals)
                reason = SkipReason.BLAST_RADIUS_EXCEEDED
                refused = np.flatnonzero(found.groups).tolist()
                cluster_group_skips[index].append(GroupSkips.of(columns, refused, reason, detail))
                cluster_skips[index].extend(
                    _skip(columns, r, reason, detail, tuple(old)) for r, old in partitions.items()
                )
                continue
            cut = cuts[cluster][index]
            # `_limit_groups`: the groups up to the cut-off act, the others are deferred
            taken = _groups_taken(columns, found.groups, found.bases, cut.groups)
            acting |= taken
            detail = group_limit_detail(cut)
            deferred = np.flatnonzero(found.groups & ~taken).tolist()
            cluster_group_skips[index].append(
                GroupSkips.of(columns, deferred, SkipReason.LIMIT_REACHED, detail)
            )
            # `_limit_offsets`: a group with any partition up to the cut-off acts (the core then
            # defers its others), the others' partitions are all deferred
            for r, old in partitions.items():
                if cut.offsets is not None and any(key <= cut.offsets for key in _keys(columns, r, old)):
                    acting[r] = True
                    continue
                detail = offset_limit_detail(cut, len(old))
                cluster_skips[index].append(_skip(columns, r, SkipReason.LIMIT_REACHED, detail, tuple(old)))
    return DecideSplit(skips, group_skips, read.rest(also=acting), read.policy_of, acting)


def _old_partitions(columns: Columns, old_offsets: np.ndarray) -> dict[int, list[tuple[TopicPartition, int]]]:
    """Per partly eligible group row: its old partitions (`old_offsets`, per claimed offset) with
    their commit times, by partition."""
    positions = np.flatnonzero(old_offsets)
    if not len(positions):
        return {}
    rows = pa.array(columns.owned_rows[positions], pa.int64())
    topics = columns.offsets.column("topic").take(rows).to_pylist()
    numbers = columns.offsets.column("tp").take(rows).to_pylist()
    found: dict[int, list[tuple[TopicPartition, int]]] = {}
    owners = columns.owner[positions].tolist()
    times = columns.owned_us[positions].tolist()
    for owner, topic, number, us in zip(owners, topics, numbers, times, strict=True):
        found.setdefault(owner, []).append((TopicPartition(topic, number), us))
    for group_partitions in found.values():
        group_partitions.sort()
    return found


def _keys(columns: Columns, row: int, old: list[tuple[TopicPartition, int]]) -> list[PartitionKey]:
    group_id = columns.ids[row]
    return [(from_micros(us), group_id, tp) for tp, us in old]


def _groups_taken(
    columns: Columns, groups: np.ndarray, bases: np.ndarray, newest: GroupKey | None
) -> np.ndarray:
    """The group candidates whose key (base, group id) is at or before the cut-off `newest`."""
    taken = np.zeros(len(groups), dtype=bool)
    if newest is None:
        return taken
    cut_us = micros(newest[0])
    taken = groups & (bases < cut_us)
    for row in np.flatnonzero(groups & (bases == cut_us)).tolist():
        taken[row] = columns.ids[row] <= newest[1]
    return taken


def _skip(
    columns: Columns,
    row: int,
    reason: SkipReason,
    detail: str,
    partitions: tuple[tuple[TopicPartition, int], ...] = (),
) -> Skip:
    kind = KINDS[int(columns.kind[row])]  # (a claimed group's kind is always one of them)
    concerned = tuple([tp for tp, _ in partitions]) if partitions else ()
    return Skip(columns.ids[row], reason, detail, kind, concerned)
