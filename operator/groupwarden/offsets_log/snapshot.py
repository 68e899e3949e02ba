"""A `ClusterSnapshot` from the offsets log alone (no Admin API): what an offline audit decides on.

The log records what the group coordinator persisted, which is what `gather` would learn from
ListGroups/DescribeGroups/OffsetFetch for a quiescent cluster:
- state: a classic group's GroupMetadata is written when a generation completes (members present:
  Stable) and when the group becomes Empty (no members); a KIP-848 group has members or not. A
  rebalance in flight is not persisted, so the log calls such a group Stable: the engine then
  treats it like an active group, which never deletes more.
- timestamps follow `gather` on a first run (fresh first-observed memory): an Empty group whose log
  has no Empty-since time, or an offset whose latest record was undecodable, is dated `now` with
  source `observed`, so it can only become eligible later, never earlier.
- share groups (KIP-932): membership and Empty-since are in this log (types 10, 11), their
  share-partition start offsets are not: they live in `__share_group_state`. Given that topic
  replayed (`share_starts`, see `offsets_log/share_state.py`), each start offset is dated by when
  it last changed there, as `gather` does. Without it, `gather` would date them by first
  observation, so on a first run an Empty share group's clock (the later of Empty-since and the
  last start-offset change) starts `now`: that is what the snapshot says (`SHARE_STATE_UNKNOWN`).
  The what-if then asks "after groupwarden has watched the start offsets for a while"
  (`SHARE_STATE_SETTLED`): an Empty share group's start offsets only move by an admin's
  AlterShareGroupOffsets, so its clock is then its Empty-since.
- streams groups (KIP-1071): membership, Empty-since (types 17, 19) and committed offsets are in
  this log, like a KIP-848 group's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from enum import Enum

from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
    TimestampSource,
    TopicPartition,
)
from groupwarden.core.timestamps import require_aware
from groupwarden.offsets_log.ledger import OffsetsLedger
from groupwarden.offsets_log.share_state import ShareStart, ShareStarts
from groupwarden.offsets_log.views import LedgerGroup, LedgerOffset, LogTimes, log_time

LedgerAnswer = tuple[LedgerGroup, Mapping[TopicPartition, LedgerOffset]]

# Kinds whose state the log tells (see the module docstring).
_MEMBERSHIP_KINDS = frozenset({GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SHARE, GroupKind.STREAMS})


class ShareStateDating(Enum):
    """How a share group's start-offset changes (not in this log) are dated; see the docstring."""

    UNKNOWN = "unknown"  # as `gather` on a first run: first observed now
    SETTLED = "settled"  # as `gather` after watching them: unchanged while Empty


SHARE_STATE_UNKNOWN = ShareStateDating.UNKNOWN
SHARE_STATE_SETTLED = ShareStateDating.SETTLED


def group_state(view: LedgerGroup) -> GroupState:
    """The state the coordinator last persisted (see the module docstring)."""
    if view.kind in (GroupKind.SIMPLE,):
        return GroupState.EMPTY
    if view.kind in _MEMBERSHIP_KINDS:
        return GroupState.STABLE if view.member_count else GroupState.EMPTY
    return GroupState.UNKNOWN  # undecodable: never acted on


def group_facts(
    view: LedgerGroup,
    offsets: Mapping[TopicPartition, LedgerOffset],
    now: datetime,
    share_state: ShareStateDating = SHARE_STATE_UNKNOWN,
    share_starts: tuple[ShareStart, ...] | None = None,
    times: LogTimes | None = None,
) -> GroupFacts:
    """One group's facts as `gather` would date them with the log read and nothing observed before
    (share groups: their start offsets from `share_starts` when `__share_group_state` was read,
    else see `ShareStateDating`). `times`: a memo of `log_time` shared by many groups (the same
    values; the offsets of one commit share a timestamp)."""
    require_aware(now, "now")
    dating = log_time if times is None else times.__getitem__
    observed_now = SourcedTime(now, TimestampSource.OBSERVED)
    state = group_state(view)
    if view.kind not in _MEMBERSHIP_KINDS | {GroupKind.SIMPLE}:
        # gather lists these for visibility and never describes them.
        return GroupFacts(view.group_id, view.kind, state, protocol_type=view.protocol_type or "")
    empty_since: SourcedTime | None = None
    if state is GroupState.EMPTY:
        empty_since = view.empty_since if view.empty_since is not None else observed_now
        if view.kind is GroupKind.SHARE and share_starts is None and share_state is SHARE_STATE_UNKNOWN:
            # The later of Empty-since and the start offsets' first observation (now).
            empty_since = observed_now
    dated = [
        CommittedOffset(start.partition, start.start_offset, dating(start.changed_ms))
        for start in share_starts or ()
        if view.kind is GroupKind.SHARE
    ]
    for tp, lo in sorted(offsets.items()):
        committed_at = observed_now if lo.commit_time_ms is None else dating(lo.commit_time_ms)
        expire_at = None if lo.expire_time_ms is None else dating(lo.expire_time_ms).at
        dated.append(CommittedOffset(tp, lo.offset, committed_at, expire_at, lo.leader_epoch, lo.metadata))
    return GroupFacts(
        group_id=view.group_id,
        kind=view.kind,
        state=state,
        protocol_type=view.protocol_type or "",
        member_count=view.member_count,
        subscribed_topics=view.subscribed_topics,
        empty_since=empty_since,
        offsets=tuple(dated),
        internal_topics=internal_topics(view),
    )


def internal_topics(view: LedgerGroup) -> tuple[str, ...]:
    """A streams group's repartition and changelog topics from its logged topology (sorted)."""
    topology = view.streams_topology
    found = None if topology is None else topology.internal_topics
    return () if found is None else tuple(sorted(found))


def snapshot_from_answers(
    answers: Iterable[LedgerAnswer],
    now: datetime,
    *,
    cluster_id: str = "",
    topics: frozenset[str] | None = None,
    selects_id: Callable[[str], bool] = lambda _group_id: True,
    warnings: tuple[str, ...] = (),
    share_state: ShareStateDating = SHARE_STATE_UNKNOWN,
    share_starts: ShareStarts | None = None,
    times: LogTimes | None = None,
) -> ClusterSnapshot:
    """The snapshot of the groups whose id `selects_id` accepts (like `gather`), sorted by id.
    `share_starts`: `__share_group_state` replayed (None: not read); a share group it does not
    hold has no share state (DescribeShareGroupOffsets would answer no partitions). `times`: a
    `log_time` memo (see `group_facts`), kept by a caller that builds many snapshots."""
    groups = tuple(
        group_facts(
            view,
            offsets,
            now,
            share_state,
            None if share_starts is None else share_starts.get(view.group_id, ()),
            times,
        )
        for view, offsets in sorted(answers, key=lambda answer: answer[0].group_id)
        if selects_id(view.group_id)
    )
    return ClusterSnapshot(
        taken_at=now,
        groups=groups,
        cluster_id=cluster_id,
        topics=topics,
        offsets_log_available=True,
        warnings=warnings,
    )


def ledger_answers(ledger: OffsetsLedger) -> list[LedgerAnswer]:
    """Every group of a ledger with its offsets."""
    answers: list[LedgerAnswer] = []
    for group_id in ledger.groups():
        view = ledger.group(group_id)
        if view is not None:
            answers.append((view, ledger.offsets(group_id)))
    return answers


def snapshot_from_ledger(
    ledger: OffsetsLedger,
    now: datetime,
    *,
    cluster_id: str = "",
    topics: frozenset[str] | None = None,
    selects_id: Callable[[str], bool] = lambda _group_id: True,
) -> ClusterSnapshot:
    return snapshot_from_answers(
        ledger_answers(ledger), now, cluster_id=cluster_id, topics=topics, selects_id=selects_id
    )
