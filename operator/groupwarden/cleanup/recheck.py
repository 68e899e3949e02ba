"""The re-check right before a deletion step: is what the plan decided still true?

Found by the race campaign (bench/race_campaign.py; docs/benchmarks.md, "Race campaign"): between a
run's gather and its DeleteGroups / OffsetDelete requests (about half a second in `apply`, longer in
the operator) a client may commit, or join and leave again. The broker protects only what is live *at the
request* (NON_EMPTY_GROUP, GROUP_SUBSCRIBED_TO_TOPIC); it happily deletes a simple group that has
just committed, the offsets a member has just committed on a topic it does not subscribe to, or
a group whose member came and went. Those commits were lost.

So before each step the step's groups are read again (described by id, without listing the
cluster; the offsets log's tail into the same ledger) and judged again by the same rules at the current
time, then one OffsetFetch confirms that their committed offsets did not move while the log was
read; only the items that are still eligible are requested. A group or partition that changed is
reported `SkippedBecameActive` ("changed since the plan"), one that disappeared `NotFound`; the next
run decides again. An offset deletion is requested whole or not at all. What remains is the time
between that OffsetFetch and the broker executing the request (milliseconds), and a commit of the
very same offsets during the log read: Kafka has no conditional delete, so such a commit can still
be lost (DESIGN.md, safety model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import UTC, datetime

from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.gather import ClusterKnowledge, regather
from groupwarden.core.engine import evaluate
from groupwarden.core.plan import Action, ActionKind, ActionOutcome, Plan, ResultKind, Skip
from groupwarden.core.policy import ConsumerGroupPolicy
from groupwarden.core.selection import GroupScope
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind, GroupState, TopicPartition

CHANGED = "changed since the plan"


class Recheck:
    """Called by the step executor with each step's sub-plan; returns the sub-plan narrowed to
    what is still eligible and the outcomes of what was dropped."""

    def __init__(
        self,
        gateway: KafkaGateway,
        memory: ClusterKnowledge,
        snapshot: ClusterSnapshot,
        policies: Iterable[ConsumerGroupPolicy],
        scope: GroupScope,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._gateway = gateway
        self._memory = memory
        self._snapshot = snapshot
        self._policies = {p.ref: p for p in policies}
        self._scope = scope
        self._clock = clock

    def __call__(self, step: Plan) -> tuple[Plan, tuple[ActionOutcome, ...]]:
        policy = self._policies[step.policy]
        ids = {a.group_id for a in step.actions}
        now = self._clock()
        earlier = [g for g in self._snapshot.groups if g.group_id in ids]
        snapshot = regather(self._gateway, self._memory, now, self._scope, earlier)
        evaluation = evaluate(policy, snapshot, now)
        listed = {g.group_id for g in snapshot.groups if g.state is not GroupState.DEAD}
        groups = {c.group.group_id for c in evaluation.group_candidates}
        offsets = {
            c.group.group_id: frozenset(p.partition for p in c.partitions)
            for c in evaluation.offset_candidates
        }
        keep: list[Action] = []
        dropped: list[ActionOutcome] = []
        for action in step.actions:
            if action.group_id not in listed:
                dropped.append(ActionOutcome(action, ResultKind.NOT_FOUND, f"{CHANGED}: the group is gone"))
            elif _still_eligible(action, groups, offsets):
                keep.append(action)
            else:
                dropped.append(
                    ActionOutcome(
                        action,
                        ResultKind.SKIPPED_BECAME_ACTIVE,
                        f"{CHANGED}: {_why(action, evaluation.skipped)}",
                    )
                )
        # Reading the log's tail takes a while (a consumer per read); a commit acknowledged
        # meanwhile is not in it. One OffsetFetch right before the request closes most of that
        # window: any kept group whose committed offsets moved since the read is dropped too.
        facts = {g.group_id: {o.partition: o.offset for o in g.offsets} for g in snapshot.groups}
        # Share groups keep start offsets in __share_group_state, not committed offsets: their own
        # API, asked FIRST. DescribeShareGroupOffsets can take seconds while a share consumer
        # (re)initialises a group's state (2.4 s measured on Kafka 4.3.1 by the race campaign);
        # asked after the OffsetFetch, it left the other groups' offsets that old at the request.
        share = {a.group_id for a in keep if a.group_kind is GroupKind.SHARE}
        others = [a.group_id for a in keep if a.group_id not in share]
        fetched = dict(self._gateway.fetch_share_offsets(sorted(share))) if share else {}
        fetched.update(self._gateway.fetch_offsets(others) if others else {})
        still: list[Action] = []
        for action in keep:
            answer = fetched.get(action.group_id)
            now_committed = (
                None if answer is None or answer.error else {tp: o.offset for tp, o in answer.offsets.items()}
            )
            if now_committed == facts.get(action.group_id):
                still.append(action)
            else:
                dropped.append(
                    ActionOutcome(
                        action, ResultKind.SKIPPED_BECAME_ACTIVE, f"{CHANGED}: committed offsets moved"
                    )
                )
        return replace(step, actions=tuple(still)), tuple(dropped)


def _why(action: Action, skipped: Iterable[Skip]) -> str:
    for skip in skipped:
        if skip.group_id == action.group_id:
            return f"{skip.reason_code.value} {skip.detail}".strip()
    return "no longer eligible (a commit or a member since the plan)"


def _still_eligible(action: Action, groups: set[str], offsets: dict[str, frozenset[TopicPartition]]) -> bool:
    if action.kind is ActionKind.DELETE_GROUP:
        return action.group_id in groups
    return set(action.partitions) <= offsets.get(action.group_id, frozenset())
