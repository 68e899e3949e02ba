"""One pass over one Kafka cluster: the unit of work of the operator and of `plan`/`apply`.

One gather for every policy of the cluster (the groups their selectors accept, the offsets log
read once), one `decide_many` over all of them: the cost of a pass grows with the cluster's groups,
not with policies x groups. The Enforce plans are then executed one policy after another; when a
policy deleted something, the next one is decided again on the snapshot without it (what a fresh
gather would see), so two overlapping policies never both delete, or report, the same item
(the loop that does it, and what a failed deletion stops: pass_deletions.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.decide_many import decide_many
from groupwarden.core.deletions import without_deleted
from groupwarden.core.gc_pause import gc_paused
from groupwarden.core.plan import ActionOutcome, Plan
from groupwarden.core.policy import ConsumerGroupPolicy, Mode, PolicyRef
from groupwarden.core.selection import GroupScope
from groupwarden.core.snapshot import ClusterSnapshot
from groupwarden.core.verdicts import VerdictCache


@dataclass(frozen=True)
class ClusterPass:
    """Every policy's plan for one snapshot of one cluster (plans in the order of `policies`)."""

    snapshot: ClusterSnapshot
    policies: tuple[ConsumerGroupPolicy, ...]
    plans: tuple[Plan, ...]
    now: datetime

    def plan_of(self, ref: PolicyRef) -> Plan:
        for policy, plan in zip(self.policies, self.plans, strict=True):
            if policy.ref == ref:
                return plan
        raise KeyError(f"policy {ref} is not part of this pass")

    def after(self, outcomes: Iterable[ActionOutcome]) -> ClusterPass:
        """The pass decided again on the snapshot without what `outcomes` deleted."""
        snapshot = without_deleted(self.snapshot, outcomes)
        if snapshot is self.snapshot:
            return self
        return decide_pass(snapshot, self.policies, self.now)


def scope_of(policies: Iterable[ConsumerGroupPolicy]) -> GroupScope:
    return GroupScope.of(p.spec.selector for p in policies)


def decide_pass(
    snapshot: ClusterSnapshot,
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
    verdicts: VerdictCache | None = None,
) -> ClusterPass:
    plans = tuple(decide_many(policies, snapshot, now, verdicts))
    return ClusterPass(snapshot, tuple(policies), plans, now)


def gather_and_decide(
    gateway: KafkaGateway,
    memory: ClusterKnowledge,
    policies: Sequence[ConsumerGroupPolicy],
    now: datetime,
) -> ClusterPass:
    """Gather once for all `policies` (one cluster) and decide for all of them."""
    snapshot = gather_snapshot(gateway, memory, now, scope_of(policies))
    with gc_paused():  # (like the gather: the plans are many small objects that all live on)
        return decide_pass(snapshot, policies, now, memory.verdicts)


def executable(plan: Plan) -> bool:
    return plan.mode is Mode.ENFORCE and not plan.suspended and bool(plan.actions)
