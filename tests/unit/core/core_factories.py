"""Hand-built facts for engine tests: small builders, no mocks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import (
    ClusterSnapshot,
    CommittedOffset,
    GroupFacts,
    GroupKind,
    GroupState,
    SourcedTime,
    TimestampSource,
    TopicPartition,
)

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=UTC)
LOG = TimestampSource.OFFSETS_LOG
OBSERVED = TimestampSource.OBSERVED


def ago(days: float = 0, hours: float = 0, minutes: float = 0, seconds: float = 0) -> datetime:
    return NOW - timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def logged(days: float = 0, hours: float = 0, minutes: float = 0, seconds: float = 0) -> SourcedTime:
    """A time read from __consumer_offsets, that long before NOW."""
    return SourcedTime(ago(days, hours, minutes, seconds), LOG)


def observed(days: float = 0, hours: float = 0, minutes: float = 0, seconds: float = 0) -> SourcedTime:
    return SourcedTime(ago(days, hours, minutes, seconds), OBSERVED)


def tp(topic: str, partition: int = 0) -> TopicPartition:
    return TopicPartition(topic, partition)


def offset(
    topic: str, partition: int = 0, committed: SourcedTime | None = None, expire_at: datetime | None = None
) -> CommittedOffset:
    return CommittedOffset(tp(topic, partition), offset=42, committed_at=committed, expire_at=expire_at)


def group(
    group_id: str,
    kind: GroupKind = GroupKind.CLASSIC,
    state: GroupState = GroupState.EMPTY,
    protocol: str | None = None,
    members: int | None = None,
    subscribed: Iterable[str] | None = None,
    empty_since: SourcedTime | None = None,
    offsets: Iterable[CommittedOffset] = (),
    error: str | None = None,
) -> GroupFacts:
    if protocol is None:
        protocol = "" if kind is GroupKind.SIMPLE else "consumer"
    if members is None:
        members = 0 if state is GroupState.EMPTY else 2
    return GroupFacts(
        group_id=group_id,
        kind=kind,
        state=state,
        protocol_type=protocol,
        member_count=members,
        subscribed_topics=None if subscribed is None else frozenset(subscribed),
        empty_since=empty_since,
        offsets=tuple(offsets),
        error=error,
    )


def snapshot(
    *groups: GroupFacts, offsets_log: bool = True, warnings: tuple[str, ...] = ()
) -> ClusterSnapshot:
    return ClusterSnapshot(
        taken_at=NOW,
        groups=tuple(groups),
        cluster_id="test-cluster",
        offsets_log_available=offsets_log,
        warnings=warnings,
    )


def manifest(
    rules: Mapping[str, str] | None = None,
    *,
    name: str = "p",
    namespace: str = "ns",
    include: Iterable[str] = ("*",),
    exclude: Iterable[str] = (),
    group_types: Iterable[str] | None = None,
    mode: str = "Enforce",
    suspend: bool = False,
    limits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    selector: dict[str, Any] = {"include": list(include), "exclude": list(exclude)}
    if group_types is not None:
        selector["groupTypes"] = list(group_types)
    return {
        "apiVersion": "groupwarden.io/v1beta1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "kafka": {"bootstrapServers": "localhost:9092"},
            "selector": selector,
            "rules": dict(rules or {}),
            "mode": mode,
            "suspend": suspend,
            "limits": {"maxDeletionRatio": 1.0, **(limits or {})},
        },
    }


def policy(rules: Mapping[str, str] | None = None, **kwargs: Any) -> ConsumerGroupPolicy:
    """A policy with the breaker open (ratio 1.0) unless `limits` says otherwise."""
    return parse_policy(manifest(rules, **kwargs))
