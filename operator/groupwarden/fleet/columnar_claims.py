"""Which groups the columns answer for ("claimed") and the decision rows read as columns: what COUNT
and DECIDE on columns (`columnar_count`, `columnar_decide`) start from.

The shapes claimed, with the one policy that selects the group:
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

Who decides a group row is its `policy_of`: the index of the one policy claiming it, or a `Claim`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import IntEnum
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupwarden.core.policy import ConsumerGroupPolicy, RuleName
from groupwarden.core.selection import GroupMatcher, PolicyIndex
from groupwarden.core.snapshot import GroupKind
from groupwarden.fleet.columnar_rules import KIND_CODES, Columns, KindCode, kind_codes, log_micros, micros


class Claim(IntEnum):
    """A group row's `policy_of` when no policy decides it on columns (a policy that does is its
    index, from 0). The values are those of the `CLAIM_COLUMN` of the decision's files."""

    UNCLAIMED = -3  # the core decides it (with its offsets)
    OUTSIDE = -2  # no policy's globs accept its id: not in the snapshot
    UNSELECTED = -1  # in the snapshot, but no policy selects its kind


# An offset row's `group_of` when no claimed group owns it (its group is the core's, or absent).
UNOWNED: Final = -1


def claim(
    clusters: Sequence[str],
    ids: Sequence[str],
    kinds: Sequence[str | None],
    members: Sequence[int | None],
    policies: Sequence[ConsumerGroupPolicy],
) -> np.ndarray:
    """Per group row, its `policy_of`: the one policy claiming it (its index) or a `Claim` (see
    the module docstring)."""
    n = len(ids)
    policy_of = np.full(n, Claim.UNCLAIMED, dtype=np.int64)
    if n == 0:
        return policy_of
    matchers = [GroupMatcher.from_selector(p.spec.selector) for p in policies]
    # One pass of Python over the ids (the policies' own matchers), the rest on whole columns: a
    # whole-fleet audit claims every group of a task twice (COUNT and DECIDE).
    accepted = _accepted(matchers, ids)  # (rows, policies)
    codes = kind_codes(kinds)
    # per kind code (the last row, at index -1: an unknown kind), the policies selecting that kind
    selects_kind = np.zeros((len(KIND_CODES) + 1, len(policies)), dtype=bool)
    for kind, code in KIND_CODES.items():
        selects_kind[code] = [GroupKind(kind) in m.kinds for m in matchers]
    selecting = accepted & selects_kind[codes]
    selectors = selecting.sum(axis=1)
    policy = selecting.argmax(axis=1) if policies else np.zeros(n, dtype=np.int64)
    known = codes != KindCode.UNKNOWN
    policy_of[known & ~accepted.any(axis=1)] = Claim.OUTSIDE
    policy_of[known & accepted.any(axis=1) & (selectors == 0)] = Claim.UNSELECTED
    unsubscribed = np.array(
        [RuleName.UNSUBSCRIBED_OFFSET_RETENTION in p.spec.rules.enabled() for p in policies] or [False],
        dtype=bool,
    )
    has_members = np.fromiter((bool(m) for m in members), dtype=bool, count=n)
    # a Stable group whose subscriptions matter goes to the core
    to_core = has_members & ((codes == KindCode.SIMPLE) | unsubscribed[policy])
    one = known & (selectors == 1) & ~to_core
    policy_of[one] = policy[one]
    # A (cluster, group) with two rows is the core's to sort out, every row of it.
    policy_of[_repeated(clusters, ids)] = Claim.UNCLAIMED
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
class ClaimedRows:
    """The decision rows as the columns read them (both steps): who decides each group row, and
    the claimed groups' values (`columnar_rules.Columns`)."""

    rows: pa.Table
    group_rows: np.ndarray  # the group rows' positions in `rows`
    offset_rows: np.ndarray  # the offset rows' positions in `rows`
    policy_of: np.ndarray  # per group row (`claim`)
    group_of: np.ndarray  # per offset row: its claimed group row (UNOWNED: none)
    cluster_names: list[str]  # in the order of their first group row
    cluster_codes: np.ndarray  # per group row: its cluster's position in `cluster_names`
    columns: Columns

    def in_clusters(self) -> dict[str, np.ndarray]:
        """Per cluster, `policy_of` with the other clusters' group rows UNCLAIMED (only clusters
        with a claimed group)."""
        found = {}
        for code, cluster in enumerate(self.cluster_names):
            in_cluster = np.where(self.cluster_codes == code, self.policy_of, Claim.UNCLAIMED)
            if bool(np.any(in_cluster != Claim.UNCLAIMED)):
                found[cluster] = in_cluster
        return found

    def rest(self, also: np.ndarray | None = None) -> pa.Table:
        """Every row but the claimed groups' rows and their offsets' rows (`also`: group rows to
        give the core as well, with their offsets)."""
        claimed = self.policy_of != Claim.UNCLAIMED
        if also is not None:
            claimed &= ~also
        keep = np.ones(self.rows.num_rows, dtype=bool)
        keep[self.group_rows[claimed]] = False
        owned = self.group_of != UNOWNED
        keep[self.offset_rows[owned]] = ~claimed[self.group_of[owned]]
        return self.rows.filter(pa.array(keep))

    def row_claims(self) -> np.ndarray:
        """Per row of `rows`, what COUNT found for DECIDE (`handed_claims`): a group row's
        `policy_of`, an offset row's claimed group as that group's position in `rows` (UNOWNED:
        none)."""
        claims = np.full(self.rows.num_rows, UNOWNED, dtype=np.int64)
        claims[self.group_rows] = self.policy_of
        owned = self.group_of != UNOWNED
        claims[self.offset_rows[owned]] = self.group_rows[self.group_of[owned]]
        return claims


# The decision rows' column of COUNT's claims (`handed_claims`): DECIDE claims nothing again.
CLAIM_COLUMN: Final = "claim"


def handed_claims(
    row_claims: np.ndarray, row_kind: pa.ChunkedArray | pa.Array, keep: np.ndarray, first_group: int
) -> np.ndarray:
    """COUNT's claims (`ClaimedRows.row_claims` of a unit's rows) for the rows `keep` selects, as
    DECIDE's `read_claimed` takes them from the `CLAIM_COLUMN` of a file of such selections: a
    group row's `policy_of`; an offset row's claimed group as its position among the file's group
    rows (`first_group`: the group rows written before this selection), UNOWNED for none.

    DECIDE would claim the same: a selection keeps a group's rows with all its offsets or none of
    them (`task_decide.judged_rows`), so each (cluster, group) is repeated in it as often as in the
    unit, with the same partitions, ids and kinds."""
    groups = pc.fill_null(pc.equal(row_kind, "group"), False).to_numpy(zero_copy_only=False)
    offsets = pc.fill_null(pc.equal(row_kind, "offset"), False).to_numpy(zero_copy_only=False)
    kept_groups = keep & groups
    position = np.cumsum(kept_groups) - 1 + first_group  # at a kept group row: its position
    kept = np.flatnonzero(keep)
    claims = row_claims[kept].copy()
    owned = offsets[kept] & (claims != UNOWNED)
    owners = claims[owned]
    claims[owned] = np.where(kept_groups[owners], position[owners], UNOWNED)
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
    if len(group_of) and (int(group_of.max()) >= len(group_rows) or int(group_of.min()) < UNOWNED):
        return None
    return policy_of, group_of


def read_claimed(rows: pa.Table, policies: Sequence[ConsumerGroupPolicy], now: datetime) -> ClaimedRows:
    """The decision rows (`task_decide.DECIDE_COLUMNS`, with or without COUNT's claims) read for
    the columns: who decides each group, and the claimed groups' values."""
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
    commit_us = log_micros(offsets.column("commit_time_ms"), now_us)
    counted = group_of != UNOWNED
    owner = group_of[counted]
    owned_us = commit_us[counted]
    last_commit = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last_commit, owner, owned_us)
    columns = Columns(
        ids=ids,
        kind=kind_codes(kinds),
        members=pc.fill_null(groups.column("member_count"), 0).to_numpy().astype(np.int64),
        empty_since=log_micros(groups.column("empty_since_ms"), now_us),
        offset_count=np.bincount(owner, minlength=n),
        last_commit=last_commit,
        owner=owner,
        owned_us=owned_us,
        owned_rows=np.flatnonzero(counted),
        offsets=offsets,
        now_us=now_us,
    )
    return ClaimedRows(
        rows, group_rows, offset_rows, policy_of, group_of, cluster_names, cluster_codes, columns
    )


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
    (UNOWNED: a group the core decides, or none)."""
    clusters = [cluster_names[c] for c in cluster_codes.tolist()]
    policy_of = claim(clusters, ids, kinds, groups.column("member_count").to_pylist(), policies)
    group_of = np.full(offsets.num_rows, UNOWNED, dtype=np.int64)
    offset_clusters = offsets.column("cluster")
    # Per cluster (a task holds units of several): vectorised, so the cost is one pass over the
    # rows, not one per cluster.
    claimed_rows = policy_of != Claim.UNCLAIMED
    group_ids = groups.column("group")
    for code, cluster in enumerate(cluster_names):
        claimed_here = np.flatnonzero((cluster_codes == code) & claimed_rows)  # group row positions
        if not len(claimed_here):
            continue
        in_cluster = np.flatnonzero(
            pc.fill_null(pc.equal(offset_clusters, cluster), False).to_numpy(zero_copy_only=False)
        )
        if not len(in_cluster):
            continue
        names = group_ids.take(pa.array(claimed_here, pa.int64())).combine_chunks()
        found = pc.index_in(offsets.column("group").take(in_cluster), value_set=names)
        local = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        hit = local >= 0
        group_of[in_cluster[hit]] = claimed_here[local[hit]]
    _unclaim_repeated_offsets(offsets, group_of, policy_of)
    return policy_of, group_of


def _unclaim_repeated_offsets(offsets: pa.Table, group_of: np.ndarray, policy_of: np.ndarray) -> None:
    """A claimed group with two rows of the same partition, or a row without topic or partition,
    goes to the core (the stage writes one row per partition, never a null one)."""
    counted = np.flatnonzero(group_of != UNOWNED)
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
    policy_of[repeated] = Claim.UNCLAIMED
    group_of[np.isin(group_of, repeated)] = UNOWNED


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
