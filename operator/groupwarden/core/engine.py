"""`decide(policy, snapshot, now) -> Plan`: the pure decision, in two steps.

1. `evaluate`: select groups, ask the rules (rules.py) about each one -> candidates and skips.
2. `finish`: the blast-radius breaker, overlap blocks (overlap.py), then per-run limits, oldest first
   -> an immutable Plan.

`finish` is made of parts that depend on one group alone (`settle`: the breaker's and the blocks'
skips; `take`: the limits given their cut-offs) and parts that are global per policy (`PolicyTotals`
and the breaker, `cutoffs`, `assemble`), so a fleet audit can run the first kind where the groups
are and only the second kind in one place (core/parts.py); `finish` runs them all on one evaluation.

No I/O, no clock: `now` is a parameter, so the same inputs always give the same plan.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from fractions import Fraction

from groupwarden.core.plan import Action, ActionKind, Plan, PlanSummary, Skip, SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy, DeletionLimits
from groupwarden.core.rules import (
    GroupDeletionCandidate,
    OffsetDeletionCandidate,
    PartitionCandidate,
    Verdict,
    judge_group,
    offsets_reason,
)
from groupwarden.core.selection import SELECTABLE_KINDS, GroupMatcher
from groupwarden.core.snapshot import ClusterSnapshot, GroupFacts, GroupKind, TopicPartition
from groupwarden.core.timestamps import require_aware
from groupwarden.core.verdicts import VerdictCache

OBSERVED_TIMES_WARNING = (
    "the offsets log was not read: timestamps are first-observed times, so deletions may happen later "
    "than the retention says (never earlier)"
)


@dataclass(frozen=True)
class Evaluation:
    """A policy's own view of a snapshot, before limits, breaker and overlap."""

    policy: ConsumerGroupPolicy
    snapshot: ClusterSnapshot
    now: datetime
    matcher: GroupMatcher
    groups_matched: int
    group_candidates: tuple[GroupDeletionCandidate, ...]
    offset_candidates: tuple[OffsetDeletionCandidate, ...]
    skipped: tuple[Skip, ...]

    @property
    def groups_eligible(self) -> int:
        return len(self.group_candidates)

    @property
    def offsets_eligible(self) -> int:
        return sum(len(c.partitions) for c in self.offset_candidates)

    @property
    def blast_radius_exceeded(self) -> bool:
        """Eligible group deletions > maxDeletionRatio x matched groups (exact rational arithmetic)."""
        return PolicyTotals.of(self).trips(self.policy)


@dataclass(frozen=True, slots=True)
class PolicyTotals:
    """A policy's counts over the groups of a cluster: what its breaker and summary read. Counts
    of parts of a cluster's groups add up (`+`) to the cluster's."""

    groups_matched: int = 0
    groups_eligible: int = 0
    offsets_eligible: int = 0

    @classmethod
    def of(cls, evaluation: Evaluation) -> PolicyTotals:
        return cls(evaluation.groups_matched, evaluation.groups_eligible, evaluation.offsets_eligible)

    def __add__(self, other: PolicyTotals) -> PolicyTotals:
        return PolicyTotals(
            self.groups_matched + other.groups_matched,
            self.groups_eligible + other.groups_eligible,
            self.offsets_eligible + other.offsets_eligible,
        )

    def trips(self, policy: ConsumerGroupPolicy) -> bool:
        """Eligible group deletions > maxDeletionRatio x matched groups (exact rational arithmetic)."""
        ratio = Fraction(str(policy.spec.limits.max_deletion_ratio))
        return self.groups_eligible > ratio * self.groups_matched


@dataclass(frozen=True)
class OverlapBlocks:
    """What other policies forbid this one to do (filled by overlap.py): group id -> explanation."""

    groups: Mapping[str, str] = field(default_factory=dict)
    partitions: Mapping[tuple[str, TopicPartition], str] = field(default_factory=dict)
    # Every partition of the group refused too (a DryRun/suspended/tripped policy selects it):
    # group id -> explanation, without one entry per partition.
    whole: Mapping[str, str] = field(default_factory=dict)


def evaluate(
    policy: ConsumerGroupPolicy,
    snapshot: ClusterSnapshot,
    now: datetime,
    id_matched: Iterable[GroupFacts] | None = None,
    verdicts: VerdictCache | None = None,
) -> Evaluation:
    """`id_matched`: the snapshot's groups whose id the policy's globs accept, in snapshot order,
    when the caller already knows them (`decide_many` finds them for many policies at once).
    `verdicts`: verdicts shared by policies with the same rules and kept from earlier passes for
    unchanged groups (core/verdicts.py)."""
    require_aware(now, "now")
    matcher = GroupMatcher.from_selector(policy.spec.selector)
    rules = policy.spec.rules.enabled()
    rules_token = -1 if verdicts is None else verdicts.rules_token(tuple(sorted(rules.items())))
    matched = 0
    group_candidates: list[GroupDeletionCandidate] = []
    offset_candidates: list[OffsetDeletionCandidate] = []
    skipped: list[Skip] = []
    # Groups from `id_matched` already passed the globs (matched once for every policy): only
    # their kind is left to check.
    ids_known = id_matched is not None
    kinds = matcher.kinds
    for group in snapshot.groups if id_matched is None else id_matched:
        supported = group.kind in SELECTABLE_KINDS
        if supported and group.kind in kinds:
            if not (ids_known or matcher.matches_id(group.group_id)):
                continue
            matched += 1
        elif group.kind in (GroupKind.SHARE, GroupKind.STREAMS):
            # Reported as before these kinds were supported: a policy that does not name them
            # (every policy written before) lists them as skipped, never acts on them.
            if ids_known or matcher.matches_id(group.group_id):
                kind = group.kind.value
                detail = f"{kind} groups are not selected (selector.groupTypes does not name {kind})"
                skipped.append(Skip(group.group_id, SkipReason.UNSUPPORTED_GROUP_TYPE, detail, group.kind))
            continue
        elif supported or not (ids_known or matcher.matches_id(group.group_id)):
            continue
        if not supported and group.error is None:
            detail = f"{group.kind.value} groups are never touched"
            skipped.append(Skip(group.group_id, SkipReason.UNSUPPORTED_GROUP_TYPE, detail, group.kind))
            continue
        if group.error is not None:
            skipped.append(
                Skip(
                    group.group_id,
                    SkipReason.DESCRIBE_FAILED,
                    group.error,
                    group.kind,
                    kafka_error=group.kafka_error,
                )
            )
            continue
        if verdicts is None:
            verdict: Verdict = judge_group(group, rules, now)
        else:
            verdict = verdicts.judge(group, rules, rules_token, now)
        if isinstance(verdict, GroupDeletionCandidate):
            group_candidates.append(verdict)
        elif isinstance(verdict, OffsetDeletionCandidate):
            offset_candidates.append(verdict)
        elif isinstance(verdict, Skip):
            skipped.append(verdict)
    return Evaluation(
        policy,
        snapshot,
        now,
        matcher,
        matched,
        tuple(group_candidates),
        tuple(offset_candidates),
        tuple(skipped),
    )


def finish(evaluation: Evaluation, blocks: OverlapBlocks | None = None) -> Plan:
    """Apply the breaker, overlap blocks and limits to an evaluation and build the plan."""
    totals = PolicyTotals.of(evaluation)
    settled = settle(evaluation, blocks, totals)
    limits = evaluation.policy.spec.limits
    group_keys, offset_keys = smallest_keys(settled, limits)
    cut = cutoffs(limits, group_keys, len(settled.groups), offset_keys, settled.partition_count)
    actions = take(settled, cut, evaluation.now)
    return assemble(
        evaluation.policy,
        evaluation.snapshot,
        evaluation.now,
        totals,
        actions,
        settled.skipped,
        len(evaluation.snapshot.groups),
    )


@dataclass
class Settled:
    """A policy's evaluation of some groups after the breaker and the overlap blocks, before the
    limits: its skips so far and the candidates still standing."""

    skipped: list[Skip]
    groups: list[GroupDeletionCandidate]
    offsets: list[OffsetDeletionCandidate]

    @property
    def partition_count(self) -> int:
        return sum(len(c.partitions) for c in self.offsets)


def breaker_detail(policy: ConsumerGroupPolicy, totals: PolicyTotals) -> str:
    return (
        f"{totals.groups_eligible} of {totals.groups_matched} selected groups are eligible for "
        f"deletion, more than maxDeletionRatio {policy.spec.limits.max_deletion_ratio}: nothing is deleted "
        "this run (raise spec.limits.maxDeletionRatio on purpose to proceed)"
    )


def settle(evaluation: Evaluation, blocks: OverlapBlocks | None, totals: PolicyTotals) -> Settled:
    """The breaker (decided by `totals`, the policy's counts over the whole cluster) and the overlap
    blocks applied to the groups of `evaluation`: per group, whatever the other groups are.

    Mirrored on numpy columns for the fleet audit's claimed groups by `fleet/columnar_decide.py`
    (`split_decide`: the breaker's skips; a claimed group has no overlap block): a change here
    must be made there too (DESIGN.md, "Fast paths and their oracle")."""
    skipped = list(evaluation.skipped)
    if totals.trips(evaluation.policy):
        detail = breaker_detail(evaluation.policy, totals)
        skipped.extend(
            _skip_group(c, SkipReason.BLAST_RADIUS_EXCEEDED, detail) for c in evaluation.group_candidates
        )
        skipped.extend(
            _skip_partitions(c, c.partitions, SkipReason.BLAST_RADIUS_EXCEEDED, detail)
            for c in evaluation.offset_candidates
        )
        return Settled(skipped, [], [])
    groups, offsets = _apply_blocks(evaluation, blocks or OverlapBlocks(), skipped)
    return Settled(skipped, groups, offsets)


# The limits take the oldest items first: groups by (eligible since, group id), partitions by
# (last commit, group id, partition). Keys are unique within a policy's plan.
GroupKey = tuple[datetime, str]
PartitionKey = tuple[datetime, str, TopicPartition]


def group_key(candidate: GroupDeletionCandidate) -> GroupKey:
    return (candidate.base.at, candidate.group.group_id)


def partition_keys(
    candidate: OffsetDeletionCandidate,
) -> Iterator[tuple[PartitionKey, PartitionCandidate]]:
    group_id = candidate.group.group_id
    for p in candidate.partitions:
        yield (p.committed_at.at, group_id, p.partition), p


def smallest_keys(settled: Settled, limits: DeletionLimits) -> tuple[list[GroupKey], list[PartitionKey]]:
    """The keys of the oldest candidates of these groups that the limits could take: any set of
    groups' smallest keys, merged, holds the cluster's (`cutoffs`).

    Mirrored on numpy columns for the fleet audit's claimed groups by `fleet/columnar_count.py`
    (`_group_keys`, `_partition_keys`): a change here must be made there too (DESIGN.md, "Fast
    paths and their oracle")."""
    groups = heapq.nsmallest(limits.max_group_deletions_per_run, (group_key(c) for c in settled.groups))
    offsets = heapq.nsmallest(
        limits.max_offset_deletions_per_run, (key for c in settled.offsets for key, _ in partition_keys(c))
    )
    return groups, offsets


@dataclass(frozen=True)
class Cutoffs:
    """What the per-run limits take, as the newest key taken (None: nothing), and how many items
    wait for a later run."""

    group_limit: int
    groups: GroupKey | None
    groups_deferred: int
    offset_limit: int
    offsets: PartitionKey | None
    offsets_deferred: int


def cutoffs(
    limits: DeletionLimits,
    group_keys: Iterable[GroupKey],
    groups_standing: int,
    offset_keys: Iterable[PartitionKey],
    partitions_standing: int,
) -> Cutoffs:
    """The limits over a whole cluster, from the smallest keys of its parts (`smallest_keys`) and
    the number of candidates (groups, partitions) standing after `settle` in all of them."""
    taken_groups = heapq.nsmallest(limits.max_group_deletions_per_run, group_keys)
    taken_offsets = heapq.nsmallest(limits.max_offset_deletions_per_run, offset_keys)
    return Cutoffs(
        limits.max_group_deletions_per_run,
        taken_groups[-1] if taken_groups else None,
        groups_standing - len(taken_groups),
        limits.max_offset_deletions_per_run,
        taken_offsets[-1] if taken_offsets else None,
        max(0, partitions_standing - len(taken_offsets)),
    )


def take(settled: Settled, cut: Cutoffs, now: datetime) -> list[Action]:
    """The actions the limits take among these groups' candidates (`cut`: from the whole cluster);
    the candidates they leave are added to `settled.skipped` (LimitReached)."""
    actions = _limit_groups(settled.groups, cut, now, settled.skipped)
    actions.extend(_limit_offsets(settled.offsets, cut, now, settled.skipped))
    return actions


def assemble(
    policy: ConsumerGroupPolicy,
    snapshot: ClusterSnapshot,
    now: datetime,
    totals: PolicyTotals,
    actions: list[Action],
    skipped: list[Skip],
    groups_total: int,
    skipped_count: int | None = None,
) -> Plan:
    """The plan of a policy from its actions and skips over the whole cluster (`snapshot`: its
    identity and warnings; its groups are not read). `skipped_count`: the number of skips when
    `skipped` does not hold them (a fleet audit writes them to a table)."""
    actions.sort(key=lambda a: (a.eligible_since, a.group_id, a.kind.value))
    # (a StrEnum orders by its value: no `.value` lookups, slow for 100k skips)
    skipped.sort(key=lambda s: (s.group_id, s.reason_code, s.partitions))
    summary = PlanSummary(
        groups_total=groups_total,
        groups_matched=totals.groups_matched,
        groups_eligible=totals.groups_eligible,
        offsets_eligible=totals.offsets_eligible,
        groups_planned=sum(1 for a in actions if a.kind is ActionKind.DELETE_GROUP),
        offsets_planned=sum(len(a.partitions) for a in actions if a.kind is ActionKind.DELETE_OFFSETS),
        skipped=len(skipped) if skipped_count is None else skipped_count,
        blast_radius_exceeded=totals.trips(policy),
    )
    warnings = list(policy.warnings())
    if policy.spec.suspend:
        warnings.append("the policy is suspended: the operator does not act on it")
    if not snapshot.offsets_log_available:
        warnings.append(OBSERVED_TIMES_WARNING)
    warnings.extend(snapshot.warnings)
    return Plan(
        policy=policy.ref,
        generated_at=now,
        mode=policy.spec.mode,
        actions=tuple(actions),
        skipped=tuple(skipped),
        summary=summary,
        warnings=tuple(warnings),
        cluster_id=snapshot.cluster_id,
        suspended=policy.spec.suspend,
    )


def decide(policy: ConsumerGroupPolicy, snapshot: ClusterSnapshot, now: datetime) -> Plan:
    """The plan for one policy on its own (see `decide_many.decide_many` when policies overlap)."""
    return finish(evaluate(policy, snapshot, now))


def _skip_group(candidate: GroupDeletionCandidate, reason: SkipReason, detail: str) -> Skip:
    return Skip(candidate.group.group_id, reason, detail, candidate.group.kind)


def _skip_partitions(
    candidate: OffsetDeletionCandidate,
    partitions: tuple[PartitionCandidate, ...],
    reason: SkipReason,
    detail: str,
) -> Skip:
    group = candidate.group
    return Skip(group.group_id, reason, detail, group.kind, tuple(p.partition for p in partitions))


def _apply_blocks(
    evaluation: Evaluation, blocks: OverlapBlocks, skipped: list[Skip]
) -> tuple[list[GroupDeletionCandidate], list[OffsetDeletionCandidate]]:
    groups: list[GroupDeletionCandidate] = []
    offsets: list[OffsetDeletionCandidate] = []
    for candidate in evaluation.group_candidates:
        group_id = candidate.group.group_id
        blocked_by = blocks.groups.get(group_id)
        if blocked_by is None:
            groups.append(candidate)
            continue
        # A simple group that another policy does not let go as a whole may still lose the offsets
        # every selecting policy finds eligible (per-partition clocks: the longest retention wins).
        partitions = candidate.partitions
        if group_id in blocks.whole:
            kept: tuple[PartitionCandidate, ...] = ()
            lost = tuple(p.partition for p in partitions)
        else:
            kept = tuple(p for p in partitions if (group_id, p.partition) not in blocks.partitions)
            lost = tuple(p.partition for p in partitions if p not in kept)
        if kept:
            offsets.append(
                OffsetDeletionCandidate(candidate.group, candidate.rule, candidate.retention, kept)
            )
        group = candidate.group
        skipped.append(Skip(group_id, SkipReason.OVERLAP_BLOCKED, blocked_by, group.kind, lost))
    for offsets_candidate in evaluation.offset_candidates:
        group_id = offsets_candidate.group.group_id
        partitions = offsets_candidate.partitions
        whole = blocks.whole.get(group_id)
        if whole is not None:
            skipped.append(_skip_partitions(offsets_candidate, partitions, SkipReason.OVERLAP_BLOCKED, whole))
            continue
        allowed = tuple(p for p in partitions if (group_id, p.partition) not in blocks.partitions)
        refused = tuple(p for p in partitions if (group_id, p.partition) in blocks.partitions)
        if refused:
            details = "; ".join(sorted({blocks.partitions[(group_id, p.partition)] for p in refused}))
            skipped.append(_skip_partitions(offsets_candidate, refused, SkipReason.OVERLAP_BLOCKED, details))
        if allowed:
            offsets.append(replace(offsets_candidate, partitions=allowed))
    return groups, offsets


def _limit_groups(
    candidates: list[GroupDeletionCandidate], cut: Cutoffs, now: datetime, skipped: list[Skip]
) -> list[Action]:
    """The group deletions up to the cut-off (the limit's oldest, ties by group id); the rest are
    deferred.

    Mirrored on numpy columns for the fleet audit's claimed groups by `fleet/columnar_decide.py`
    (`_groups_taken`: which act; the others' LimitReached skips): a change here must be made
    there too (DESIGN.md, "Fast paths and their oracle")."""
    newest = cut.groups
    actions: list[Action] = []
    deferred: list[GroupDeletionCandidate] = []
    for c in candidates:
        if newest is None or group_key(c) > newest:
            deferred.append(c)
            continue
        actions.append(
            Action(
                kind=ActionKind.DELETE_GROUP,
                group_id=c.group.group_id,
                group_kind=c.group.kind,
                rule=c.rule,
                retention=c.retention,
                reason=c.explain(now),
                eligible_since=c.base.at,
                timestamp_source=c.base.source,
                age=now - c.base.at,
                internal_topics=c.group.internal_topics,
            )
        )
    detail = group_limit_detail(cut)
    skipped.extend(_skip_group(c, SkipReason.LIMIT_REACHED, detail) for c in deferred)
    return actions


def group_limit_detail(cut: Cutoffs) -> str:
    """A deferred group deletion's skip detail (LimitReached)."""
    limit, waiting = cut.group_limit, cut.groups_deferred
    return f"maxGroupDeletionsPerRun {limit} reached; {waiting} group deletions wait for the next run"


def offset_limit_detail(cut: Cutoffs, deferred: int) -> str:
    """The skip detail (LimitReached) of a group's `deferred` partitions."""
    return (
        f"maxOffsetDeletionsPerRun {cut.offset_limit} reached; {deferred} of this group's partitions "
        f"({cut.offsets_deferred} in total) wait for the next run"
    )


def _limit_offsets(
    candidates: list[OffsetDeletionCandidate], cut: Cutoffs, now: datetime, skipped: list[Skip]
) -> list[Action]:
    """The partitions up to the cut-off (the limit's oldest across all groups, ties by group id,
    topic, partition), one action per group; a group's remaining partitions are deferred to a
    later run.

    Mirrored on numpy columns for the fleet audit's claimed groups by `fleet/columnar_decide.py`
    (`split_decide`: a group with no partition up to the cut-off, its LimitReached skip): a
    change here must be made there too (DESIGN.md, "Fast paths and their oracle")."""
    newest = cut.offsets
    actions: list[Action] = []
    for candidate in candidates:
        group_id = candidate.group.group_id
        chosen: list[PartitionCandidate] = []
        rest: list[PartitionCandidate] = []
        for key, p in partition_keys(candidate):
            (rest if newest is None or key > newest else chosen).append(p)
        if rest:
            detail = offset_limit_detail(cut, len(rest))
            skipped.append(_skip_partitions(candidate, tuple(rest), SkipReason.LIMIT_REACHED, detail))
        if not chosen:
            continue
        selected = tuple(chosen)
        latest = max((p.committed_at for p in selected), key=lambda t: t.at)
        actions.append(
            Action(
                kind=ActionKind.DELETE_OFFSETS,
                group_id=group_id,
                group_kind=candidate.group.kind,
                rule=candidate.rule,
                retention=candidate.retention,
                reason=offsets_reason(candidate, selected, now),
                eligible_since=latest.at,
                timestamp_source=latest.source,
                age=now - latest.at,
                partitions=tuple(p.partition for p in selected),
            )
        )
    return actions
