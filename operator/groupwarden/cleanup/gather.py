"""Gather the facts of one run: Admin API answers + exact log timestamps -> `ClusterSnapshot`.

Order matters: committed offsets are fetched *before* the offsets log is read to its end, so every
commit the fetch saw is already in the ledger; an offset whose value differs from the ledger's (a
commit that raced the read) gets a first-observed time instead, which can only delay a deletion.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from groupwarden.cleanup.gateway import (
    DescribedGroup,
    GroupOffsets,
    KafkaGateway,
    ListedGroup,
    OffsetsLogGap,
    OffsetsLogUnavailable,
)
from groupwarden.core.observed import ObservedTimes
from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
)
from groupwarden.offsets_log import OffsetsLedger, log_time

log = logging.getLogger(__name__)

_KIND_BY_LISTED_TYPE = {
    "consumer": GroupKind.CONSUMER,
    "share": GroupKind.SHARE,
    "streams": GroupKind.STREAMS,
}


def listed_kind(listed: ListedGroup) -> GroupKind:
    """The kind as far as ListGroups tells it (DescribeGroups refines classic vs simple)."""
    if listed.group_type in _KIND_BY_LISTED_TYPE:
        return _KIND_BY_LISTED_TYPE[listed.group_type]
    if listed.group_type in ("classic", ""):
        return GroupKind.CLASSIC if listed.protocol_type else GroupKind.SIMPLE
    return GroupKind.UNKNOWN


@dataclass
class TimestampMemory:
    """What survives between runs of one cluster: the ledger (resumes where it stopped) and the
    first-observed times. `read_offsets_log=False` forces the observed fallback."""

    observed: ObservedTimes
    ledger: OffsetsLedger | None = None
    read_offsets_log: bool = True


def catch_up_ledger(gateway: KafkaGateway, memory: TimestampMemory) -> str | None:
    """Brings the ledger up to the log's current end; returns a warning when the log is unreadable."""
    if not memory.read_offsets_log:
        memory.ledger = None
        return "offsets log reading is disabled: timestamps are first-observed times"
    ledger = memory.ledger or OffsetsLedger()
    try:
        try:
            _apply_all(gateway, ledger)
        except OffsetsLogGap:
            log.warning("offsets log moved past the ledger's position: rebuilding it from the start")
            ledger = OffsetsLedger()
            _apply_all(gateway, ledger)
    except OffsetsLogUnavailable as exc:
        memory.ledger = None
        return f"__consumer_offsets is not readable ({exc}): timestamps are first-observed times"
    memory.ledger = ledger
    return None


def _apply_all(gateway: KafkaGateway, ledger: OffsetsLedger) -> None:
    for record in gateway.read_offsets_log(dict(ledger.positions)):
        ledger.apply(record.key, record.value, record.timestamp_ms, record.partition, record.offset)


def gather_snapshot(
    gateway: KafkaGateway,
    memory: TimestampMemory,
    now: datetime,
    selects_id: Callable[[str], bool] = lambda _group_id: True,
) -> ClusterSnapshot:
    """Describes the groups whose id `selects_id` accepts and dates their facts."""
    listed = [g for g in gateway.list_groups() if selects_id(g.group_id)]
    describable = [
        g for g in listed if listed_kind(g) in (GroupKind.CLASSIC, GroupKind.SIMPLE, GroupKind.CONSUMER)
    ]
    described = gateway.describe_groups(describable) if describable else {}
    offsets = gateway.fetch_offsets([g.group_id for g in describable]) if describable else {}
    topics = gateway.list_topics()
    warning = catch_up_ledger(gateway, memory)

    groups = tuple(_group_facts(g, described, offsets, memory, now) for g in listed)
    memory.observed.forget_missing(
        {g.group_id for g in groups}, {g.group_id: {o.partition for o in g.offsets} for g in groups}
    )
    return ClusterSnapshot(
        taken_at=now,
        groups=groups,
        cluster_id=gateway.cluster_id(),
        topics=topics,
        offsets_log_available=memory.ledger is not None,
        warnings=(warning,) if warning else (),
    )


def _group_facts(
    listed: ListedGroup,
    described: Mapping[str, DescribedGroup],
    offsets: Mapping[str, GroupOffsets],
    memory: TimestampMemory,
    now: datetime,
) -> GroupFacts:
    kind = listed_kind(listed)
    description = described.get(listed.group_id)
    if description is None:
        # share / streams / unknown kinds are listed for visibility but never described or acted on.
        return GroupFacts(listed.group_id, kind, listed.state, protocol_type=listed.protocol_type)
    fetched = offsets.get(listed.group_id)
    error = description.error or (fetched.error if fetched else None)
    if error is not None or fetched is None:
        return GroupFacts(
            listed.group_id,
            description.kind,
            description.state,
            protocol_type=description.protocol_type,
            error=str(error) if error else "offsets were not fetched",
        )
    return GroupFacts(
        group_id=listed.group_id,
        kind=description.kind,
        state=description.state,
        protocol_type=description.protocol_type,
        member_count=description.member_count,
        subscribed_topics=description.subscribed_topics,
        empty_since=_empty_since(listed.group_id, description, memory, now),
        offsets=_dated_offsets(listed.group_id, fetched, memory, now),
    )


def _empty_since(
    group_id: str, description: DescribedGroup, memory: TimestampMemory, now: datetime
) -> SourcedTime | None:
    is_empty = description.state is GroupState.EMPTY
    observed = memory.observed.observe_group_state(group_id, is_empty, now)
    if not is_empty or memory.ledger is None:
        return observed
    logged = memory.ledger.group(group_id)
    # Trust the log only when it agrees the group has no members (it is never behind the
    # describe call by more than the records written since the read).
    if logged is not None and logged.member_count == 0 and logged.empty_since is not None:
        return logged.empty_since
    return observed


def _dated_offsets(
    group_id: str, fetched: GroupOffsets, memory: TimestampMemory, now: datetime
) -> tuple[CommittedOffset, ...]:
    dated: list[CommittedOffset] = []
    for partition, info in sorted(fetched.offsets.items()):
        observed = memory.observed.observe_offset(group_id, partition, info.offset, now)
        committed_at, expire_at = observed, None
        logged = memory.ledger.offset(group_id, partition) if memory.ledger is not None else None
        if logged is not None and logged.offset == info.offset and logged.commit_time_ms is not None:
            committed_at = log_time(logged.commit_time_ms)
            expire_at = None if logged.expire_time_ms is None else log_time(logged.expire_time_ms).at
        dated.append(
            CommittedOffset(
                partition=partition,
                offset=info.offset,
                committed_at=committed_at,
                expire_at=expire_at,
                leader_epoch=info.leader_epoch,
                metadata=info.metadata,
            )
        )
    return tuple(dated)
