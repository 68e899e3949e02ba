"""Several policies selecting the same group on one cluster: the conservative merge.

An action on a group happens only if EVERY policy selecting that group allows it:
- the other policy is Enforce and not suspended (DryRun or suspend in any of them blocks deletion),
- its blast-radius breaker did not trip,
- and its own rules make the same item eligible: a DeleteGroup needs the other policy to also find
  the group eligible for deletion; a DeleteOffsets partition needs the other policy to find that
  partition (or the whole group) eligible. So the longest retention wins, and a policy with no
  applicable rule for a group protects it.

Each policy still gets its own plan (its own limits, breaker and summary); blocked items move to its
`skipped` with reason OverlapBlocked naming the policy that blocked them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from groupwarden.core.engine import Evaluation, OverlapBlocks, evaluate, finish
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, PolicyRef
from groupwarden.core.rules import GroupDeletionCandidate, OffsetDeletionCandidate, Verdict
from groupwarden.core.selection import GroupMatcher, PolicyIndex
from groupwarden.core.snapshot import ClusterSnapshot, GroupFacts, TopicPartition


def decide_many(
    policies: Sequence[ConsumerGroupPolicy], snapshot: ClusterSnapshot, now: datetime
) -> list[Plan]:
    """One plan per policy (same order), all for the same cluster snapshot, merged conservatively.

    With a single policy, or policies selecting disjoint groups, each plan equals `decide(...)` for
    that policy except for `overlapping_policies`.
    """
    refs = [p.ref for p in policies]
    if len(set(refs)) != len(refs):
        raise ValueError("decide_many: each policy may appear only once")
    # Each group's id is matched once against all policies (an index of their globs), not once per
    # policy: a cluster pass over many policies costs what its groups cost.
    policy_index = PolicyIndex([GroupMatcher.from_selector(p.spec.selector) for p in policies])
    id_matched: list[list[GroupFacts]] = [[] for _ in policies]
    matching_by_group: dict[str, list[int]] = {}
    for group in snapshot.groups:
        matching = policy_index.matching(group.group_id)
        for i in matching:
            id_matched[i].append(group)
        if len(matching) > 1:
            matching_by_group[group.group_id] = matching
    # Policies with the same rules judge a group the same way: judged once per pass.
    judged: dict[tuple[int, object], Verdict] = {}
    evaluations = [evaluate(p, snapshot, now, id_matched[i], judged) for i, p in enumerate(policies)]
    selectors = _selectors_by_group(evaluations, snapshot, matching_by_group)
    refusals = _Refusals([_Permissions(e) for e in evaluations], selectors)
    overlapping: list[set[PolicyRef]] = [set() for _ in policies]
    for group_selectors in selectors.values():
        for index in group_selectors:
            overlapping[index].update(evaluations[o].policy.ref for o in group_selectors if o != index)
    plans: list[Plan] = []
    for index, evaluation in enumerate(evaluations):
        plan = finish(evaluation, _blocks_for(index, evaluation, selectors, refusals))
        plans.append(_with_overlaps(plan, tuple(sorted(overlapping[index]))))
    return plans


def _selectors_by_group(
    evaluations: list[Evaluation], snapshot: ClusterSnapshot, id_matches: Mapping[str, list[int]]
) -> dict[str, list[int]]:
    """group id -> indexes of the policies that select it (only groups selected by two or more);
    `id_matches` holds the groups whose id two or more policies' globs accept."""
    result: dict[str, list[int]] = {}
    for group in snapshot.groups:
        candidates = id_matches.get(group.group_id)
        if candidates is None:
            continue
        selecting = [i for i in candidates if evaluations[i].matcher.selects(group)]
        if len(selecting) > 1:
            result[group.group_id] = selecting
    return result


class _Permissions:
    """What one policy, on its own, would allow to be deleted."""

    def __init__(self, evaluation: Evaluation) -> None:
        policy = evaluation.policy
        self.ref: PolicyRef = policy.ref
        self.refusal: str | None = None
        if policy.spec.suspend:
            self.refusal = f"policy {self.ref} is suspended"
        elif policy.spec.mode is Mode.DRY_RUN:
            self.refusal = f"policy {self.ref} is in DryRun"
        elif evaluation.blast_radius_exceeded:
            self.refusal = f"policy {self.ref} tripped its blast-radius breaker"
        self.groups = {c.group.group_id for c in evaluation.group_candidates}
        self.partitions = {
            (c.group.group_id, p.partition) for c in evaluation.offset_candidates for p in c.partitions
        }
        self.rules = policy.describe_rules()

    def refuses_group(self, group: GroupFacts) -> str | None:
        if self.refusal is not None:
            return self.refusal
        if group.group_id not in self.groups:
            return f"group is not eligible for deletion under policy {self.ref} ({self.rules})"
        return None

    def refuses_partition(self, group: GroupFacts, partition: TopicPartition) -> str | None:
        if self.refusal is not None:
            return self.refusal
        if group.group_id in self.groups or (group.group_id, partition) in self.partitions:
            return None
        return f"offsets are not eligible under policy {self.ref} ({self.rules})"


class _Refusals:
    """Each selecting policy's refusal of a group or of a partition, asked once per pass (not once
    per asking policy: ten policies over the same groups would otherwise ask 10 x 9 times)."""

    def __init__(self, permissions: list[_Permissions], selectors: dict[str, list[int]]) -> None:
        self._permissions = permissions
        self._selectors = selectors
        self._groups: dict[str, list[tuple[int, str]]] = {}
        self._partitions: dict[tuple[str, TopicPartition], list[tuple[int, str]]] = {}

    def of_group(self, group: GroupFacts) -> list[tuple[int, str]]:
        found = self._groups.get(group.group_id)
        if found is None:
            found = self._groups[group.group_id] = [
                (i, r)
                for i in self._selectors.get(group.group_id, ())
                if (r := self._permissions[i].refuses_group(group)) is not None
            ]
        return found

    def of_partition(self, group: GroupFacts, partition: TopicPartition) -> list[tuple[int, str]]:
        key = (group.group_id, partition)
        found = self._partitions.get(key)
        if found is None:
            found = self._partitions[key] = [
                (i, r)
                for i in self._selectors.get(group.group_id, ())
                if (r := self._permissions[i].refuses_partition(group, partition)) is not None
            ]
        return found


def _blocks_for(
    index: int, evaluation: Evaluation, selectors: dict[str, list[int]], refusals: _Refusals
) -> OverlapBlocks:
    groups: dict[str, str] = {}
    partitions: dict[tuple[str, TopicPartition], str] = {}
    for group_candidate in evaluation.group_candidates:
        group = group_candidate.group
        if group.group_id not in selectors:
            continue  # no other policy selects it
        refused = [r for i, r in refusals.of_group(group) if i != index]
        if refused:
            groups[group.group_id] = "; ".join(refused)
    candidates: list[GroupDeletionCandidate | OffsetDeletionCandidate] = [
        # A group deletion nobody refuses goes as a whole: its partitions need no asking.
        *(c for c in evaluation.group_candidates if c.group.group_id in groups),
        *evaluation.offset_candidates,
    ]
    for candidate in candidates:
        group = candidate.group
        if group.group_id not in selectors:
            continue
        for partition_candidate in candidate.partitions:
            partition = partition_candidate.partition
            refused = [r for i, r in refusals.of_partition(group, partition) if i != index]
            if refused:
                partitions[(group.group_id, partition)] = "; ".join(refused)
    return OverlapBlocks(groups, partitions)


def _with_overlaps(plan: Plan, overlapping: tuple[PolicyRef, ...]) -> Plan:
    return replace(plan, overlapping_policies=overlapping)
