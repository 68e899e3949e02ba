"""`decide_many` over parts of a cluster's groups, with only what is global in one place.

A group's verdicts, its overlap between policies and its blocks depend on that group alone; what
depends on every group of the cluster is small: each policy's counts (its breaker and summary),
the per-run limits (oldest first) and the plan's assembly. So a fleet audit decides where the
groups are, in three steps over any split of a cluster's groups into parts (each group in exactly
one part), and one place (the driver) merges what the steps return:

1. `count_part`: every policy's evaluation of the part -> counts (`PolicyTotals`), the sets of
   policies that select a group together, and the part's oldest candidates per policy as if no
   breaker tripped (`PartKeys`). Merged: the totals decide each breaker (`merge_counts`).
2. `keys_part` (only when a tripped breaker refuses what another policy would delete, see
   `keys_need_breakers`): the oldest candidates again, with the breakers known.
3. `decide_part`: given each policy's limit cut-offs (`cluster_cutoffs`, from the parts' oldest
   candidates: at most `limit` keys per part), the part's actions and every skip. The actions are
   at most the limits over all parts; the skips can be written where they are made.

`assemble_plans` builds the plans from the merged counts, actions and skip counts. `decide_many`
(core/decide_many.py) runs the same functions (core/overlap.py, core/engine.py) on the whole
cluster at once, so the result is the same plan; `decide_in_parts` runs the protocol in one
process (tests).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from groupwarden.core.engine import (
    Cutoffs,
    GroupKey,
    PartitionKey,
    PolicyTotals,
    Settled,
    assemble,
    cutoffs,
    smallest_keys,
    take,
)
from groupwarden.core.overlap import Evaluated, evaluate_many, overlapping_policies, settle_many
from groupwarden.core.plan import Action, Plan, Skip, SkipReason
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.whatif import WhatIfRow


@dataclass
class PartKeys:
    """Per policy: the oldest candidates' keys of a part (at most the limits) and how many
    candidates (groups, partitions) stand after the breaker and the blocks."""

    group_keys: list[list[GroupKey]]
    groups_standing: list[int]
    offset_keys: list[list[PartitionKey]]
    partitions_standing: list[int]

    @classmethod
    def empty(cls, policies: int) -> PartKeys:
        return cls(
            [[] for _ in range(policies)], [0] * policies, [[] for _ in range(policies)], [0] * policies
        )

    @classmethod
    def of(cls, policies: Sequence[ConsumerGroupPolicy], settled: Sequence[Settled]) -> PartKeys:
        keys = cls.empty(len(policies))
        for index, (policy, mine) in enumerate(zip(policies, settled, strict=True)):
            keys.group_keys[index], keys.offset_keys[index] = smallest_keys(mine, policy.spec.limits)
            keys.groups_standing[index] = len(mine.groups)
            keys.partitions_standing[index] = mine.partition_count
        return keys

    def add(self, other: PartKeys) -> None:
        for index in range(len(self.group_keys)):
            self.group_keys[index].extend(other.group_keys[index])
            self.groups_standing[index] += other.groups_standing[index]
            self.offset_keys[index].extend(other.offset_keys[index])
            self.partitions_standing[index] += other.partitions_standing[index]


@dataclass
class PartCounts:
    """Step 1 of a part (or of several, merged)."""

    groups: int
    totals: list[PolicyTotals]
    selector_sets: set[tuple[int, ...]]
    # the oldest candidates as if no breaker tripped (valid unless `keys_need_breakers`)
    keys: PartKeys

    def add(self, other: PartCounts) -> None:
        self.groups += other.groups
        self.totals = [a + b for a, b in zip(self.totals, other.totals, strict=True)]
        self.selector_sets |= other.selector_sets
        self.keys.add(other.keys)


def no_counts(policies: int) -> PartCounts:
    return PartCounts(0, [PolicyTotals()] * policies, set(), PartKeys.empty(policies))


def count_part(
    policies: Sequence[ConsumerGroupPolicy], part: ClusterSnapshot, now: datetime
) -> tuple[Evaluated, PartCounts]:
    evaluated = evaluate_many(policies, part, now)
    totals = [PolicyTotals.of(e) for e in evaluated.evaluations]
    # No breaker trips on empty totals: the blocks of policies that do not refuse everything.
    untripped = settle_many(evaluated, [PolicyTotals()] * len(policies))
    counts = PartCounts(len(part.groups), totals, evaluated.selector_sets(), PartKeys.of(policies, untripped))
    return evaluated, counts


def merge_counts(parts: Iterable[PartCounts], policies: int) -> PartCounts:
    merged = no_counts(policies)
    for part in parts:
        merged.add(part)
    return merged


def tripped(policies: Sequence[ConsumerGroupPolicy], counts: PartCounts) -> list[bool]:
    return [t.trips(p) for p, t in zip(policies, counts.totals, strict=True)]


def keys_need_breakers(policies: Sequence[ConsumerGroupPolicy], counts: PartCounts) -> bool:
    """True when the keys of step 1 may be wrong: a tripped policy selects a group together with
    a policy that did not trip (the tripped one then refuses what the other would delete)."""
    trips = tripped(policies, counts)
    return any(
        any(trips[i] for i in members) and not all(trips[i] for i in members)
        for members in counts.selector_sets
    )


def keys_part(
    policies: Sequence[ConsumerGroupPolicy],
    part: ClusterSnapshot,
    now: datetime,
    totals: Sequence[PolicyTotals],
) -> PartKeys:
    """Step 2 of a part: its oldest candidates with every breaker known (`totals`: the cluster's)."""
    evaluated = evaluate_many(policies, part, now)
    return PartKeys.of(policies, settle_many(evaluated, totals))


def cluster_cutoffs(
    policies: Sequence[ConsumerGroupPolicy], counts: PartCounts, keys: PartKeys | None = None
) -> list[Cutoffs]:
    """Each policy's limit cut-offs over the cluster (`keys`: from step 2 when it ran)."""
    found = counts.keys if keys is None else keys
    trips = tripped(policies, counts)
    result = []
    for index, policy in enumerate(policies):
        if trips[index]:  # a tripped policy keeps no candidate (`settle`)
            result.append(cutoffs(policy.spec.limits, [], 0, [], 0))
            continue
        result.append(
            cutoffs(
                policy.spec.limits,
                found.group_keys[index],
                found.groups_standing[index],
                found.offset_keys[index],
                found.partitions_standing[index],
            )
        )
    return result


@dataclass
class PartDecision:
    """Step 3 of a part: per policy, its actions and its skips (every one of them)."""

    actions: list[list[Action]]
    skips: list[list[Skip]]

    def skips_by_reason(self) -> list[Counter[SkipReason]]:
        return [Counter(s.reason_code for s in mine) for mine in self.skips]


def decide_part(
    policies: Sequence[ConsumerGroupPolicy],
    part: ClusterSnapshot,
    now: datetime,
    totals: Sequence[PolicyTotals],
    cuts: Sequence[Cutoffs],
) -> PartDecision:
    evaluated = evaluate_many(policies, part, now)
    settled = settle_many(evaluated, totals)
    actions = [take(mine, cut, now) for mine, cut in zip(settled, cuts, strict=True)]
    return PartDecision(actions, [mine.skipped for mine in settled])


@dataclass
class PlanParts:
    """What the driver holds per policy of a cluster to assemble its plan."""

    actions: list[Action] = field(default_factory=list)
    skips: list[Skip] = field(default_factory=list)  # empty when the skips are written elsewhere
    skips_by_reason: Counter[SkipReason] = field(default_factory=Counter)


def assemble_plans(
    policies: Sequence[ConsumerGroupPolicy],
    header: ClusterSnapshot,
    now: datetime,
    counts: PartCounts,
    parts: Sequence[PlanParts],
) -> list[Plan]:
    """The plans of a cluster (`header`: its identity and warnings, not its groups)."""
    overlapping = overlapping_policies(len(policies), counts.selector_sets)
    refs = [p.ref for p in policies]
    plans = []
    for index, policy in enumerate(policies):
        mine = parts[index]
        plan = assemble(
            policy,
            header,
            now,
            counts.totals[index],
            list(mine.actions),
            list(mine.skips),
            counts.groups,
            sum(mine.skips_by_reason.values()),
        )
        peers = tuple(sorted(refs[i] for i in overlapping[index] if i != index))
        plans.append(replace(plan, overlapping_policies=peers))
    return plans


def merge_what_if(parts: Iterable[Sequence[WhatIfRow]]) -> list[WhatIfRow]:
    """The what-if rows of a cluster from its parts' rows (every part has the same rows, in the
    same order: policies x rules x retentions). Every count is per group, and each group (and its
    come-backs) belongs to one part, so the counts add up."""
    merged: list[WhatIfRow] | None = None
    for rows in parts:
        if merged is None:
            merged = list(rows)
            continue
        merged = [_add_what_if(a, b) for a, b in zip(merged, rows, strict=True)]
    return merged or []


def _add_what_if(a: WhatIfRow, b: WhatIfRow) -> WhatIfRow:
    kinds = Counter(a.groups_by_kind) + Counter(b.groups_by_kind)
    return WhatIfRow(
        cluster_id=a.cluster_id,
        policy=a.policy,
        rule=a.rule,
        retention=a.retention,
        groups=a.groups + b.groups,
        offsets=a.offsets + b.offsets,
        offsets_in_groups=a.offsets_in_groups + b.offsets_in_groups,
        comeback_groups=a.comeback_groups + b.comeback_groups,
        comebacks=a.comebacks + b.comebacks,
        groups_by_kind=dict(sorted(kinds.items())),
    )


def decide_in_parts(
    policies: Sequence[ConsumerGroupPolicy],
    parts: Sequence[ClusterSnapshot],
    header: ClusterSnapshot,
    now: datetime,
) -> list[Plan]:
    """The whole protocol in one process, keeping every skip: equal to `decide_many` on the
    snapshot whose groups are the parts' groups (in any order)."""
    counted = [count_part(policies, part, now) for part in parts]
    counts = merge_counts((c for _, c in counted), len(policies))
    keys = None
    if keys_need_breakers(policies, counts):
        keys = PartKeys.empty(len(policies))
        for part in parts:
            keys.add(keys_part(policies, part, now, counts.totals))
    cuts = cluster_cutoffs(policies, counts, keys)
    plan_parts = [PlanParts() for _ in policies]
    for part in parts:
        decision = decide_part(policies, part, now, counts.totals, cuts)
        for index, mine in enumerate(plan_parts):
            mine.actions.extend(decision.actions[index])
            mine.skips.extend(decision.skips[index])
            mine.skips_by_reason.update(s.reason_code for s in decision.skips[index])
    return assemble_plans(policies, header, now, counts, plan_parts)
