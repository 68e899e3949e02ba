"""COUNT on columns: the decision's first step for the claimed groups (`columnar_claims`), without
the core's objects (docs/spark-audit.md, "What each decision step costs per group").

The core (`snapshot_from_answers`, `count_part`, `what_if`) is the definition of COUNT. This module
answers for the groups whose verdicts are plain clock comparisons (`columnar_rules`), many groups
at once with numpy over the rows' columns, and hands every other group to the core
(`task_decide.count`), as `fast_codec` does for plain commits. COUNT's results add up over any
split of a cluster's groups (`core.parts`: each group's verdicts depend on that group alone), so
the task adds what the columns found to what the core found on the rest.

A MIRROR of the core (DESIGN.md, "Fast paths and their oracle"): the counts of `core.engine.evaluate`
(`PolicyTotals`), the keys of `core.engine.smallest_keys` and the rows of `core.whatif.what_if`.
`tests/unit/fleet/test_fleet_columnar.py` proves the counts, keys, judged groups and what-if rows
equal the core's on generated groups of every kind and state, and that unclaimed shapes reach the
core.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa

from groupwarden.core.engine import GroupKey, PartitionKey, PolicyTotals
from groupwarden.core.parts import PartCounts, PartKeys, merge_what_if
from groupwarden.core.policy import ConsumerGroupPolicy, RuleName
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.core.whatif import WhatIfRow
from groupwarden.fleet.columnar_claims import Claim, read_claimed
from groupwarden.fleet.columnar_rules import KINDS, Columns, KindCode, candidates, from_micros, verdicts


@dataclass
class Claimed:
    """COUNT of one cluster's claimed groups: what `task_decide.count` adds to the core's."""

    counts: PartCounts
    what_if: list[WhatIfRow]
    judged: set[str]


@dataclass
class Split:
    """The claimed groups' COUNT per cluster, and the rows the core counts (the other groups,
    their offsets, every come-back)."""

    claimed: dict[str, Claimed]
    rest: pa.Table
    # per group row of the input (in row order): its `policy_of` (tests)
    policy_of: np.ndarray
    # per row of the input: the claims DECIDE is handed (`ClaimedRows.row_claims`, `handed_claims`)
    row_claims: np.ndarray


def split_count(
    rows: pa.Table,
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta],
    cluster_ids: dict[str, str],
) -> Split:
    """COUNT of the claimed groups of `rows` (the decision's rows: `task_decide.DECIDE_COLUMNS`)
    per cluster, and the rest of the rows for the core."""
    read = read_claimed(rows, policies, now)
    claimed = {
        cluster: _count_cluster(read.columns, policy_of, policies, retentions, cluster_ids[cluster])
        for cluster, policy_of in read.in_clusters().items()
    }
    return Split(claimed, read.rest(), read.policy_of, read.row_claims())


def _count_cluster(
    columns: Columns,
    policy_of: np.ndarray,
    policies: Sequence[ConsumerGroupPolicy],
    retentions: Sequence[timedelta],
    cluster_id: str,
) -> Claimed:
    ids = columns.ids
    in_snapshot = int(np.count_nonzero(policy_of >= Claim.UNSELECTED))
    totals: list[PolicyTotals] = []
    keys = PartKeys.empty(len(policies))
    judged: set[str] = set()
    rows: list[WhatIfRow] = []
    for index, policy in enumerate(policies):
        claimed_by = policy_of == index
        limits = policy.spec.limits
        eligible = partitions = 0
        group_keys: list[GroupKey] = []
        partition_keys: list[PartitionKey] = []
        if bool(np.any(claimed_by)):
            found = candidates(columns, claimed_by, policy)
            eligible = int(np.count_nonzero(found.groups))
            partitions = int(np.count_nonzero(found.old_offsets))
            group_keys = _group_keys(ids, found.groups, found.bases, limits.max_group_deletions_per_run)
            if bool(np.any(found.partial)):
                partition_keys = _partition_keys(
                    columns, found.old_offsets, limits.max_offset_deletions_per_run
                )
            judged.update(ids[row] for row in np.flatnonzero(found.groups | found.partial).tolist())
        totals.append(PolicyTotals(int(np.count_nonzero(claimed_by)), eligible, partitions))
        keys.group_keys[index] = group_keys
        keys.offset_keys[index] = partition_keys
        keys.groups_standing[index] = eligible
        keys.partitions_standing[index] = partitions
        if retentions:
            rows.extend(_what_if_rows(columns, claimed_by, policy, retentions, cluster_id))
    counts = PartCounts(in_snapshot, totals, set(), keys)
    return Claimed(counts, rows, judged)


def _smallest(values: np.ndarray, limit: int) -> np.ndarray:
    """The positions of `values` at or below its `limit`-th smallest (ties all kept): a superset
    of the `limit` smallest keys' rows, whatever breaks the ties."""
    if limit <= 0 or not len(values):
        return np.zeros(0, dtype=np.int64)
    if len(values) <= limit:
        return np.arange(len(values))
    kth = np.partition(values, limit - 1)[limit - 1]
    return np.flatnonzero(values <= kth)


def _group_keys(ids: Sequence[str], candidates: np.ndarray, bases: np.ndarray, limit: int) -> list[GroupKey]:
    """The keys of the oldest group candidates (at most `limit`), as `smallest_keys` takes them."""
    rows = np.flatnonzero(candidates)
    chosen = rows[_smallest(bases[rows], limit)]
    found = heapq.nsmallest(limit, ((int(bases[r]), ids[r]) for r in chosen))
    return [(from_micros(us), group_id) for us, group_id in found]


def _partition_keys(columns: Columns, old_offsets: np.ndarray, limit: int) -> list[PartitionKey]:
    """The keys of the old partitions of the partly eligible groups (`old_offsets`, per claimed
    offset), the oldest `limit` of them."""
    positions = np.flatnonzero(old_offsets)
    positions = positions[_smallest(columns.owned_us[positions], limit)]
    rows = pa.array(columns.owned_rows[positions], pa.int64())
    topics = columns.offsets.column("topic").take(rows).to_pylist()
    numbers = columns.offsets.column("tp").take(rows).to_pylist()
    ids = columns.ids
    keys: list[tuple[int, str, TopicPartition]] = [
        (int(columns.owned_us[p]), ids[int(columns.owner[p])], TopicPartition(topic, number))
        for p, topic, number in zip(positions, topics, numbers, strict=True)
    ]
    return [(from_micros(us), group_id, tp) for us, group_id, tp in heapq.nsmallest(limit, keys)]


# What-if's kinds of the groups emptyGroupRetention deletes on columns
_EMPTY_GROUP_KINDS = (KindCode.CLASSIC, KindCode.CONSUMER)


def _what_if_rows(
    columns: Columns,
    claimed_by: np.ndarray,
    policy: ConsumerGroupPolicy,
    retentions: Sequence[timedelta],
    cluster_id: str,
) -> list[WhatIfRow]:
    """`what_if`'s rows of one policy over the claimed groups (no come-backs: the core counts them)."""
    rows = []
    for rule in policy.spec.rules.enabled():
        for retention in retentions:
            found = verdicts(columns, claimed_by, rule, retention)
            by_kind: dict[str, int] = {}
            if rule is RuleName.EMPTY_GROUP_RETENTION:
                for code in _EMPTY_GROUP_KINDS:
                    count = int(np.count_nonzero(found.groups & (columns.kind == code)))
                    if count:
                        by_kind[KINDS[code].value] = count
            else:
                count = int(np.count_nonzero(found.groups))
                if count:
                    by_kind[GroupKind.SIMPLE.value] = count
            rows.append(
                WhatIfRow(
                    cluster_id=cluster_id,
                    policy=policy.ref,
                    rule=rule,
                    retention=retention,
                    groups=int(np.count_nonzero(found.groups)),
                    offsets=int(found.old[found.partial].sum()),
                    offsets_in_groups=int(columns.offset_count[found.groups].sum()),
                    comeback_groups=0,
                    comebacks=0,
                    groups_by_kind=dict(sorted(by_kind.items())),
                )
            )
    return rows


def add_claimed(
    counts: PartCounts,
    rows: list[WhatIfRow],
    claimed: Claimed,
    policies: Sequence[ConsumerGroupPolicy],
) -> tuple[PartCounts, list[WhatIfRow]]:
    """The core's COUNT of a part plus the claimed groups': what the core finds on both together
    (every count adds up; the oldest keys are the oldest of both)."""
    theirs = claimed.counts
    keys = counts.keys
    for index, policy in enumerate(policies):
        limits = policy.spec.limits
        keys.group_keys[index] = heapq.nsmallest(
            limits.max_group_deletions_per_run, keys.group_keys[index] + theirs.keys.group_keys[index]
        )
        keys.offset_keys[index] = heapq.nsmallest(
            limits.max_offset_deletions_per_run, keys.offset_keys[index] + theirs.keys.offset_keys[index]
        )
        keys.groups_standing[index] += theirs.keys.groups_standing[index]
        keys.partitions_standing[index] += theirs.keys.partitions_standing[index]
    merged = PartCounts(
        counts.groups + theirs.groups,
        [a + b for a, b in zip(counts.totals, theirs.totals, strict=True)],
        counts.selector_sets | theirs.selector_sets,
        keys,
    )
    return merged, merge_what_if([rows, claimed.what_if]) if rows or claimed.what_if else []
