"""The guarded step executor: the one way a plan is executed, by the operator and by `apply`.

A plan runs in steps (all group deletions in one batched call, then each group's offsets). Before
each step a guard is asked whether to go on (the operator's: the policy still exists, its spec did
not change, this replica still holds the Lease; the CLI's: always). With a recorder, every
action's intent is written before its step runs and its outcome after (write-ahead audit); a
refused record stops the plan's further steps (and what else of the pass it stops is decided by
pass_deletions.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from enum import StrEnum
from typing import Protocol

from groupwarden.cleanup.execute import execute_plan
from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.recheck import Recheck
from groupwarden.core.plan import Action, ActionKind, ActionOutcome, Plan, ResultKind
from groupwarden.deletion_trail import AuditRecorder, AuditWriteError

# Offset deletions per step: one re-check (a describe, a log-tail read, an OffsetFetch of the
# step's groups) and one batch of intents for all of them, then every request in flight at once.
# Bounded so that a step's re-check and its requests stay seconds apart at most
# (docs/benchmarks.md, "`apply`: offset deletions").
OFFSETS_PER_STEP = 100


class AbortReason(StrEnum):
    """Why a run stopped before (or between) its deletions. The values are the visible text."""

    POLICY_DELETED = "the policy was deleted"
    SPEC_CHANGED = "the spec changed"
    LEADERSHIP_LOST = "this replica lost the leader Lease"
    # Asked of the API server before the first deletion: the object is gone ...
    GONE = "the policy no longer exists"
    # ... or the API server could not say (nothing is deleted this time; retried with backoff).
    UNCONFIRMED = "could not confirm that the policy still exists"
    # The process is stopping (SIGTERM, connectivity/stopping.py): the next leader runs the rest.
    STOPPING = "the operator is stopping"


class RunGuard(Protocol):
    def stop_reason(self) -> AbortReason | None:
        """Why the run must stop before its next deletion (None: go on). Called from threads."""
        ...


class AlwaysGo:
    """The guard of a one-shot run from a shell (`groupwarden apply`): nothing can change under it."""

    def stop_reason(self) -> AbortReason | None:
        return None


ALWAYS_GO = AlwaysGo()


class StepsInterrupted(Exception):
    """A deletion step raised (an outage, or a bug of ours): carries the plan and what the earlier
    steps did, so the run's report still counts those deletions. The cause is `__cause__`."""

    def __init__(self, plan: Plan, outcomes: tuple[ActionOutcome, ...]) -> None:
        super().__init__("a deletion step raised")
        self.plan = plan
        self.outcomes = outcomes


class AuditBlocked(Exception):
    """The audit trail refused a record: deletions stopped. Carries what already happened, and
    whether the refused record was an outcome (its step ran) or an intent (its step did not)."""

    def __init__(
        self, message: str, outcomes: tuple[ActionOutcome, ...], *, after_deletion: bool = False
    ) -> None:
        super().__init__(message)
        self.outcomes = outcomes
        self.after_deletion = after_deletion


def execute_guarded(
    gateway: KafkaGateway,
    plan: Plan,
    guard: RunGuard,
    before_step: Callable[[str], None] | None = None,
    after_step: Callable[[Sequence[ActionOutcome]], None] | None = None,
    recorder: AuditRecorder | None = None,
    recheck: Recheck | None = None,
) -> tuple[tuple[ActionOutcome, ...], AbortReason | None]:
    """Executes the plan in steps (all group deletions in one batched call, then each group's
    offsets), asking the guard before each step: a deleted policy, a changed spec or a lost Lease
    stops the deletions, and what already happened is still reported.

    With a recorder, every action's intent is written before its step runs and its outcome after;
    a refused record raises AuditBlocked (with the outcomes so far) and no further step runs. Any
    other exception is raised as StepsInterrupted (the outcomes so far) from the original.

    With a recheck, each step's groups are read and judged again right before its request and
    only what is still eligible is requested (cleanup/recheck.py: a commit or a member between
    the plan and the request must not be deleted)."""
    outcomes: list[ActionOutcome] = []
    try:
        return _execute_steps(gateway, plan, guard, outcomes, before_step, after_step, recorder, recheck)
    except AuditBlocked:
        raise
    except Exception as error:
        raise StepsInterrupted(plan, tuple(outcomes)) from error


def _execute_steps(
    gateway: KafkaGateway,
    plan: Plan,
    guard: RunGuard,
    outcomes: list[ActionOutcome],
    before_step: Callable[[str], None] | None,
    after_step: Callable[[Sequence[ActionOutcome]], None] | None,
    recorder: AuditRecorder | None,
    recheck: Recheck | None = None,
) -> tuple[tuple[ActionOutcome, ...], AbortReason | None]:
    groups = tuple(a for a in plan.actions if a.kind is ActionKind.DELETE_GROUP)
    steps = [groups] if groups else []
    steps += offset_steps([a for a in plan.actions if a.kind is ActionKind.DELETE_OFFSETS])
    for step in steps:
        sub_plan = replace(plan, actions=step)
        if recheck is not None:
            # First what is still true of the step's groups (a commit or a member since the plan
            # drops the item), then the hook and the guard, then the request at once.
            sub_plan, changed = recheck(sub_plan)
            if changed:
                outcomes.extend(changed)
                if after_step is not None:
                    after_step(changed)
            if not sub_plan.actions:
                continue
        if before_step is not None:
            before_step(step_name(sub_plan.actions))
        stop = guard.stop_reason()
        if stop is not None:
            return tuple(outcomes), stop
        try:
            done = execute_plan(
                gateway,
                sub_plan,
                before_send=guard.stop_reason,
                before_actions=recorder.before_actions(sub_plan) if recorder else None,
                before_wave=recheck.unchanged if recheck is not None else None,
                before_request=_request_site(before_step),
            )
        except AuditWriteError as error:
            raise AuditBlocked(
                f"audit trail unavailable, nothing more deleted: {error}", tuple(outcomes)
            ) from error
        except Exception as error:
            _record_interrupted(recorder, sub_plan, error)
            raise
        outcomes.extend(done)
        if after_step is not None:
            after_step(done)
        if recorder is not None:
            try:
                recorder.record_outcomes(sub_plan, done)
            except AuditWriteError as error:
                raise AuditBlocked(
                    f"audit trail unavailable after a deletion, nothing more deleted: {error}",
                    tuple(outcomes),
                    after_deletion=True,
                ) from error
    return tuple(outcomes), None


# `before_step` is also called right before each request of a step, after its last read, with
# the request's actions named after this prefix (the failpoint's second site, e2e tests only).
REQUEST_SITE = "request "


def step_name(actions: Sequence[Action]) -> str:
    return f"{actions[0].kind.value} {', '.join(a.group_id for a in actions)}"


def _request_site(before_step: Callable[[str], None] | None) -> Callable[[Sequence[Action]], None] | None:
    if before_step is None:
        return None
    hook = before_step
    return lambda actions: hook(REQUEST_SITE + step_name(actions))


def offset_steps(actions: Sequence[Action], size: int = OFFSETS_PER_STEP) -> list[tuple[Action, ...]]:
    """The offset deletions in steps of at most `size` groups, in plan order, no group twice in a
    step."""
    steps: list[list[Action]] = []
    for action in actions:
        if not steps or len(steps[-1]) >= size or any(a.group_id == action.group_id for a in steps[-1]):
            steps.append([])
        steps[-1].append(action)
    return [tuple(step) for step in steps]


def _record_interrupted(recorder: AuditRecorder | None, step: Plan, error: Exception) -> None:
    """The step's call raised (e.g. the broker went away while it ran): its intents are written,
    and whether the broker executed them is unknown. Say so in the trail instead of leaving the
    intents without an outcome; restore reads both the same way (possibly deleted). A trail that
    refuses this record changes nothing: the intents already say "possibly deleted"."""
    if recorder is None:
        return
    unknown = [
        ActionOutcome(action, ResultKind.UNKNOWN, f"step interrupted: {type(error).__name__}: {error}", True)
        for action in step.actions
    ]
    with contextlib.suppress(AuditWriteError):
        recorder.record_outcomes(step, unknown)
