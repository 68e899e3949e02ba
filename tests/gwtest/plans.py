"""Plans made in a test the way the operator makes them: gather one group, decide, with a policy of one
group type (the share and streams integration tests share this setup)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from groupwarden.cleanup.gateway import KafkaGateway
from groupwarden.cleanup.gather import TimestampMemory, gather_snapshot
from groupwarden.core.engine import decide
from groupwarden.core.observed import ObservedTimes
from groupwarden.core.plan import Plan
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import ClusterSnapshot


def enforce_policy(
    bootstrap: str, group_type: str, include: Sequence[str], **rules: str
) -> ConsumerGroupPolicy:
    """An Enforce policy for groups of one type (`share`, `streams`, ...), no deletion-ratio limit."""
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1alpha1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": group_type, "namespace": "tests"},
            "spec": {
                "kafka": {"bootstrapServers": bootstrap},
                "selector": {"include": list(include), "groupTypes": [group_type]},
                "rules": rules,
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def snapshot_of(
    gateway: KafkaGateway, group: str, memory: TimestampMemory | None = None, now: datetime | None = None
) -> ClusterSnapshot:
    """The snapshot of one group (a fresh memory unless the caller keeps one across passes)."""
    return gather_snapshot(
        gateway, memory or TimestampMemory(ObservedTimes()), now or datetime.now(UTC), lambda g: g == group
    )


def plan_past_retention(gateway: KafkaGateway, policy: ConsumerGroupPolicy, group: str) -> Plan:
    """The plan for `group` a 1 s retention after the operator first saw it: the first pass starts
    the clock of its state, the second, 1.2 s later, decides."""
    memory = TimestampMemory(ObservedTimes())
    snapshot_of(gateway, group, memory)
    time.sleep(1.2)
    now = datetime.now(UTC)
    return decide(policy, snapshot_of(gateway, group, memory, now), now)
