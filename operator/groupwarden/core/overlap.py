"""Several policies selecting the same group on one cluster: the conservative merge.

An action on a group happens only if EVERY policy selecting that group allows it:
- the other policy is Enforce and not suspended (DryRun or suspend in any of them blocks deletion),
- its blast-radius breaker did not trip,
- and its own rules make the same item eligible: a DeleteGroup needs the other policy to also find
  the group eligible for deletion; a DeleteOffsets partition needs the other policy to find that
  partition (or the whole group) eligible. So the longest retention wins, and a policy with no
  applicable rule for a group protects it.

Each policy still gets its own plan (its own limits, breaker and summary); blocked items move to its
`skipped` with reason OverlapBlocked naming the policy that blocked them. Here: each policy's
evaluation of the groups and which groups several policies select (`evaluate_many`), and the
breakers and overlap blocks on them (`settle_many`); `decide_many` (decide_many.py) runs both and
assembles the plans.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from groupwarden.core.engine import Evaluation, OverlapBlocks, PolicyTotals, Settled, evaluate, settle
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, PolicyRef
from groupwarden.core.rules import GroupDeletionCandidate, OffsetDeletionCandidate
from groupwarden.core.selection import GroupMatcher, PolicyIndex
from groupwarden.core.snapshot import ClusterSnapshot, GroupFacts, TopicPartition
from groupwarden.core.verdicts import VerdictCache


@dataclass(frozen=True)
class Evaluated:
    """Each policy's evaluation of the same groups, and which of them two or more policies select."""

    evaluations: list[Evaluation]
    # group id -> indexes of the policies that select it (only groups selected by two or more)
    selectors: dict[str, list[int]]

    def selector_sets(self) -> set[tuple[int, ...]]:
        return {tuple(s) for s in self.selectors.values()}


def evaluate_many(
    policies: Sequence[ConsumerGroupPolicy],
    snapshot: ClusterSnapshot,
    now: datetime,
    verdicts: VerdictCache | None = None,
) -> Evaluated:
    """Every policy's `evaluate` of the snapshot's groups (each group's verdicts depend on that
    group alone: any part of a cluster's groups can be evaluated on its own)."""
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
    # Policies with the same rules judge a group the same way: judged once per pass (and not again
    # in a later pass while the group's facts and the verdict's time window are unchanged).
    memory = verdicts if verdicts is not None else VerdictCache()
    evaluations = [evaluate(p, snapshot, now, id_matched[i], memory) for i, p in enumerate(policies)]
    memory.end_pass()
    return Evaluated(evaluations, _selectors_by_group(evaluations, snapshot, matching_by_group))


def settle_many(evaluated: Evaluated, totals: Sequence[PolicyTotals]) -> list[Settled]:
    """Each policy's breaker and overlap blocks on the evaluated groups. `totals`: each policy's
    counts over the whole cluster (its breaker, and so its refusal of what other policies want,
    is the cluster's)."""
    evaluations = evaluated.evaluations
    tripped = [t.trips(e.policy) for e, t in zip(evaluations, totals, strict=True)]
    selectors = evaluated.selectors
    refusals = _Refusals([_Permissions(e, tripped[i]) for i, e in enumerate(evaluations)], selectors)
    return [
        settle(e, None if tripped[i] else _blocks_for(i, e, selectors, refusals), totals[i])
        for i, e in enumerate(evaluations)
    ]


def overlapping_policies(count: int, selector_sets: Iterable[tuple[int, ...]]) -> list[set[int]]:
    """Which policies each one overlaps, from the distinct sets of policies selecting a group (a
    handful), not per group and pair of policies."""
    overlapping: list[set[int]] = [set() for _ in range(count)]
    for members in selector_sets:
        for index in members:
            overlapping[index].update(members)
    return overlapping


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
        # The ids already matched (PolicyIndex): only the kind is left to check.
        selecting = [i for i in candidates if group.kind in evaluations[i].matcher.kinds]
        if len(selecting) > 1:
            result[group.group_id] = selecting
    return result


class _Permissions:
    """What one policy, on its own, would allow to be deleted."""

    def __init__(self, evaluation: Evaluation, tripped: bool) -> None:
        policy = evaluation.policy
        self.ref: PolicyRef = policy.ref
        self.refusal: str | None = None
        if policy.spec.suspend:
            self.refusal = f"policy {self.ref} is suspended"
        elif policy.spec.mode is Mode.DRY_RUN:
            self.refusal = f"policy {self.ref} is in DryRun"
        elif tripped:
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


# A skip names at most this many refusing policies, then how many more: with 50 policies on the
# same groups, listing all of them in every skip would grow the plans with policies^2 x groups.
REFUSALS_NAMED = 3


def _explain(refusals: list[tuple[int, str]], index: int) -> str | None:
    """The refusals of every policy but `index`, as one explanation (None: nobody else refuses)."""
    others = [r for i, r in refusals if i != index]
    if not others:
        return None
    named = "; ".join(others[:REFUSALS_NAMED])
    more = len(others) - REFUSALS_NAMED
    return f"{named} (and {more} more policies)" if more > 0 else named


_UNKNOWN = object()


class _Refusals:
    """Each selecting policy's refusal of a group or of a partition, asked once per pass (not once
    per asking policy), and explanations shared by every asking policy they read the same for."""

    def __init__(self, permissions: list[_Permissions], selectors: dict[str, list[int]]) -> None:
        self._permissions = permissions
        self._selectors = selectors
        self._groups: dict[str, list[tuple[int, str]]] = {}
        self._policy_level: dict[tuple[int, ...], list[tuple[int, str]]] = {}
        self._partitions: dict[tuple[str, TopicPartition], list[tuple[int, str]]] = {}
        self._texts: dict[tuple[int, tuple[int, ...], int], str | None] = {}
        self._refusers: dict[int, frozenset[int]] = {}
        # Texts of the lists kept per set of selecting policies (`policy_level`), per asking policy:
        # a handful of lists asked for every group they cover (50 DryRun policies over 10k
        # groups: 10^6 questions, 2,500 answers).
        self._shared: dict[tuple[int, int], str | None] = {}
        self._shared_lists: set[int] = set()

    def explain(self, refusals: list[tuple[int, str]], index: int) -> str | None:
        shared = id(refusals) in self._shared_lists
        if shared:
            known = self._shared.get((id(refusals), index), _UNKNOWN)
            if known is not _UNKNOWN:
                return known  # type: ignore[return-value]
        text = self._explain_anew(refusals, index)
        if shared:
            self._shared[(id(refusals), index)] = text
        return text

    def _explain_anew(self, refusals: list[tuple[int, str]], index: int) -> str | None:
        # The text depends only on which policies it names and how many more there are: shared,
        # e.g. by every DryRun policy of the pass, instead of one string per asking policy.
        refusers = self._refusers.get(id(refusals))
        if refusers is None:
            refusers = self._refusers[id(refusals)] = frozenset(i for i, _ in refusals)
        shown = tuple(itertools.islice((i for i, _ in refusals if i != index), REFUSALS_NAMED))
        key = (id(refusals), shown, len(refusals) - (index in refusers))
        if key not in self._texts:
            self._texts[key] = _explain(refusals, index)
        return self._texts[key]

    def policy_level(self, group_id: str) -> list[tuple[int, str]]:
        """The selecting policies that refuse everything (DryRun, suspended, breaker tripped): the
        same for every group the same policies select, so kept once per set of policies."""
        selecting = tuple(self._selectors.get(group_id, ()))
        found = self._policy_level.get(selecting)
        if found is None:
            found = self._policy_level[selecting] = [
                (i, refusal) for i in selecting if (refusal := self._permissions[i].refusal) is not None
            ]
            self._shared_lists.add(id(found))
        return found

    def of_group(self, group: GroupFacts) -> list[tuple[int, str]]:
        found = self._groups.get(group.group_id)
        if found is None:
            selecting = self._selectors.get(group.group_id, ())
            level = self.policy_level(group.group_id)
            if len(level) == len(selecting):
                # Every selecting policy refuses everything: the same refusals as `level` (a
                # policy-level refusal answers every group question), and the same shared list.
                found = level
            else:
                found = [
                    (i, r) for i in selecting if (r := self._permissions[i].refuses_group(group)) is not None
                ]
            self._groups[group.group_id] = found
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
    whole: dict[str, str] = {}
    candidates: list[GroupDeletionCandidate | OffsetDeletionCandidate] = [
        *evaluation.group_candidates,
        *evaluation.offset_candidates,
    ]
    for candidate in candidates:
        group = candidate.group
        group_id = group.group_id
        if group_id not in selectors:
            continue  # no other policy selects it
        # A DryRun / suspended / tripped policy refuses the group and every partition of it.
        everything = refusals.explain(refusals.policy_level(group_id), index)
        if everything is not None:
            whole[group_id] = everything
            if isinstance(candidate, GroupDeletionCandidate):
                groups[group_id] = refusals.explain(refusals.of_group(group), index) or everything
            continue
        if isinstance(candidate, GroupDeletionCandidate):
            refused = refusals.explain(refusals.of_group(group), index)
            if refused is None:
                continue  # the group goes as a whole: its partitions need no asking
            groups[group_id] = refused
        for partition_candidate in candidate.partitions:
            partition = partition_candidate.partition
            explained = refusals.explain(refusals.of_partition(group, partition), index)
            if explained is not None:
                partitions[(group_id, partition)] = explained
    return OverlapBlocks(groups, partitions, whole)
