"""Execute a plan through the gateway: one `ActionOutcome` per action, never an exception per item.

The broker is the last line of safety (KIP-229 / KIP-496): if a consumer came back between the
decision and the call, DeleteGroups answers NON_EMPTY_GROUP and OffsetDelete answers
GROUP_SUBSCRIBED_TO_TOPIC. Those mean "skipped, nothing lost", not failures to retry blindly.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from groupwarden.cleanup.gateway import KafkaError, KafkaGateway, SendGuard
from groupwarden.connectivity.retry import DONE_BY_EARLIER_ATTEMPT
from groupwarden.core.plan import (
    Action,
    ActionKind,
    ActionOutcome,
    PartitionOutcome,
    Plan,
    ResultKind,
)
from groupwarden.core.policy import Mode
from groupwarden.core.snapshot import TopicPartition

# Offset deletions requested together, each wave right after its own last read (`before_wave`):
# a few round trips between a group's read and its request, whatever the size of its step.
OFFSETS_PER_WAVE = 8
BECAME_ACTIVE_ERRORS = frozenset({"NON_EMPTY_GROUP", "GROUP_SUBSCRIBED_TO_TOPIC"})
NOT_FOUND_ERRORS = frozenset({"GROUP_ID_NOT_FOUND", "UNKNOWN_TOPIC_OR_PARTITION"})


class PlanNotExecutable(Exception):
    """The plan must not be executed (DryRun or suspended policy)."""


def classify(error: KafkaError | None) -> ResultKind:
    if error is None or error.name == DONE_BY_EARLIER_ATTEMPT:
        return ResultKind.DELETED
    if error.name in BECAME_ACTIVE_ERRORS:
        return ResultKind.SKIPPED_BECAME_ACTIVE
    if error.name in NOT_FOUND_ERRORS:
        return ResultKind.NOT_FOUND
    if error.unanswered:
        return ResultKind.UNKNOWN
    return ResultKind.FAILED


def _outcome(action: Action, error: KafkaError | None) -> ActionOutcome:
    result = classify(error)
    failed = result in (ResultKind.FAILED, ResultKind.UNKNOWN)
    return ActionOutcome(
        action,
        result,
        str(error) if error else None,
        failed and bool(error and error.retriable),
        kafka_error=error,
    )


def execute_plan(
    gateway: KafkaGateway,
    plan: Plan,
    before_action: Callable[[Action], None] = lambda _action: None,
    before_send: SendGuard | None = None,
    before_actions: Callable[[Sequence[Action]], None] | None = None,
    before_wave: Callable[[Sequence[Action]], tuple[list[Action], list[ActionOutcome]]] | None = None,
    before_request: Callable[[Sequence[Action]], None] | None = None,
) -> list[ActionOutcome]:
    """Runs every action of an Enforce plan: the group deletions in one batched call, then every
    offset deletion, all in flight at once. `before_actions` (default: `before_action` per
    action) is the write-ahead hook (audit), called with each batch before its requests: if it
    raises, nothing of the batch is executed and the exception propagates (nothing is deleted
    unrecorded). `before_send` (the run guard's `stop_reason`) is asked by the gateway before
    every send of a deletion, re-sends through a failover included: a reason stops them.
    `before_wave` (the re-check's last read) is asked, after the batch's intents are written,
    which of the group deletions and then of each wave of OFFSETS_PER_WAVE offset deletions still
    go: the others get its outcome and are not requested. `before_request` is called with what
    each request will hold, after its last read (the failpoint's request site, e2e tests only)."""

    def each(actions: Sequence[Action]) -> None:
        for action in actions:
            before_action(action)

    record = before_actions or each

    if plan.mode is not Mode.ENFORCE or plan.suspended:
        raise PlanNotExecutable(
            f"plan of {plan.policy} is {plan.mode.value}{' (suspended)' if plan.suspended else ''}"
        )
    outcomes: dict[int, ActionOutcome] = {}

    def still_going(wave: list[Action], position: dict[int, int]) -> list[Action]:
        """The wave's actions its last read keeps (the others get their outcome here), the
        request's hook told of them."""
        kept, dropped = before_wave(wave) if before_wave is not None else (wave, [])
        for outcome in dropped:
            outcomes[position[id(outcome.action)]] = outcome
        if kept and before_request is not None:
            before_request(kept)
        return kept

    group_actions = [(i, a) for i, a in enumerate(plan.actions) if a.kind is ActionKind.DELETE_GROUP]
    if group_actions:
        record([a for _, a in group_actions])
        # The intents' write (an fsync, a topic's acks) may take seconds on a busy disk: the groups
        # are read once more after it, so a commit made meanwhile is not deleted with the group
        # (the race campaign measured 4.4 s between the re-check's read and a request without it).
        # A member that joins without committing meets the broker's own NON_EMPTY_GROUP.
        position = {id(a): i for i, a in group_actions}
        kept_groups = still_going([a for _, a in group_actions], position)
        answers = gateway.delete_groups([a.group_id for a in kept_groups], before_send) if kept_groups else {}
        for action in kept_groups:
            i = position[id(action)]
            if action.group_id in answers:
                outcomes[i] = _outcome(action, answers[action.group_id])
            else:
                outcomes[i] = ActionOutcome(
                    action, ResultKind.FAILED, "no answer for this group", retriable=True
                )

    offset_actions = [(i, a) for i, a in enumerate(plan.actions) if a.kind is ActionKind.DELETE_OFFSETS]
    if len({a.group_id for _, a in offset_actions}) < len(offset_actions):
        raise ValueError(f"plan of {plan.policy} deletes offsets of one group twice in a batch")
    if offset_actions:
        record([a for _, a in offset_actions])
        position = {id(a): i for i, a in offset_actions}
        for start in range(0, len(offset_actions), OFFSETS_PER_WAVE):
            wave = [a for _, a in offset_actions[start : start + OFFSETS_PER_WAVE]]
            kept = still_going(wave, position)
            requests = [(a.group_id, list(a.partitions)) for a in kept]
            offset_answers = gateway.delete_offsets_many(requests, before_send) if requests else {}
            for action in kept:
                answer = offset_answers.get(action.group_id)
                if answer is None:
                    outcomes[position[id(action)]] = ActionOutcome(
                        action, ResultKind.FAILED, "no answer for this group", retriable=True
                    )
                else:
                    outcomes[position[id(action)]] = _offsets_outcome(action, *answer)
    return [outcomes[i] for i in range(len(plan.actions))]


def _offsets_outcome(
    action: Action, group_error: KafkaError | None, per_partition: Mapping[TopicPartition, KafkaError | None]
) -> ActionOutcome:
    if group_error is not None:
        return _outcome(action, group_error)
    partitions = tuple(_partition_outcome(p, per_partition) for p in action.partitions)
    retriable = any(e is not None and e.retriable for e in per_partition.values())
    return ActionOutcome.from_partitions(action, partitions, retriable)


def _partition_outcome(
    partition: TopicPartition, answers: Mapping[TopicPartition, KafkaError | None]
) -> PartitionOutcome:
    if partition not in answers:
        return PartitionOutcome(partition, ResultKind.FAILED, "no answer for this partition")
    error = answers[partition]
    return PartitionOutcome(partition, classify(error), str(error) if error else None, error)
