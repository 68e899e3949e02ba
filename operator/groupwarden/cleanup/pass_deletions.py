"""The last step of a cluster pass: its Enforce plans' deletions, one policy after another. The one
loop of `groupwarden apply` and of the operator.

Each policy's plan is decided again on the snapshot without what the policies before it deleted
(cluster_pass.py), then executed through the guarded step executor (steps.py). When a deletion
fails, what failed decides which later deletions of the pass still run:

- the cluster was unavailable (the port's `KafkaUnavailable`: the adapters translate their client
  libraries' exceptions into it): no later deletion of the pass on that cluster, for any policy;
- the write-ahead audit refused a record: no later deletion that writes to the same audit sink
  (sinks are built per connection: a policy with other credentials writes to its own sink, which
  may be fine);
- anything else (a bug of ours): no later deletion of the pass at all.

A policy stopped that way deletes nothing and says why (`PolicyDeletions.stopped`); its plan is
still reported. `PassStops` carries these decisions between the calls of one pass (the operator
gathers once per connection, and one pass may cover several).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from groupwarden.cleanup.cluster_pass import ClusterPass, executable
from groupwarden.cleanup.gateway import KafkaGateway, KafkaUnavailable
from groupwarden.cleanup.recheck import Recheck
from groupwarden.cleanup.steps import (
    ALWAYS_GO,
    AbortReason,
    AuditBlocked,
    RunGuard,
    StepsInterrupted,
    execute_guarded,
)
from groupwarden.core.plan import ActionOutcome, Plan, ResultKind
from groupwarden.core.policy import PolicyRef
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.deletion_trail import AuditRecorder


class StopCause(StrEnum):
    """What failed, which decides what else stops. The values are the visible text."""

    CLUSTER_UNAVAILABLE = "the cluster became unavailable"
    AUDIT_BLOCKED = "the audit trail refused a record"
    UNEXPECTED = "an unexpected error"


@dataclass(frozen=True)
class PassStop:
    """One failed deletion and what it stops: `policy` is the one whose deletion failed, `raised`
    what its execution raised (AuditBlocked, StepsInterrupted, or another exception)."""

    cause: StopCause
    policy: PolicyRef
    raised: BaseException

    @property
    def error(self) -> BaseException:
        """The failure itself (a step's exception, not the StepsInterrupted around it)."""
        if isinstance(self.raised, StepsInterrupted) and self.raised.__cause__ is not None:
            return self.raised.__cause__
        return self.raised


@dataclass
class PassStops:
    """The stops of one pass of one cluster: the whole cluster (unavailable, or a bug), and
    per audit sink."""

    cluster: PassStop | None = None
    sinks: dict[Hashable, PassStop] = field(default_factory=dict)

    def stop_for(self, sink: Hashable) -> PassStop | None:
        return self.cluster or self.sinks.get(sink)

    def add(self, stop: PassStop, sink: Hashable) -> None:
        if stop.cause is StopCause.AUDIT_BLOCKED:
            self.sinks.setdefault(sink, stop)
        elif self.cluster is None:
            self.cluster = stop


@dataclass(frozen=True)
class Enforcement:
    """What one policy's deletions need from its entry point.

    `recorder(snapshot)` gives the write-ahead audit for a plan decided on `snapshot`; `sink`
    names the audit sink it writes to (equal keys: the same sink). `confirm()`, asked once before
    the first deletion, may still call the run off (the operator: the policy no longer exists)."""

    ref: PolicyRef
    recorder: Callable[[ClusterSnapshot], AuditRecorder]
    sink: Hashable
    guard: RunGuard = ALWAYS_GO
    confirm: Callable[[], AbortReason | None] | None = None
    before_step: Callable[[str], None] | None = None
    after_step: Callable[[Sequence[ActionOutcome]], None] | None = None


@dataclass(frozen=True)
class PolicyDeletions:
    """What one policy's part of the pass came to: the plan it ran with (decided without what the
    policies before it deleted), what was done, and why it stopped early, if it did: `aborted` by
    its own guard, or `stopped` by a failed deletion (its own when `stopped.policy` is this
    policy; `outcomes` then hold what its earlier steps did)."""

    plan: Plan
    outcomes: tuple[ActionOutcome, ...] = ()
    aborted: AbortReason | None = None
    stopped: PassStop | None = None

    @property
    def failed_here(self) -> bool:
        return self.stopped is not None and self.stopped.policy == self.plan.policy


def is_unavailable(error: BaseException) -> bool:
    return isinstance(error, KafkaUnavailable)


def cause_of(raised: BaseException) -> StopCause:
    if isinstance(raised, AuditBlocked):
        return StopCause.AUDIT_BLOCKED
    error = raised.__cause__ if isinstance(raised, StepsInterrupted) else raised
    if error is not None and is_unavailable(error):
        return StopCause.CLUSTER_UNAVAILABLE
    return StopCause.UNEXPECTED


def execute_pass(
    cluster_pass: ClusterPass,
    gateway: KafkaGateway,
    enforcements: Sequence[Enforcement],
    *,
    recheck: Recheck | None = None,
    stops: PassStops | None = None,
) -> dict[PolicyRef, PolicyDeletions]:
    """Executes the Enforce plans of `enforcements`, in that order, by the rule above. Returns,
    for every one of them, the plan it ran with and what came of it; never raises for a failed
    deletion (a caller that must stop on a bug finds it in `stopped`). `stops` is shared by the
    calls of one pass."""
    stops = stops if stops is not None else PassStops()
    results: dict[PolicyRef, PolicyDeletions] = {}
    current = cluster_pass
    for enforcement in enforcements:
        plan = current.plan_of(enforcement.ref)
        if not executable(plan):
            results[enforcement.ref] = PolicyDeletions(plan)
            continue
        stopped = stops.stop_for(enforcement.sink)
        if stopped is not None:
            results[enforcement.ref] = PolicyDeletions(plan, stopped=stopped)
            continue
        result = _execute_one(enforcement, plan, current.snapshot, gateway, recheck)
        if result.stopped is not None:
            stops.add(result.stopped, enforcement.sink)
        results[enforcement.ref] = result
        if any(o.result in (ResultKind.DELETED, ResultKind.NOT_FOUND) for o in result.outcomes):
            current = current.after(result.outcomes)
    return results


def _execute_one(
    enforcement: Enforcement,
    plan: Plan,
    snapshot: ClusterSnapshot,
    gateway: KafkaGateway,
    recheck: Recheck | None,
) -> PolicyDeletions:
    try:
        if enforcement.confirm is not None:
            refused = enforcement.confirm()
            if refused is not None:
                return PolicyDeletions(plan, aborted=refused)
        outcomes, aborted = execute_guarded(
            gateway,
            plan,
            enforcement.guard,
            enforcement.before_step,
            enforcement.after_step,
            enforcement.recorder(snapshot),
            recheck,
        )
    except Exception as raised:
        done = raised.outcomes if isinstance(raised, (AuditBlocked, StepsInterrupted)) else ()
        stop = PassStop(cause_of(raised), enforcement.ref, raised)
        return PolicyDeletions(plan, done, stopped=stop)
    return PolicyDeletions(plan, outcomes, aborted)
