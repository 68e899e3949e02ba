"""A FakeKafka cluster with groups a policy will delete, and its plan (shared by the audit tests)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import Plan
from groupwarden.core.policy import parse_policy
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind
from groupwarden.deletion_trail import TrailEntry
from groupwarden.testing.fake_kafka import FakeKafka

DAY_MS = 86_400_000


def cluster() -> FakeKafka:
    """`stale-a`, `stale-b`: Empty classic groups (DeleteGroup); `svc`: active, with offsets of a
    topic it no longer reads (DeleteOffsets); `live`: active, untouched."""
    fake = FakeKafka(topics=["t", "old"])
    fake.add_group("stale-a", subscribed=["t"], offsets={("t", 0): 5, ("t", 1): 7})
    fake.leave("stale-a")
    fake.add_group("stale-b", subscribed=["t"], offsets={("t", 0): 9})
    fake.leave("stale-b")
    fake.add_group("svc", subscribed=["t"], offsets={("t", 0): 1, ("old", 0): 11, ("old", 1): 12})
    fake.add_group("live", GroupKind.CONSUMER, subscribed=["t"], offsets={("t", 0): 3})
    fake.advance(3 * DAY_MS)
    return fake


POLICY_DOCUMENT: dict[str, Any] = {
    "apiVersion": "groupwarden.io/v1beta1",
    "kind": "ConsumerGroupPolicy",
    "metadata": {"name": "cleanup", "namespace": "team-a"},
    "spec": {
        "kafka": {"bootstrapServers": "fake:9092"},
        "selector": {"include": ["*"]},
        "rules": {"emptyGroupRetention": "1d", "unsubscribedOffsetRetention": "1d"},
        "mode": "Enforce",
        "limits": {"maxDeletionRatio": 1.0},
    },
}


def plan_for(fake: FakeKafka) -> tuple[ClusterSnapshot, Plan]:
    now = datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)
    snapshot = gather_snapshot(fake, ClusterKnowledge(ObservedTimes()), now)
    return snapshot, decide(parse_policy(POLICY_DOCUMENT), snapshot, now)


class FailingSink:
    """Stores records until `fail_at` (1-based) and raises from then on (a full disk)."""

    def __init__(self, fail_at: int) -> None:
        self.fail_at = fail_at
        self.records: list[dict[str, Any]] = []

    def write(self, entry: TrailEntry) -> None:
        if len(self.records) + 1 >= self.fail_at:
            raise OSError(28, "No space left on device")
        self.records.append(entry.record)
