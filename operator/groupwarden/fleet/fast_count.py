"""COUNT on columns: the decision's first step for the common group shapes, without the core's
objects (docs/spark-audit.md, "What each decision step costs per group").

The core (`snapshot_from_answers`, `count_part`, `what_if`) is the definition of COUNT. This module
answers for the groups whose verdicts are plain clock comparisons, many groups at once with numpy
over the rows' columns, and hands every other group to the core (`task_decide.count`), as
`fast_codec` does for plain commits. COUNT's results add up over any split of a cluster's groups
(`core.parts`: each group's verdicts depend on that group alone), so the task adds what the
columns found to what the core found on the rest.

The shapes answered here ("claimed"), with the one policy that selects the group:
- classic and KIP-848 (`consumer`) groups that are Empty (no member): `emptyGroupRetention`'s
  clock is the later of the Empty-since time and the last commit (`rules.empty_group`);
- classic and KIP-848 groups with members, when that policy has no `unsubscribedOffsetRetention`:
  no rule has a verdict on them;
- simple groups without members: `simpleGroupOffsetRetention` per partition (`rules.simple_group_offsets`);
- groups no policy selects by kind (counted in the cluster's groups, nothing else) and groups no
  policy's globs accept (not in the snapshot at all).
Everything else goes to the core: share, streams and unknown kinds; groups two or more policies
select (their overlap blocks); Stable groups under `unsubscribedOffsetRetention` (subscriptions
and protocol types); simple groups with members (a skip); a group or an offset that appears twice.

Times are integers (microseconds since the epoch), so every comparison is exact: a log time is
`log_time`'s clamped milliseconds x 1000, a time the log does not know is `now` (observed, as
`group_facts` dates it), and `age >= retention` is `base <= now - retention`. A group produces no
skip here (every clock is known or observed), only candidates or nothing.
`tests/unit/fleet/test_fleet_fast_count.py` proves the counts, keys, judged groups and what-if rows
equal the core's on generated groups of every kind and state, and that unclaimed shapes reach the
core.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupwarden.core.engine import (
    Cutoffs,
    GroupKey,
    PartitionKey,
    PolicyTotals,
    breaker_detail,
    group_limit_detail,
    offset_limit_detail,
)
from groupwarden.core.parts import PartCounts, PartKeys, merge_what_if
from groupwarden.core.plan import Skip, SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy, RuleName
from groupwarden.core.selection import GroupMatcher, PolicyIndex
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.core.whatif import WhatIfRow
from groupwarden.offsets_log.views import MAX_LOG_MS, MIN_LOG_MS

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)

_CLASSIC, _CONSUMER, _SIMPLE = 0, 1, 2
_KIND_CODES: Final = {
    GroupKind.CLASSIC.value: _CLASSIC,
    GroupKind.CONSUMER.value: _CONSUMER,
    GroupKind.SIMPLE.value: _SIMPLE,
}
_KIND_NAMES: Final = {_CLASSIC: GroupKind.CLASSIC.value, _CONSUMER: GroupKind.CONSUMER.value}
_KINDS: Final = {_CLASSIC: GroupKind.CLASSIC, _CONSUMER: GroupKind.CONSUMER, _SIMPLE: GroupKind.SIMPLE}

# `policy_of` of a group row: the index of the one policy selecting it, or one of these.
UNCLAIMED: Final = -3  # the core counts it
OUTSIDE: Final = -2  # no policy's globs accept its id: not in the snapshot
UNSELECTED: Final = -1  # in the snapshot, but no policy selects its kind


def micros(at: datetime) -> int:
    """An aware datetime as integer microseconds since the epoch (exact)."""
    return (at - _EPOCH) // _MICROSECOND


def from_micros(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _log_micros(ms: pa.ChunkedArray | pa.Array, now_us: int) -> np.ndarray:
    """Log times (epoch ms, null: unknown) as `group_facts` dates them, in microseconds:
    `log_time`'s clamp, and `now` (observed) for a null."""
    values = pc.fill_null(ms, 0).to_numpy().astype(np.int64)
    known = np.clip(values, MIN_LOG_MS, MAX_LOG_MS) * 1000
    nulls = pc.is_null(ms).to_numpy(zero_copy_only=False)
    return np.where(nulls, np.int64(now_us), known)


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
    # per row of the input: the claims DECIDE is handed (`_Read.row_claims`, `handed_claims`)
    row_claims: np.ndarray


def claim(
    clusters: Sequence[str],
    ids: Sequence[str],
    kinds: Sequence[str | None],
    members: Sequence[int | None],
    policies: Sequence[ConsumerGroupPolicy],
) -> np.ndarray:
    """Per group row, the one policy selecting it (its index) or UNCLAIMED / OUTSIDE /
    UNSELECTED (see the module docstring)."""
    n = len(ids)
    policy_of = np.full(n, UNCLAIMED, dtype=np.int64)
    if n == 0:
        return policy_of
    matchers = [GroupMatcher.from_selector(p.spec.selector) for p in policies]
    # One pass of Python over the ids (the policies' own matchers), the rest on whole columns: a
    # whole-fleet audit claims every group of a task twice (COUNT and DECIDE).
    accepted = _accepted(matchers, ids)  # (rows, policies)
    kind_codes = np.fromiter(
        (-1 if k is None else _KIND_CODES.get(k, -1) for k in kinds), dtype=np.int64, count=n
    )
    # per kind code (the last row: an unknown kind), the policies selecting that kind
    selects_kind = np.zeros((len(_KIND_CODES) + 1, len(policies)), dtype=bool)
    for kind, code in _KIND_CODES.items():
        selects_kind[code] = [GroupKind(kind) in m.kinds for m in matchers]
    selecting = accepted & selects_kind[kind_codes]
    selectors = selecting.sum(axis=1)
    policy = selecting.argmax(axis=1) if policies else np.zeros(n, dtype=np.int64)
    known = kind_codes >= 0
    policy_of[known & ~accepted.any(axis=1)] = OUTSIDE
    policy_of[known & accepted.any(axis=1) & (selectors == 0)] = UNSELECTED
    unsubscribed = np.array(
        [RuleName.UNSUBSCRIBED_OFFSET_RETENTION in p.spec.rules.enabled() for p in policies] or [False],
        dtype=bool,
    )
    has_members = np.fromiter((bool(m) for m in members), dtype=bool, count=n)
    # a Stable group whose subscriptions matter goes to the core
    to_core = has_members & ((kind_codes == _SIMPLE) | unsubscribed[policy])
    one = known & (selectors == 1) & ~to_core
    policy_of[one] = policy[one]
    # A (cluster, group) with two rows is the core's to sort out, every row of it.
    policy_of[_repeated(clusters, ids)] = UNCLAIMED
    return policy_of


def _accepted(matchers: Sequence[GroupMatcher], ids: Sequence[str]) -> np.ndarray:
    """Per row and policy: the policy's include and exclude globs accept the id."""
    n = len(ids)
    if len(matchers) == 1:
        matches = matchers[0].matches_id
        return np.fromiter((matches(g) for g in ids), dtype=bool, count=n).reshape(n, 1)
    index = PolicyIndex(matchers)
    accepted = np.zeros((n, len(matchers)), dtype=bool)
    for row, group_id in enumerate(ids):
        for policy in index.matching(group_id):
            accepted[row, policy] = True
    return accepted


def _repeated(clusters: Sequence[str], ids: Sequence[str]) -> np.ndarray:
    """The rows whose (cluster, group id) is on another row too."""
    names = {name: code for code, name in enumerate(dict.fromkeys(clusters))}
    cluster_codes = np.fromiter((names[c] for c in clusters), dtype=np.int64, count=len(clusters))
    encoded = pc.dictionary_encode(pa.array(ids, pa.string()), null_encoding="encode")
    id_codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
    keys = cluster_codes * (len(encoded.dictionary) + 1) + id_codes
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    repeated: np.ndarray = counts[inverse] > 1
    return repeated


@dataclass
class _Read:
    """The decision rows as the fast path reads them (both steps)."""

    rows: pa.Table
    group_rows: np.ndarray  # the group rows' positions in `rows`
    offset_rows: np.ndarray  # the offset rows' positions in `rows`
    policy_of: np.ndarray  # per group row (`claim`)
    group_of: np.ndarray  # per offset row: its claimed group row (-1: none)
    cluster_names: list[str]  # in the order of their first group row
    cluster_codes: np.ndarray  # per group row: its cluster's position in `cluster_names`
    columns: _Columns

    def in_clusters(self) -> dict[str, np.ndarray]:
        """Per cluster, `policy_of` with the other clusters' group rows UNCLAIMED (only clusters
        with a claimed group)."""
        found = {}
        for code, cluster in enumerate(self.cluster_names):
            part = np.where(self.cluster_codes == code, self.policy_of, UNCLAIMED)
            if bool(np.any(part != UNCLAIMED)):
                found[cluster] = part
        return found

    def rest(self, also: np.ndarray | None = None) -> pa.Table:
        """Every row but the claimed groups' rows and their offsets' rows (`also`: group rows to
        give the core as well, with their offsets)."""
        claimed = self.policy_of != UNCLAIMED
        if also is not None:
            claimed &= ~also
        keep = np.ones(self.rows.num_rows, dtype=bool)
        keep[self.group_rows[claimed]] = False
        owned = self.group_of >= 0
        keep[self.offset_rows[owned]] = ~claimed[self.group_of[owned]]
        return self.rows.filter(pa.array(keep))

    def row_claims(self) -> np.ndarray:
        """Per row of `rows`, what COUNT found for DECIDE (`handed_claims`): a group row's
        `policy_of`, an offset row's claimed group as that group's position in `rows` (-1: none)."""
        claims = np.full(self.rows.num_rows, -1, dtype=np.int64)
        claims[self.group_rows] = self.policy_of
        owned = self.group_of >= 0
        claims[self.offset_rows[owned]] = self.group_rows[self.group_of[owned]]
        return claims


# The decision rows' column of COUNT's claims (`handed_claims`): DECIDE claims nothing again.
CLAIM_COLUMN: Final = "claim"


def handed_claims(
    row_claims: np.ndarray, row_kind: pa.ChunkedArray | pa.Array, keep: np.ndarray, first_group: int
) -> np.ndarray:
    """COUNT's claims (`_Read.row_claims` of a unit's rows) for the rows `keep` selects, as
    DECIDE's `_read` takes them from the `CLAIM_COLUMN` of a file of such selections: a group
    row's `policy_of`; an offset row's claimed group as its position among the file's group rows
    (`first_group`: the group rows written before this selection), -1 for none.

    DECIDE would claim the same: a selection keeps a group's rows with all its offsets or none of
    them (`task_decide.judged_rows`), so each (cluster, group) is repeated in it as often as in the
    unit, with the same partitions, ids and kinds."""
    groups = pc.fill_null(pc.equal(row_kind, "group"), False).to_numpy(zero_copy_only=False)
    offsets = pc.fill_null(pc.equal(row_kind, "offset"), False).to_numpy(zero_copy_only=False)
    kept_groups = keep & groups
    position = np.cumsum(kept_groups) - 1 + first_group  # at a kept group row: its position
    kept = np.flatnonzero(keep)
    claims = row_claims[kept].copy()
    owned = offsets[kept] & (claims >= 0)
    owners = claims[owned]
    claims[owned] = np.where(kept_groups[owners], position[owners], -1)
    return claims


def _handed(
    rows: pa.Table, group_rows: np.ndarray, offset_rows: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """`policy_of` and `group_of` from the rows' `CLAIM_COLUMN` (None: absent or incomplete)."""
    if CLAIM_COLUMN not in rows.schema.names:
        return None
    column = rows.column(CLAIM_COLUMN)
    if column.null_count:
        return None
    claims = np.asarray(column.to_numpy(), dtype=np.int64)
    policy_of = claims[group_rows]
    group_of = claims[offset_rows]
    if len(group_of) and (int(group_of.max()) >= len(group_rows) or int(group_of.min()) < -1):
        return None
    return policy_of, group_of


def _read(rows: pa.Table, policies: Sequence[ConsumerGroupPolicy], now: datetime) -> _Read:
    row_kind = rows.column("row_kind")
    group_rows = np.flatnonzero(
        pc.fill_null(pc.equal(row_kind, "group"), False).to_numpy(zero_copy_only=False)
    )
    offset_rows = np.flatnonzero(
        pc.fill_null(pc.equal(row_kind, "offset"), False).to_numpy(zero_copy_only=False)
    )
    groups = rows.select(["cluster", "group", "kind", "member_count", "empty_since_ms"]).take(group_rows)
    offsets = rows.select(["cluster", "group", "topic", "tp", "commit_time_ms"]).take(offset_rows)
    encoded = pc.dictionary_encode(groups.column("cluster").combine_chunks(), null_encoding="encode")
    cluster_names: list[str] = encoded.dictionary.to_pylist()
    cluster_codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    ids = groups.column("group").to_pylist()
    kinds = groups.column("kind").to_pylist()
    # DECIDE's rows carry COUNT's claims (`handed_claims`); any other rows are claimed here.
    handed = _handed(rows, group_rows, offset_rows)
    if handed is None:
        policy_of, group_of = _claim_rows(groups, offsets, cluster_names, cluster_codes, ids, kinds, policies)
    else:
        policy_of, group_of = handed

    n = len(ids)
    now_us = micros(now)
    commit_us = _log_micros(offsets.column("commit_time_ms"), now_us)
    counted = group_of >= 0
    owner = group_of[counted]
    owned_us = commit_us[counted]
    last_commit = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_commit, owner, owned_us)
    columns = _Columns(
        ids=ids,
        kind=np.array([-1 if k is None else _KIND_CODES.get(k, -1) for k in kinds], dtype=np.int64),
        members=pc.fill_null(groups.column("member_count"), 0).to_numpy().astype(np.int64),
        empty_since=_log_micros(groups.column("empty_since_ms"), now_us),
        offset_count=np.bincount(owner, minlength=n),
        last_commit=last_commit,
        owner=owner,
        owned_us=owned_us,
        owned_rows=np.flatnonzero(counted),
        offsets=offsets,
        now_us=now_us,
    )
    return _Read(rows, group_rows, offset_rows, policy_of, group_of, cluster_names, cluster_codes, columns)


def _claim_rows(
    groups: pa.Table,
    offsets: pa.Table,
    cluster_names: list[str],
    cluster_codes: np.ndarray,
    ids: list[str],
    kinds: list[str | None],
    policies: Sequence[ConsumerGroupPolicy],
) -> tuple[np.ndarray, np.ndarray]:
    """`policy_of` per group row (`claim`) and `group_of` per offset row: its claimed group's row
    (-1: a group the core decides, or none)."""
    clusters = [cluster_names[c] for c in cluster_codes.tolist()]
    policy_of = claim(clusters, ids, kinds, groups.column("member_count").to_pylist(), policies)
    group_of = np.full(offsets.num_rows, -1, dtype=np.int64)
    offset_clusters = offsets.column("cluster")
    # Per cluster (a task holds units of several): vectorised, so the cost is one pass over the
    # rows, not one per cluster.
    claimed_rows = policy_of != UNCLAIMED
    group_ids = groups.column("group")
    for code, cluster in enumerate(cluster_names):
        mine = np.flatnonzero((cluster_codes == code) & claimed_rows)
        if not len(mine):
            continue
        in_cluster = np.flatnonzero(
            pc.fill_null(pc.equal(offset_clusters, cluster), False).to_numpy(zero_copy_only=False)
        )
        if not len(in_cluster):
            continue
        names = group_ids.take(pa.array(mine, pa.int64())).combine_chunks()
        found = pc.index_in(offsets.column("group").take(in_cluster), value_set=names)
        local = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        hit = local >= 0
        group_of[in_cluster[hit]] = mine[local[hit]]
    _unclaim_repeated_offsets(offsets, group_of, policy_of)
    return policy_of, group_of


def split_count(
    rows: pa.Table,
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    retentions: Sequence[timedelta],
    cluster_ids: dict[str, str],
) -> Split:
    """COUNT of the claimed groups of `rows` (the decision's rows: `task_decide.DECIDE_COLUMNS`)
    per cluster, and the rest of the rows for the core."""
    read = _read(rows, policies, now)
    claimed = {
        cluster: _count_cluster(read.columns, part, policies, retentions, cluster_ids[cluster])
        for cluster, part in read.in_clusters().items()
    }
    return Split(claimed, read.rest(), read.policy_of, read.row_claims())


def _unclaim_repeated_offsets(offsets: pa.Table, group_of: np.ndarray, policy_of: np.ndarray) -> None:
    """A claimed group with two rows of the same partition, or a row without topic or partition,
    goes to the core (the stage writes one row per partition, never a null one)."""
    counted = np.flatnonzero(group_of >= 0)
    if not len(counted):
        return
    topic = offsets.column("topic").take(counted)
    number = offsets.column("tp").take(counted)
    owner = group_of[counted]
    broken = pc.or_(pc.is_null(topic), pc.is_null(number)).to_numpy(zero_copy_only=False)
    topic_code = pc.dictionary_encode(topic).combine_chunks().indices
    codes = pc.fill_null(topic_code, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    partition = pc.fill_null(number, 0).to_numpy().astype(np.int64)
    same_as_next = _same_as_next(owner, codes, partition)
    if not bool(np.any(same_as_next)) and not bool(np.any(broken)):
        return
    repeated = np.unique(np.concatenate([owner[same_as_next], owner[broken]]))
    policy_of[repeated] = UNCLAIMED
    group_of[np.isin(group_of, repeated)] = -1


def _same_as_next(owner: np.ndarray, codes: np.ndarray, partition: np.ndarray) -> np.ndarray:
    """A mask of rows whose (owner, topic code, partition) another row repeats (all but one row
    of each repeated triple). The triple as one int64 when it fits (topic codes from -1,
    partitions in Kafka's int32): no sort at all when the rows come in increasing order (the
    stage writes a group's offsets by partition), one sort of integers otherwise, not a lexsort
    of three columns."""
    topics = int(codes.max()) + 2 if len(codes) else 1
    low, high = (int(partition.min()), int(partition.max())) if len(partition) else (0, 0)
    span = high - low + 1
    if (int(owner.max()) + 1) * topics * span >= 2**62:
        order = np.lexsort((partition, codes, owner))
        same = (
            (owner[order][1:] == owner[order][:-1])
            & (codes[order][1:] == codes[order][:-1])
            & (partition[order][1:] == partition[order][:-1])
        )
        mask = np.zeros(len(owner), dtype=bool)
        mask[order[1:][same]] = True
        return mask
    key = (owner * topics + codes + 1) * span + (partition - low)
    mask = np.zeros(len(key), dtype=bool)
    if bool(np.all(key[1:] > key[:-1])):
        return mask
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    mask[order[1:][ordered[1:] == ordered[:-1]]] = True
    return mask


@dataclass
class _Columns:
    """The group rows' and their offsets' values the verdicts read (times in microseconds)."""

    ids: Sequence[str]
    kind: np.ndarray
    members: np.ndarray
    empty_since: np.ndarray  # `now` when the log does not know it
    offset_count: np.ndarray
    last_commit: np.ndarray  # int64 min without offsets
    owner: np.ndarray  # per claimed offset: its group row
    owned_us: np.ndarray  # per claimed offset: its commit time
    owned_rows: np.ndarray  # per claimed offset: its row in `offsets`
    offsets: pa.Table
    now_us: int


@dataclass
class _Verdicts:
    """One rule at one retention over the claimed groups of one policy (boolean masks)."""

    groups: np.ndarray  # GroupDeletionCandidate
    bases: np.ndarray  # each group candidate's base time (valid where `groups`)
    partial: np.ndarray  # OffsetDeletionCandidate (simple groups: some partitions)
    old: np.ndarray  # per group: its partitions committed at or before the cut-off
    old_offsets: np.ndarray  # per claimed offset: committed at or before the cut-off


def _verdicts(columns: _Columns, mine: np.ndarray, rule: RuleName, retention: timedelta) -> _Verdicts:
    n = len(mine)
    cutoff = columns.now_us - retention // _MICROSECOND
    nothing = np.zeros(n, dtype=bool)
    if rule is RuleName.EMPTY_GROUP_RETENTION:
        # `empty_group`: the later of Empty-since and the last commit (no offsets: Empty-since).
        empty = mine & (columns.kind != _SIMPLE) & (columns.members == 0)
        bases = np.maximum(columns.empty_since, columns.last_commit)
        return _Verdicts(empty & (bases <= cutoff), bases, nothing, np.zeros(n, np.int64), np.zeros(0, bool))
    if rule is RuleName.SIMPLE_GROUP_OFFSET_RETENTION:
        # `simple_group_offsets`: no offsets: Empty-since; else every partition old: the group
        # (base: the latest commit), some: those partitions.
        simple = mine & (columns.kind == _SIMPLE)
        old_offsets = columns.owned_us <= cutoff
        old = np.bincount(columns.owner[old_offsets], minlength=n)
        without = simple & (columns.offset_count == 0)
        every = simple & (columns.offset_count > 0) & (old == columns.offset_count)
        bases = np.where(without, columns.empty_since, columns.last_commit)
        groups = (without & (columns.empty_since <= cutoff)) | every
        partial = simple & (old > 0) & (old < columns.offset_count)
        return _Verdicts(groups, bases, partial, old, old_offsets)
    # unsubscribedOffsetRetention: the claimed groups it could judge (Stable) went to the core.
    return _Verdicts(nothing, np.zeros(n, np.int64), nothing, np.zeros(n, np.int64), np.zeros(0, bool))


def _count_cluster(
    columns: _Columns,
    policy_of: np.ndarray,
    policies: Sequence[ConsumerGroupPolicy],
    retentions: Sequence[timedelta],
    cluster_id: str,
) -> Claimed:
    ids = columns.ids
    in_snapshot = int(np.count_nonzero(policy_of >= UNSELECTED))
    totals: list[PolicyTotals] = []
    keys = PartKeys.empty(len(policies))
    judged: set[str] = set()
    rows: list[WhatIfRow] = []
    for index, policy in enumerate(policies):
        mine = policy_of == index
        group_mask = np.zeros(len(mine), dtype=bool)
        partial_mask = np.zeros(len(mine), dtype=bool)
        bases = np.zeros(len(mine), dtype=np.int64)
        partitions = 0
        partition_keys: list[PartitionKey] = []
        limits = policy.spec.limits
        rules = policy.spec.rules.enabled()
        if bool(np.any(mine)):
            for rule, retention in rules.items():
                found = _verdicts(columns, mine, rule, retention)
                bases = np.where(found.groups, found.bases, bases)
                group_mask |= found.groups
                partial_mask |= found.partial
                partitions += int(found.old[found.partial].sum())
                if bool(np.any(found.partial)):
                    partition_keys.extend(
                        _partition_keys(columns, found, limits.max_offset_deletions_per_run)
                    )
        eligible = int(np.count_nonzero(group_mask))
        totals.append(PolicyTotals(int(np.count_nonzero(mine)), eligible, partitions))
        keys.group_keys[index] = _group_keys(ids, group_mask, bases, limits.max_group_deletions_per_run)
        keys.offset_keys[index] = heapq.nsmallest(limits.max_offset_deletions_per_run, partition_keys)
        keys.groups_standing[index] = eligible
        keys.partitions_standing[index] = partitions
        judged.update(ids[row] for row in np.flatnonzero(group_mask | partial_mask).tolist())
        if retentions:
            rows.extend(_what_if_rows(columns, mine, policy, retentions, cluster_id))
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
    rows = np.flatnonzero(candidates)
    chosen = rows[_smallest(bases[rows], limit)]
    found = heapq.nsmallest(limit, ((int(bases[r]), ids[r]) for r in chosen))
    return [(from_micros(us), group_id) for us, group_id in found]


def _partition_keys(columns: _Columns, found: _Verdicts, limit: int) -> list[PartitionKey]:
    """The keys of the old partitions of the partly eligible groups (at most `limit`)."""
    taken = found.old_offsets & found.partial[columns.owner]
    positions = np.flatnonzero(taken)
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


def _what_if_rows(
    columns: _Columns,
    mine: np.ndarray,
    policy: ConsumerGroupPolicy,
    retentions: Sequence[timedelta],
    cluster_id: str,
) -> list[WhatIfRow]:
    """`what_if`'s rows of one policy over the claimed groups (no come-backs: the core counts them)."""
    rows = []
    for rule in policy.spec.rules.enabled():
        for retention in retentions:
            found = _verdicts(columns, mine, rule, retention)
            by_kind: dict[str, int] = {}
            if rule is RuleName.EMPTY_GROUP_RETENTION:
                for code, name in _KIND_NAMES.items():
                    count = int(np.count_nonzero(found.groups & (columns.kind == code)))
                    if count:
                        by_kind[name] = count
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
    def of(cls, columns: _Columns, rows: list[int], reason: SkipReason, detail: str) -> GroupSkips:
        ids = columns.ids
        codes = columns.kind[np.array(rows, dtype=np.int64)].tolist() if rows else []
        return cls([ids[r] for r in rows], [_KINDS[c] for c in codes], reason, detail)

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
    """DECIDE (`core.parts.decide_part`) on columns for the claimed groups: a claimed group is
    selected by one policy and has no overlap block, so `settle` leaves its candidate as it is
    unless the policy's breaker tripped (a BlastRadiusExceeded skip), and `take` defers it
    (a LimitReached skip) unless its key is within the limit's cut-off. A candidate with an
    action (at most the limits over all tasks) goes to the core with its rows."""
    read = _read(rows, policies, now)
    columns = read.columns
    acting = np.zeros(len(read.policy_of), dtype=bool)
    skips: dict[str, list[list[Skip]]] = {}
    group_skips: dict[str, list[list[GroupSkips]]] = {}
    for cluster, part in read.in_clusters().items():
        mine_skips: list[list[Skip]] = [[] for _ in policies]
        skips[cluster] = mine_skips
        mine_group_skips: list[list[GroupSkips]] = [[] for _ in policies]
        group_skips[cluster] = mine_group_skips
        for index, policy in enumerate(policies):
            mine = part == index
            if not bool(np.any(mine)):
                continue
            groups, bases, partial, old_offsets = _candidates(columns, mine, policy)
            policy_totals = totals[cluster][index]
            partitions = _old_partitions(columns, partial, old_offsets)
            if policy_totals.trips(policy):
                detail = breaker_detail(policy, policy_totals)
                reason = SkipReason.BLAST_RADIUS_EXCEEDED
                refused = np.flatnonzero(groups).tolist()
                mine_group_skips[index].append(GroupSkips.of(columns, refused, reason, detail))
                mine_skips[index].extend(
                    _skip(columns, r, reason, detail, tuple(found)) for r, found in partitions.items()
                )
                continue
            cut = cuts[cluster][index]
            taken = _groups_taken(columns, groups, bases, cut.groups)
            acting |= taken
            detail = group_limit_detail(cut)
            deferred = np.flatnonzero(groups & ~taken).tolist()
            mine_group_skips[index].append(GroupSkips.of(columns, deferred, SkipReason.LIMIT_REACHED, detail))
            for r, found in partitions.items():
                if cut.offsets is not None and any(key <= cut.offsets for key in _keys(columns, r, found)):
                    acting[r] = True
                    continue
                detail = offset_limit_detail(cut, len(found))
                mine_skips[index].append(_skip(columns, r, SkipReason.LIMIT_REACHED, detail, tuple(found)))
    return DecideSplit(skips, group_skips, read.rest(also=acting), read.policy_of, acting)


def _candidates(
    columns: _Columns, mine: np.ndarray, policy: ConsumerGroupPolicy
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The policy's verdicts on its claimed groups with all its rules: group candidates and their
    bases, partly eligible simple groups, and which claimed offsets are old enough."""
    n = len(mine)
    groups = np.zeros(n, dtype=bool)
    partial = np.zeros(n, dtype=bool)
    bases = np.zeros(n, dtype=np.int64)
    old_offsets = np.zeros(len(columns.owner), dtype=bool)
    for rule, retention in policy.spec.rules.enabled().items():
        found = _verdicts(columns, mine, rule, retention)
        bases = np.where(found.groups, found.bases, bases)
        groups |= found.groups
        partial |= found.partial
        if len(found.old_offsets):
            old_offsets |= found.old_offsets & found.partial[columns.owner]
    return groups, bases, partial, old_offsets


def _old_partitions(
    columns: _Columns, partial: np.ndarray, old_offsets: np.ndarray
) -> dict[int, list[tuple[TopicPartition, int]]]:
    """Per partly eligible group row: its old partitions with their commit times, by partition."""
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
    for mine in found.values():
        mine.sort()
    return found


def _keys(columns: _Columns, row: int, found: list[tuple[TopicPartition, int]]) -> list[PartitionKey]:
    group_id = columns.ids[row]
    return [(from_micros(us), group_id, tp) for tp, us in found]


def _groups_taken(
    columns: _Columns, groups: np.ndarray, bases: np.ndarray, newest: GroupKey | None
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
    columns: _Columns,
    row: int,
    reason: SkipReason,
    detail: str,
    partitions: tuple[tuple[TopicPartition, int], ...] = (),
) -> Skip:
    kind = _KINDS[int(columns.kind[row])]  # (a claimed group's kind is always one of them)
    concerned = tuple([tp for tp, _ in partitions]) if partitions else ()
    return Skip(columns.ids[row], reason, detail, kind, concerned)
