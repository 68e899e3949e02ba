"""`decide_many`: the one decision every entry point makes (the CLI's `plan`/`apply`, the
operator's cluster pass, the fleet audit's driver over its tasks' parts): one plan per policy for
the same cluster snapshot, the policies that select the same groups merged conservatively
(overlap.py), each plan cut to its policy's limits and assembled by the engine (engine.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from groupwarden.core.engine import PolicyTotals, assemble, cutoffs, smallest_keys, take
from groupwarden.core.overlap import evaluate_many, overlapping_policies, settle_many
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy, PolicyRef
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.verdicts import VerdictCache


def decide_many(
    policies: Sequence[ConsumerGroupPolicy],
    snapshot: ClusterSnapshot,
    now: datetime,
    verdicts: VerdictCache | None = None,
) -> list[Plan]:
    """One plan per policy (same order), all for the same cluster snapshot, merged conservatively.

    With a single policy, or policies selecting disjoint groups, each plan equals `decide(...)` for
    that policy except for `overlapping_policies`. `verdicts`: the cluster's verdicts of earlier
    passes (core/verdicts.py; a fresh one shares verdicts within this call only).

    The steps that depend on one group alone (`evaluate_many`, `settle_many`, `take`) and the global
    ones (totals, `cutoffs`, `assemble`) are the same a fleet audit runs apart (core/parts.py).
    """
    evaluated = evaluate_many(policies, snapshot, now, verdicts)
    totals = [PolicyTotals.of(e) for e in evaluated.evaluations]
    settled = settle_many(evaluated, totals)
    overlapping = overlapping_policies(len(policies), evaluated.selector_sets())
    refs_of = [p.ref for p in policies]
    plans: list[Plan] = []
    for index, (policy, mine) in enumerate(zip(policies, settled, strict=True)):
        limits = policy.spec.limits
        group_keys, offset_keys = smallest_keys(mine, limits)
        cut = cutoffs(limits, group_keys, len(mine.groups), offset_keys, mine.partition_count)
        actions = take(mine, cut, now)
        plan = assemble(policy, snapshot, now, totals[index], actions, mine.skipped, len(snapshot.groups))
        peers = sorted(refs_of[i] for i in overlapping[index] if i != index)
        plans.append(_with_overlaps(plan, tuple(peers)))
    return plans


def _with_overlaps(plan: Plan, overlapping: tuple[PolicyRef, ...]) -> Plan:
    return replace(plan, overlapping_policies=overlapping)
