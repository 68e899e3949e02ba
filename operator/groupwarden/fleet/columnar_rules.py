"""The eligibility rules on numpy columns: the one rule evaluation that COUNT and DECIDE on columns
(`columnar_count`, `columnar_decide`) share, for the groups `columnar_claims` claims.

A MIRROR of the core, which stays the definition (DESIGN.md, "Fast paths and their oracle"):
`verdicts` answers what `core.rules.empty_group` and `core.rules.simple_group_offsets` answer for
a claimed group, and `candidates` what `core.rules.judge_group` gives for a policy's enabled rules.
A change to those rules must be made here too; `tests/unit/fleet/test_fleet_columnar.py` holds both
equal on generated groups and policies.

Times are integers (microseconds since the epoch), so every comparison is exact: a log time is
`log_time`'s clamped milliseconds x 1000, a time the log does not know is `now` (observed, as
`group_facts` dates it), and `age >= retention` is `base <= now - retention`. A claimed group
produces no skip here (every clock is known or observed), only candidates or nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from groupwarden.core.policy import ConsumerGroupPolicy, RuleName
from groupwarden.core.snapshot import GroupKind
from groupwarden.offsets_log.views import MAX_LOG_MS, MIN_LOG_MS

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def micros(at: datetime) -> int:
    """An aware datetime as integer microseconds since the epoch (exact)."""
    return (at - _EPOCH) // _MICROSECOND


def from_micros(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def log_micros(ms: pa.ChunkedArray | pa.Array, now_us: int) -> np.ndarray:
    """Log times (epoch ms, null: unknown) as `group_facts` dates them, in microseconds:
    `log_time`'s clamp, and `now` (observed) for a null."""
    values = pc.fill_null(ms, 0).to_numpy().astype(np.int64)
    known = np.clip(values, MIN_LOG_MS, MAX_LOG_MS) * 1000
    nulls = pc.is_null(ms).to_numpy(zero_copy_only=False)
    return np.where(nulls, np.int64(now_us), known)


class KindCode(IntEnum):
    """A group row's kind as the columns hold it: the kinds a claim can take, or UNKNOWN (any
    other kind, or none: never claimed)."""

    UNKNOWN = -1
    CLASSIC = 0
    CONSUMER = 1
    SIMPLE = 2


# The core's kind of each code but UNKNOWN (a claimed group's kind is always one of them), by
# the code as the columns hold it (an int).
KINDS: Final[Mapping[int, GroupKind]] = {
    KindCode.CLASSIC: GroupKind.CLASSIC,
    KindCode.CONSUMER: GroupKind.CONSUMER,
    KindCode.SIMPLE: GroupKind.SIMPLE,
}
# The `kind` column's values that have a code of their own, to plain ints: numpy converts an
# IntEnum member about 5x slower than an int, and a whole-fleet task converts a kind per group.
KIND_CODES: Final[Mapping[str, int]] = {kind.value: int(code) for code, kind in KINDS.items()}


def kind_codes(kinds: Sequence[str | None]) -> np.ndarray:
    """Per row, the `KindCode` of its `kind` value."""
    unknown = int(KindCode.UNKNOWN)
    return np.fromiter(
        (unknown if k is None else KIND_CODES.get(k, unknown) for k in kinds),
        dtype=np.int64,
        count=len(kinds),
    )


@dataclass
class Columns:
    """The group rows' and their claimed offsets' values the verdicts read (times in microseconds)."""

    ids: Sequence[str]
    kind: np.ndarray  # per group row: its `KindCode`
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
class Verdicts:
    """One rule at one retention over the claimed groups of one policy (boolean masks)."""

    groups: np.ndarray  # GroupDeletionCandidate
    bases: np.ndarray  # each group candidate's base time (valid where `groups`)
    partial: np.ndarray  # OffsetDeletionCandidate (simple groups: some partitions)
    old: np.ndarray  # per group: its partitions committed at or before the cut-off
    old_offsets: np.ndarray  # per claimed offset: committed at or before the cut-off


def verdicts(columns: Columns, claimed_by: np.ndarray, rule: RuleName, retention: timedelta) -> Verdicts:
    """`rule` at `retention` on the groups of the mask `claimed_by` (the rows one policy claims).
    The mirror of `core.rules.empty_group` and `core.rules.simple_group_offsets`."""
    n = len(claimed_by)
    cutoff = columns.now_us - retention // _MICROSECOND
    nothing = np.zeros(n, dtype=bool)
    if rule is RuleName.EMPTY_GROUP_RETENTION:
        # `empty_group`: the later of Empty-since and the last commit (no offsets: Empty-since).
        empty = claimed_by & (columns.kind != KindCode.SIMPLE) & (columns.members == 0)
        bases = np.maximum(columns.empty_since, columns.last_commit)
        return Verdicts(empty & (bases <= cutoff), bases, nothing, np.zeros(n, np.int64), np.zeros(0, bool))
    if rule is RuleName.SIMPLE_GROUP_OFFSET_RETENTION:
        # `simple_group_offsets`: no offsets: Empty-since; else every partition old: the group
        # (base: the latest commit), some: those partitions.
        simple = claimed_by & (columns.kind == KindCode.SIMPLE)
        old_offsets = columns.owned_us <= cutoff
        old = np.bincount(columns.owner[old_offsets], minlength=n)
        without = simple & (columns.offset_count == 0)
        every = simple & (columns.offset_count > 0) & (old == columns.offset_count)
        bases = np.where(without, columns.empty_since, columns.last_commit)
        groups = (without & (columns.empty_since <= cutoff)) | every
        partial = simple & (old > 0) & (old < columns.offset_count)
        return Verdicts(groups, bases, partial, old, old_offsets)
    # unsubscribedOffsetRetention: the claimed groups it could judge (Stable) went to the core.
    return Verdicts(nothing, np.zeros(n, np.int64), nothing, np.zeros(n, np.int64), np.zeros(0, bool))


@dataclass
class Candidates:
    """A policy's verdicts with all its enabled rules on the groups it claims."""

    groups: np.ndarray  # per group row: a group candidate
    bases: np.ndarray  # per group row: its base time (valid where `groups`)
    partial: np.ndarray  # per group row: partly eligible (some of a simple group's partitions)
    old_offsets: np.ndarray  # per claimed offset: an old partition of a partly eligible group


def candidates(columns: Columns, claimed_by: np.ndarray, policy: ConsumerGroupPolicy) -> Candidates:
    """`verdicts` of each of the policy's enabled rules at its retention, together: what
    `core.rules.judge_group` finds on each claimed group (one rule has a verdict on a group of
    a claimed shape: emptyGroupRetention on classic and KIP-848 groups, simpleGroupOffsetRetention
    on simple ones)."""
    n = len(claimed_by)
    found = Candidates(
        groups=np.zeros(n, dtype=bool),
        bases=np.zeros(n, dtype=np.int64),
        partial=np.zeros(n, dtype=bool),
        old_offsets=np.zeros(len(columns.owner), dtype=bool),
    )
    for rule, retention in policy.spec.rules.enabled().items():
        rule_found = verdicts(columns, claimed_by, rule, retention)
        found.bases = np.where(rule_found.groups, rule_found.bases, found.bases)
        found.groups |= rule_found.groups
        found.partial |= rule_found.partial
        if len(rule_found.old_offsets):
            found.old_offsets |= rule_found.old_offsets & rule_found.partial[columns.owner]
    return found
