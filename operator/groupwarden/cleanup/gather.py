"""Gather the facts of one run: Admin API answers + exact log timestamps -> `ClusterSnapshot`.

1. ListGroups, keeping the ids the scope (the policies' selectors) accepts.
2. DescribeGroups / ConsumerGroupDescribe only for the groups ListGroups reports as not Empty: an
   Empty group has no members, so its description would add nothing ListGroups did not say
   (state, protocol type, no subscriptions). Most groups of a big cluster are Empty.
3. `__consumer_offsets` read to its end *after* the describe, into the cluster's ledger (scoped to
   the same groups): the committed offsets and their exact times come from there, never older than
   the describe. A group the log shows with members although it was listed Empty joined in
   between: its state becomes Unknown (nothing is planned for it this run).
4. Without a readable log: OffsetFetch for the offsets, and first-observed times, which can only
   delay a deletion.
5. Share groups (KIP-932): described with ShareGroupDescribe when not Empty; their share-partition
   start offsets always come from DescribeShareGroupOffsets (the state lives in
   `__share_group_state`, not in `__consumer_offsets`), dated by the share coordinator's own
   records in `__share_group_state` (`offsets_log/share_state.py`: when each start offset last
   changed), else (topic not readable, or it shows another start offset) by first observation.
   Their Empty-since time comes from the log's share-group member/metadata records, like KIP-848
   groups (first-observed without a readable log).
6. Streams groups (KIP-1071): described with StreamsGroupDescribe when not Empty (subscription =
   the topology's source topics); their offsets are ordinary committed offsets (ledger or
   OffsetFetch); their Empty-since time comes from the log's streams member/metadata records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from sys import intern

from groupwarden.cleanup.gateway import (
    DescribedGroup,
    GroupOffsets,
    KafkaGateway,
    ListedGroup,
    OffsetsLogGap,
    OffsetsLogUnavailable,
)
from groupwarden.core.gc_pause import gc_paused
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.selection import GroupScope
from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
    TopicPartition,
)
from groupwarden.core.verdicts import VerdictCache
from groupwarden.offsets_log import OffsetsLedger, log_time
from groupwarden.offsets_log.share_state import ShareStateLedger

log = logging.getLogger(__name__)

_KIND_BY_LISTED_TYPE = {
    "consumer": GroupKind.CONSUMER,
    "share": GroupKind.SHARE,
    "streams": GroupKind.STREAMS,
}
DESCRIBABLE_KINDS = frozenset(
    {GroupKind.CLASSIC, GroupKind.SIMPLE, GroupKind.CONSUMER, GroupKind.SHARE, GroupKind.STREAMS}
)
# Kinds whose facts come only from ListGroups, the describe of non-Empty groups and the
# `__consumer_offsets` ledger, so an unchanged listing and untouched records mean unchanged facts
# (`_dated_groups`). Not share groups: their start offsets live in `__share_group_state` and are
# fetched every pass (DescribeShareGroupOffsets), which the ledger never sees change.
REUSABLE_KINDS = frozenset({GroupKind.CLASSIC, GroupKind.SIMPLE, GroupKind.CONSUMER, GroupKind.STREAMS})
# One shared object: `frozenset()` makes a new one each call (20 MB at 100k Empty groups).
NO_TOPICS: frozenset[str] = frozenset()


def listed_kind(listed: ListedGroup) -> GroupKind:
    """The kind as far as ListGroups tells it (DescribeGroups refines classic vs simple)."""
    if listed.group_type in _KIND_BY_LISTED_TYPE:
        return _KIND_BY_LISTED_TYPE[listed.group_type]
    if listed.group_type in ("classic", ""):
        return GroupKind.CLASSIC if listed.protocol_type else GroupKind.SIMPLE
    return GroupKind.UNKNOWN


def listed_empty(listed: ListedGroup) -> DescribedGroup:
    """What a describe of a group ListGroups reports Empty would say: no members, so no
    subscriptions (an opaque protocol's stay unknown, as the describe answer would have them)."""
    kind = listed_kind(listed)
    transparent = listed.protocol_type in ("", "consumer") or kind in (
        GroupKind.CONSUMER,
        GroupKind.SHARE,
        GroupKind.STREAMS,
    )
    return DescribedGroup(
        group_id=listed.group_id,
        kind=kind,
        state=GroupState.EMPTY,
        protocol_type=listed.protocol_type,
        member_count=0,
        subscribed_topics=NO_TOPICS if transparent else None,
    )


# What ListGroups says of a group besides its id (type, protocol type, state), with the strings
# interned: kept for 100k groups, it must not hold each answer's own string objects.
Listing = tuple[str, str, GroupState]


# One tuple per distinct listing (a handful: type x protocol type x state), shared by every kept
# group's facts instead of one per group (6 MB at 100k groups).
_LISTINGS: dict[Listing, Listing] = {}


def listing(row: ListedGroup) -> Listing:
    key = (row.group_type, row.protocol_type, row.state)
    found = _LISTINGS.get(key)
    if found is None:
        if len(_LISTINGS) > 1000:  # protocol types are free text: bounded, whatever a cluster has
            _LISTINGS.clear()
        found = _LISTINGS[key] = (intern(row.group_type), intern(row.protocol_type), row.state)
    return found


@dataclass
class ClusterKnowledge:
    """What the passes learned of one cluster, kept for the next: the offsets-log ledger (resumes
    where it stopped) and the groups it keeps (`scope`, None = every group), the first-observed
    times, the last pass's facts and verdicts, the `__share_group_state` ledger.
    `read_offsets_log=False` forces the observed fallback."""

    observed: ObservedTimes
    ledger: OffsetsLedger | None = None
    read_offsets_log: bool = True
    scope: GroupScope | None = None
    # When the ledger last reached the log's end (see LEDGER_MAX_PAUSE).
    caught_up_at: datetime | None = None
    # The previous gather's facts of the groups it found Empty, with what ListGroups said of them
    # (`listing`): reused for a group listed the same way whose log records did not change since.
    facts: dict[str, tuple[Listing, GroupFacts]] = field(default_factory=dict)
    # The engine's verdicts on those facts (core/verdicts.py), kept while they hold.
    verdicts: VerdictCache = field(default_factory=VerdictCache)
    # `__share_group_state` replayed (share start offsets and when they changed); None when not
    # read yet or not readable.
    share_state: ShareStateLedger | None = None


# Compaction drops tombstones after delete.retention.ms (24 h by default for __consumer_offsets):
# a ledger resumed after a longer pause could keep offsets that were deleted meanwhile. Its stale
# entries can only add old partitions (never hide a newer commit), but a plan must not name
# offsets that are gone: a ledger older than this is rebuilt from the log's start.
LEDGER_MAX_PAUSE = timedelta(hours=12)


def catch_up_ledger(
    gateway: KafkaGateway, memory: ClusterKnowledge, scope: GroupScope | None = None
) -> str | None:
    """Brings the ledger up to the log's current end, keeping the groups `scope` accepts (None:
    every group); returns a warning when the log is unreadable."""
    if not memory.read_offsets_log:
        memory.ledger, memory.scope = None, None
        return "offsets log reading is disabled: timestamps are first-observed times"
    accepts = None if scope is None else scope.accepts
    ledger = memory.ledger
    if ledger is None or memory.scope != scope:
        memory.facts = {}  # facts built from another ledger, or from another scope's replay
    last = memory.caught_up_at
    now = datetime.now(UTC)  # the pause is real time, whatever time a plan is decided for
    if ledger is not None and (last is None or now - last > LEDGER_MAX_PAUSE):
        log.info("the offsets-log ledger was last caught up at %s: rebuilding it", last)
        ledger = None
        memory.facts = {}
    if ledger is None:
        ledger = OffsetsLedger(accepts)
    elif memory.scope is not None and (scope is None or not memory.scope.covers(scope)):
        ledger.widen_scope(accepts)  # this read replays the log for the newly selected groups
    elif memory.scope != scope:
        ledger.narrow_scope(accepts)
    try:
        try:
            _apply_all(gateway, ledger)
        except OffsetsLogGap:
            log.warning("offsets log moved past the ledger's position: rebuilding it from the start")
            memory.facts = {}
            ledger = OffsetsLedger(accepts)
            _apply_all(gateway, ledger)
    except OffsetsLogUnavailable as exc:
        memory.ledger, memory.scope, memory.facts = None, None, {}
        return f"__consumer_offsets is not readable ({exc}): timestamps are first-observed times"
    memory.ledger, memory.scope, memory.caught_up_at = ledger, scope, now
    return None


def catch_up_share_state(gateway: KafkaGateway, memory: ClusterKnowledge) -> str | None:
    """Brings the `__share_group_state` ledger to the topic's end; returns a warning when it is not
    readable (share start offsets are then dated by first observation)."""
    if not memory.read_offsets_log:
        memory.share_state = None
        return None  # catch_up_ledger already says timestamps are first-observed
    ledger = memory.share_state or ShareStateLedger()
    try:
        try:
            ledger.apply_many(gateway.read_share_state_log(dict(ledger.positions)))
        except OffsetsLogGap:
            # Pruned past our position: what we kept may miss changes, so start again (the first
            # record of each share-partition then dates it: never earlier than the truth).
            ledger = ShareStateLedger()
            ledger.apply_many(gateway.read_share_state_log({}))
    except OffsetsLogUnavailable as exc:
        memory.share_state = None
        return (
            f"__share_group_state is not readable ({exc}): share start offsets are dated by first observation"
        )
    memory.share_state = ledger
    return None


def _apply_all(gateway: KafkaGateway, ledger: OffsetsLedger) -> None:
    ledger.apply_many(gateway.read_offsets_log(dict(ledger.positions)))
    ledger.finish_read()  # read to the log's end: a widening of its scope is complete


def gather_snapshot(
    gateway: KafkaGateway,
    memory: ClusterKnowledge,
    now: datetime,
    scope: GroupScope | Callable[[str], bool] | None = None,
) -> ClusterSnapshot:
    """Describes the groups `scope` accepts (None: all) and dates their facts."""
    if scope is not None and not isinstance(scope, GroupScope):
        scope = GroupScope.matching(scope)
    with gc_paused():
        return _gather(gateway, memory, now, scope)


def _gather(
    gateway: KafkaGateway, memory: ClusterKnowledge, now: datetime, scope: GroupScope | None
) -> ClusterSnapshot:
    listed = [g for g in gateway.list_groups() if scope is None or scope.accepts(g.group_id)]
    describable = [g for g in listed if listed_kind(g) in DESCRIBABLE_KINDS]
    active = [g for g in describable if g.state is not GroupState.EMPTY]
    described = gateway.describe_groups(active) if active else {}
    return _dated(gateway, memory, now, scope, listed, described, every_group=True)


_LISTED_TYPE = {
    GroupKind.CONSUMER: "consumer",
    GroupKind.CLASSIC: "classic",
    GroupKind.SIMPLE: "classic",
    # Never "classic" for these: classic DescribeGroups calls them Dead (error 0 before v6).
    GroupKind.SHARE: "share",
    GroupKind.STREAMS: "streams",
}


def regather(
    gateway: KafkaGateway,
    memory: ClusterKnowledge,
    now: datetime,
    scope: GroupScope | None,
    groups: Sequence[GroupFacts],
) -> ClusterSnapshot:
    """Some groups of an earlier snapshot read again (the re-check before a deletion step):
    described by id without listing the whole cluster, then dated from the ledger's new tail like
    a gather. The ledger keeps `scope`, so this never narrows it for the next full run. A group
    the describe does not find comes back Dead."""
    asked = [
        ListedGroup(g.group_id, _LISTED_TYPE.get(g.kind, "classic"), g.protocol_type, g.state) for g in groups
    ]
    with gc_paused():
        described = gateway.describe_groups(asked) if asked else {}
        listed = []
        for group in asked:
            found = described.get(group.group_id)
            if (
                found is None
                or found.state is GroupState.DEAD
                or (found.error is not None and found.error.name == "GROUP_ID_NOT_FOUND")
            ):
                listed.append(
                    ListedGroup(group.group_id, group.group_type, group.protocol_type, GroupState.DEAD)
                )
            else:
                listed.append(ListedGroup(group.group_id, group.group_type, found.protocol_type, found.state))
        return _dated(gateway, memory, now, scope, listed, described, every_group=False)


def _dated(
    gateway: KafkaGateway,
    memory: ClusterKnowledge,
    now: datetime,
    scope: GroupScope | None,
    listed: Sequence[ListedGroup],
    described: Mapping[str, DescribedGroup],
    *,
    every_group: bool,
) -> ClusterSnapshot:
    """The log read to its end (after the describe), then every listed group's dated facts."""
    describable = [g for g in listed if listed_kind(g) in DESCRIBABLE_KINDS]
    warning = catch_up_ledger(gateway, memory, scope)
    ledger = memory.ledger
    fetched: Mapping[str, GroupOffsets] = {}
    share = [g.group_id for g in describable if listed_kind(g) is GroupKind.SHARE]
    if ledger is None and len(share) < len(describable):
        fetched = gateway.fetch_offsets(
            [g.group_id for g in describable if listed_kind(g) is not GroupKind.SHARE]
        )
    share_offsets = gateway.fetch_share_offsets(share) if share else {}
    # Read after the start offsets were fetched, so it holds at least their changes.
    share_warning = catch_up_share_state(gateway, memory) if share else None
    topics = gateway.list_topics()

    dating = _Dating(memory.observed, ledger, now, memory.share_state if share else None)
    groups = _dated_groups(listed, described, fetched, share_offsets, dating, memory, every_group)
    observed = memory.observed
    # (a dict of every group only when needed; a re-check sees only some groups: forget nothing)
    if every_group and (observed.empty_since or observed.offsets):
        by_id = {g.group_id: g for g in groups}
        observed.forget_missing(by_id, lambda group_id: (o.partition for o in by_id[group_id].offsets))
    return ClusterSnapshot(
        taken_at=now,
        groups=groups,
        cluster_id=gateway.cluster_id(),
        topics=topics,
        offsets_log_available=ledger is not None,
        warnings=tuple(w for w in (warning, share_warning) if w),
    )


def _dated_groups(
    listed: Sequence[ListedGroup],
    described: Mapping[str, DescribedGroup],
    fetched: Mapping[str, GroupOffsets],
    share_offsets: Mapping[str, GroupOffsets],
    dating: _Dating,
    memory: ClusterKnowledge,
    every_group: bool,
) -> tuple[GroupFacts, ...]:
    """Every listed group's facts. A group listed Empty exactly as in the previous gather, whose
    log records did not change since, has the same facts: its offsets and times come from the
    same ledger entries, its Empty-since from the same record or the same first observation (an
    unchanged observation keeps its time), and it was not described. Reusing them makes a later
    pass cost what changed (plus ListGroups), and the old and new snapshots share those objects.
    Only for `REUSABLE_KINDS` (a share group's offsets are fetched, not logged)."""
    ledger = dating.ledger

    def build(row: ListedGroup) -> GroupFacts:
        return _group_facts(row, described, fetched, share_offsets, dating)

    if not every_group:
        # A re-check of a few groups: built afresh, and neither the kept facts nor the touched
        # groups are consumed (the next full gather must still see every change since the last).
        return tuple(build(g) for g in listed)
    if ledger is None:
        memory.facts = {}
        return tuple(build(g) for g in listed)
    touched = ledger.take_touched()  # None: not tracked before this read: nothing is reused
    previous = memory.facts if touched is not None else {}
    kept: dict[str, tuple[Listing, GroupFacts]] = {}
    groups: list[GroupFacts] = []
    for row in listed:
        facts = None
        if row.state is GroupState.EMPTY and listed_kind(row) in REUSABLE_KINDS:
            listed_as = listing(row)
            hit = previous.get(row.group_id)
            unchanged = touched is not None and row.group_id not in touched
            if hit is not None and hit[0] == listed_as and unchanged:
                facts = hit[1]
            if facts is None:
                facts = build(row)
            if facts.error is None:
                kept[facts.group_id] = (listed_as, facts)  # (keyed by the facts' own id string)
        else:
            facts = build(row)
        groups.append(facts)
    memory.facts = kept
    return tuple(groups)


class _Dating:
    """Dates a gather's facts from the ledger, else from first observations. Shares one object per
    distinct partition and per distinct log time (a commit of N partitions has one time)."""

    def __init__(
        self,
        observed: ObservedTimes,
        ledger: OffsetsLedger | None,
        now: datetime,
        share_state: ShareStateLedger | None = None,
    ) -> None:
        self.observed = observed
        self.ledger = ledger
        self.now = now
        self.share_state = share_state
        self._partitions: dict[tuple[str, int], TopicPartition] = {}
        self._times: dict[int, SourcedTime] = {}

    def partition(self, topic: str, partition: int) -> TopicPartition:
        key = (topic, partition)
        found = self._partitions.get(key)
        if found is None:
            found = self._partitions[key] = TopicPartition(topic, partition)
        return found

    def log_time(self, ms: int) -> SourcedTime:
        found = self._times.get(ms)
        if found is None:
            found = self._times[ms] = log_time(ms)
        return found


def _group_facts(
    listed: ListedGroup,
    described: Mapping[str, DescribedGroup],
    fetched: Mapping[str, GroupOffsets],
    share_offsets: Mapping[str, GroupOffsets],
    dating: _Dating,
) -> GroupFacts:
    # The ledger's (interned) string, not the ListGroups answer's own copy: facts outlive passes.
    group_id = intern(listed.group_id)
    kind = listed_kind(listed)
    if kind not in DESCRIBABLE_KINDS:
        # unknown kinds are listed for visibility but never described or acted on.
        return GroupFacts(group_id, kind, listed.state, protocol_type=listed.protocol_type)
    if listed.state is GroupState.EMPTY:
        description = listed_empty(listed)
    else:
        found = described.get(group_id)
        if found is None:  # the gateway answers for every id; never judge one it did not
            return GroupFacts(
                group_id, kind, listed.state, protocol_type=listed.protocol_type, error="not described"
            )
        description = found
    ledger = dating.ledger
    log = ledger  # membership (Empty-since) comes from the log for every kind it holds
    if kind is GroupKind.SHARE:
        # A share group's start offsets are not in the ledger: observed start offsets only.
        ledger = None
        group_offsets = share_offsets.get(group_id)
    else:
        group_offsets = None if ledger is not None else fetched.get(group_id)
    error = description.error or (group_offsets.error if group_offsets else None)
    if error is not None or (ledger is None and group_offsets is None):
        return GroupFacts(
            group_id,
            description.kind,
            description.state,
            protocol_type=description.protocol_type,
            error=str(error) if error else "offsets were not fetched",
            kafka_error=error,
        )
    state = description.state
    membership = None if log is None else log.membership(group_id)
    if state is GroupState.EMPTY and membership is not None and membership[0] > 0:
        # Members joined after ListGroups (the log was read later): judge it next run.
        state = GroupState.UNKNOWN
    if ledger is not None:
        offsets = _logged_offsets(group_id, ledger, dating)
    else:
        assert group_offsets is not None
        offsets = _observed_offsets(group_id, group_offsets, dating, kind is GroupKind.SHARE)
    return GroupFacts(
        group_id=group_id,
        kind=description.kind,
        state=state,
        protocol_type=description.protocol_type,
        member_count=description.member_count,
        subscribed_topics=description.subscribed_topics,
        empty_since=_empty_since(
            group_id, state, membership, dating, clock=description.kind is not GroupKind.SIMPLE or not offsets
        ),
        offsets=offsets,
        internal_topics=_internal_topics(group_id, kind, description, log),
    )


def _internal_topics(
    group_id: str, kind: GroupKind, description: DescribedGroup, log: OffsetsLedger | None
) -> tuple[str, ...]:
    """A streams group's repartition/changelog topics: from its logged topology (type 23) when the
    log is read, else from StreamsGroupDescribe (only non-Empty groups are described)."""
    if kind is not GroupKind.STREAMS:
        return ()
    found = description.internal_topics
    view = None if log is None else log.group(group_id)
    if view is not None and view.streams_topology is not None:
        found = view.streams_topology.internal_topics
    return () if found is None else tuple(sorted(found))


def _empty_since(
    group_id: str,
    state: GroupState,
    membership: tuple[int, int | None] | None,
    dating: _Dating,
    *,
    clock: bool = True,
) -> SourcedTime | None:
    """When the group became Empty: from the log's member records, else a first observation
    (`clock`), else unknown.

    `clock=False` for a simple group that has offsets. Its offsets expire per partition from their
    own last commit (KIP-211; the broker keeps no group-level clock for a group without a protocol
    type), so the engine never reads its Empty-since (`rules.simple_group_offsets` does only when
    the group has no offsets), and the log has no member record for it: without this, every such
    group kept a clock (100k clocks, and an observation store, on a cluster of CI groups whose log
    dates everything). Once such a group has no offsets left, its clock starts at the first pass
    that sees it so: not at a first sight of it while it still had offsets, whose commits were
    activity the clock would have skipped (the later base, as everywhere: it can only delay)."""
    observed = dating.observed
    if state is not GroupState.EMPTY:
        observed.observe_group_state(group_id, False, dating.now)
        return None
    if membership is not None and membership[0] == 0 and membership[1] is not None:
        # The log knows: no observation is needed (one made later can only be later).
        observed.forget_empty(group_id)
        return dating.log_time(membership[1])
    if not clock:
        observed.forget_empty(group_id)
        return None
    return observed.observe_group_state(group_id, True, dating.now)


def _logged_offsets(group_id: str, ledger: OffsetsLedger, dating: _Dating) -> tuple[CommittedOffset, ...]:
    """The group's committed offsets as the log says, read to its end after the describe."""
    dated: list[CommittedOffset] = []
    observed = dating.observed
    remembered = observed.offsets  # (the first-observed offset clocks: empty where the log dates all)
    for topic, partition, entry in ledger.offset_entries(group_id):
        offset, leader_epoch, metadata, commit_ms, expire_ms, _topic_id = entry
        tp = dating.partition(topic, partition)
        committed_at: SourcedTime
        if commit_ms is None:
            # The latest record of this offset was undecodable: its time is unknown, so the clock
            # starts at the first observation of it.
            committed_at = observed.observe_offset(group_id, tp, offset, dating.now)
        else:
            if remembered:  # 600k calls a pass at 100k groups when there is nothing to forget
                observed.forget_offset(group_id, tp)
            committed_at = dating.log_time(commit_ms)
        dated.append(
            CommittedOffset(  # positional: partition, offset, committed_at, expire_at, epoch, metadata
                tp,
                offset,
                committed_at,
                None if expire_ms < 0 else log_time(expire_ms).at,
                None if leader_epoch < 0 else leader_epoch,
                metadata,
            )
        )
    dated.sort(key=_by_partition)
    return tuple(dated)


def _by_partition(offset: CommittedOffset) -> TopicPartition:
    return offset.partition


def _observed_offsets(
    group_id: str, fetched: GroupOffsets, dating: _Dating, share: bool = False
) -> tuple[CommittedOffset, ...]:
    """OffsetFetch's answer dated by first observations (the log is not readable); a share group's
    start offsets by `__share_group_state` when it shows the same start offset."""
    observed, now = dating.observed, dating.now
    share_state = dating.share_state if share else None
    dated = []
    for partition, info in sorted(fetched.offsets.items()):
        committed_at: SourcedTime | None = None
        topic_id = fetched.topic_ids.get(partition.topic)
        if share_state is not None and topic_id is not None:
            logged = share_state.start_offset(group_id, topic_id, partition.partition)
            if logged is not None and logged[0] == info.offset:
                observed.forget_offset(group_id, partition)
                committed_at = dating.log_time(logged[1])
        if committed_at is None:
            committed_at = observed.observe_offset(group_id, partition, info.offset, now)
        dated.append(
            CommittedOffset(
                partition=partition,
                offset=info.offset,
                committed_at=committed_at,
                leader_epoch=info.leader_epoch,
                metadata=info.metadata,
            )
        )
    return tuple(dated)
