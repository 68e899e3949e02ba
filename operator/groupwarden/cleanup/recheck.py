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
reported `SkippedBecameActive` ("changed since the plan", and what changed), one that disappeared
`NotFound`; the next run decides again. An offset deletion is requested whole or not at all.

A planned action only ever shrinks to nothing, never grows: a planned `DeleteOffsets` stays a
`DeleteOffsets` of exactly the planned partitions, kept only while the fresh judgement finds each
of them eligible under the action's own rule (see `_eligible_partitions`). Two ways a group can
become *more* eligible between the plan and the step:

- A simple group whose last fresh partition aged past the retention is now a whole-group
  candidate (simpleGroupOffsetRetention, every partition eligible). The planned partitions are
  among them: the planned `DeleteOffsets` is kept (not widened to a DeleteGroups; the next run
  deletes the group).
- A Stable group whose planned unsubscribed topics' offsets (unsubscribedOffsetRetention, KIP-496)
  were to be deleted became Empty (its members left). It is then judged by emptyGroupRetention
  (KIP-211): an Empty group's offsets expire with the group, from when it became Empty, all or
  nothing; a classic broker keeps them all until then too. The per-topic premise of the plan (the
  live members do not read these topics) no longer holds: an Empty group has no members whose
  subscriptions say so, and the next member (a rolled-back deploy) may read them again. So the
  planned `DeleteOffsets` is dropped, saying that the group became Empty, whether the Empty-group
  clock has just started or the whole group is already eligible; the next run decides (a
  DeleteGroups once the group was Empty for the retention). What remains is the time
between that OffsetFetch and the broker executing the request (milliseconds), and a commit of the
very same offsets during the log read: Kafka has no conditional delete, so such a commit can still
be lost (DESIGN.md, safety model).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.gather import ClusterKnowledge, regather
from groupwarden.core.engine import Evaluation, evaluate
from groupwarden.core.plan import Action, ActionKind, ActionOutcome, Plan, ResultKind, Skip
from groupwarden.core.policy import ConsumerGroupPolicy, RuleName
from groupwarden.core.selection import GroupScope
from groupwarden.core.snapshot import ClusterSnapshot, GroupFacts, GroupKind, GroupState, TopicPartition

CHANGED = "changed since the plan"
BECAME_EMPTY = (
    "the group became Empty since the plan (its members left): an Empty group's offsets go with the "
    f"group under {RuleName.EMPTY_GROUP_RETENTION.value} (KIP-211), not one unsubscribed topic at a "
    "time; the next run decides"
)


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
        # The committed offsets each kept action's group was judged on (its last OffsetFetch).
        self._judged: dict[str, dict[TopicPartition, int] | None] = {}

    def __call__(self, step: Plan) -> tuple[Plan, tuple[ActionOutcome, ...]]:
        policy = self._policies[step.policy]
        ids = {a.group_id for a in step.actions}
        now = self._clock()
        earlier = [g for g in self._snapshot.groups if g.group_id in ids]
        snapshot = regather(self._gateway, self._memory, now, self._scope, earlier)
        evaluation = evaluate(policy, snapshot, now)
        listed = {g.group_id for g in snapshot.groups if g.state is not GroupState.DEAD}
        groups = {c.group.group_id for c in evaluation.group_candidates}
        offsets = _eligible_partitions(evaluation)
        planned = {g.group_id: g for g in earlier}
        fresh = {g.group_id: g for g in snapshot.groups}
        keep: list[Action] = []
        dropped: list[ActionOutcome] = []
        for action in step.actions:
            if action.group_id not in listed:
                dropped.append(ActionOutcome(action, ResultKind.NOT_FOUND, f"{CHANGED}: the group is gone"))
            elif _still_eligible(action, groups, offsets):
                keep.append(action)
            else:
                why = _why(
                    action, evaluation.skipped, planned.get(action.group_id), fresh.get(action.group_id)
                )
                dropped.append(ActionOutcome(action, ResultKind.SKIPPED_BECAME_ACTIVE, f"{CHANGED}: {why}"))
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
                self._judged[action.group_id] = now_committed
            else:
                dropped.append(
                    ActionOutcome(
                        action, ResultKind.SKIPPED_BECAME_ACTIVE, f"{CHANGED}: committed offsets moved"
                    )
                )
        return replace(step, actions=tuple(still)), tuple(dropped)

    def unchanged(self, actions: Sequence[Action]) -> tuple[list[Action], list[ActionOutcome]]:
        """Right before a wave of a step's offset deletions, or its group deletions (after their
        intents are written): one OffsetFetch of the wave's groups.
        A group whose committed offsets moved since the step's re-check is dropped (its intent is
        written: its outcome says it was not requested). So a group's own request follows its own
        last read by one round trip, however many groups the step holds. Share groups' start
        offsets were read by the step's re-check (their own API, slower) and are not read again."""
        ids = [a.group_id for a in actions if a.group_kind is not GroupKind.SHARE]
        fetched = self._gateway.fetch_offsets(ids) if ids else {}
        kept: list[Action] = []
        dropped: list[ActionOutcome] = []
        for action in actions:
            answer = fetched.get(action.group_id)
            if action.group_kind is GroupKind.SHARE:
                kept.append(action)
                continue
            now = (
                None if answer is None or answer.error else {tp: o.offset for tp, o in answer.offsets.items()}
            )
            if action.group_id in self._judged and now == self._judged[action.group_id]:
                kept.append(action)
            else:
                dropped.append(
                    ActionOutcome(
                        action,
                        ResultKind.SKIPPED_BECAME_ACTIVE,
                        f"{CHANGED}: committed offsets moved (after the step's re-check)",
                    )
                )
        return kept, dropped


def _eligible_partitions(evaluation: Evaluation) -> dict[tuple[str, RuleName], frozenset[TopicPartition]]:
    """(group id, rule) -> the partitions the fresh judgement finds eligible under that rule: an
    offset candidate's partitions, and every partition of a simple group that is now eligible as a
    whole (simpleGroupOffsetRetention, `every_partition`). An emptyGroupRetention candidate has
    none: that rule deletes the group's offsets all together or not at all, never per partition."""
    found = {
        (c.group.group_id, c.rule): frozenset(p.partition for p in c.partitions)
        for c in evaluation.offset_candidates
    }
    for c in evaluation.group_candidates:
        if c.every_partition:
            found[(c.group.group_id, c.rule)] = frozenset(p.partition for p in c.partitions)
    return found


def _why(
    action: Action, skipped: Iterable[Skip], planned: GroupFacts | None, fresh: GroupFacts | None
) -> str:
    """Why a planned action is no longer eligible, from what changed between the plan's facts of the
    group (`planned`) and the fresh ones."""
    reasons: list[str] = []
    if planned is not None and fresh is not None:
        commits = _committed_since(action, planned, fresh)
        if commits:
            shown = ", ".join(f"{tp.topic}-{tp.partition}" for tp in commits[:5])
            more = f" and {len(commits) - 5} more" if len(commits) > 5 else ""
            reasons.append(f"a commit since the plan ({shown}{more})")
        if (
            action.rule is RuleName.UNSUBSCRIBED_OFFSET_RETENTION
            and fresh.state is GroupState.EMPTY
            and planned.state is not GroupState.EMPTY
        ):
            reasons.append(BECAME_EMPTY)
    reasons += [
        f"{s.reason_code.value} {s.detail}".strip() for s in skipped if s.group_id == action.group_id
    ][:1]
    return "; ".join(reasons) or "no longer eligible (a commit or a member since the plan)"


def _committed_since(action: Action, planned: GroupFacts, fresh: GroupFacts) -> list[TopicPartition]:
    """The action's partitions (a DeleteGroup's: all of the group's) whose committed offset or
    commit time differs from the plan's facts, or that were committed for the first time since."""
    before = {o.partition: (o.offset, o.committed_at) for o in planned.offsets}
    wanted = set(action.partitions)
    return sorted(
        o.partition
        for o in fresh.offsets
        if (not wanted or o.partition in wanted) and before.get(o.partition) != (o.offset, o.committed_at)
    )


def _still_eligible(
    action: Action, groups: set[str], offsets: dict[tuple[str, RuleName], frozenset[TopicPartition]]
) -> bool:
    """A DeleteGroup: the group is still a whole-group candidate. A DeleteOffsets: every planned
    partition is still eligible under the action's own rule (never widened: the same partitions
    are requested, even when the group as a whole became eligible)."""
    if action.kind is ActionKind.DELETE_GROUP:
        return action.group_id in groups
    return set(action.partitions) <= offsets.get((action.group_id, action.rule), frozenset())
