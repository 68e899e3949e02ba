"""Retention what-if: the same evaluation as the plan, one rule at a time, plus come-back risk."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from groupwarden.core.engine import evaluate
from groupwarden.core.policy import RuleName, parse_policy
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
from groupwarden.core.whatif import PausedGroup, what_if, with_single_rule

NOW = datetime(2026, 11, 22, tzinfo=UTC)


def at(days: float) -> SourcedTime:
    return SourcedTime(NOW - timedelta(days=days), TimestampSource.OFFSETS_LOG)


def snapshot() -> ClusterSnapshot:
    def offset(days: float) -> CommittedOffset:
        return CommittedOffset(TopicPartition("t", 0), 1, at(days))

    groups = (
        GroupFacts(
            "empty-2d", GroupKind.CLASSIC, GroupState.EMPTY, "consumer", 0, frozenset(), at(2), (offset(2),)
        ),
        GroupFacts(
            "empty-10d",
            GroupKind.CLASSIC,
            GroupState.EMPTY,
            "consumer",
            0,
            frozenset(),
            at(10),
            (offset(10),),
        ),
        GroupFacts("simple-3d", GroupKind.SIMPLE, GroupState.EMPTY, "", 0, frozenset(), None, (offset(3),)),
    )
    return ClusterSnapshot(NOW, groups, "c1", offsets_log_available=True)


def policy():  # type: ignore[no-untyped-def]
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "k:9092"},
                "selector": {"include": ["*"], "groupTypes": ["classic", "consumer", "simple"]},
                "rules": {"emptyGroupRetention": "30d", "simpleGroupOffsetRetention": "30d"},
            },
        }
    )


def test_single_rule_copy_keeps_everything_else() -> None:
    original = policy()
    copy = with_single_rule(original, RuleName.EMPTY_GROUP_RETENTION, timedelta(hours=1))
    assert copy.spec.rules.enabled() == {RuleName.EMPTY_GROUP_RETENTION: timedelta(hours=1)}
    assert (copy.ref, copy.spec.selector, copy.spec.limits) == (
        original.ref,
        original.spec.selector,
        original.spec.limits,
    )
    assert original.spec.rules.simple_group_offset_retention == timedelta(days=30)


def test_counts_per_rule_and_retention_and_comeback_risk() -> None:
    retentions = [timedelta(days=1), timedelta(days=7), timedelta(days=30)]
    paused = [PausedGroup("empty-2d", timedelta(days=5)), PausedGroup("other", timedelta(hours=2))]
    rows = what_if([policy()], snapshot(), NOW, retentions, paused)
    table = {(r.rule, r.retention.days): (r.groups, r.offsets_in_groups, r.comeback_groups) for r in rows}
    assert table[(RuleName.EMPTY_GROUP_RETENTION, 1)] == (2, 2, 1)
    assert table[(RuleName.EMPTY_GROUP_RETENTION, 7)] == (1, 1, 0)
    assert table[(RuleName.EMPTY_GROUP_RETENTION, 30)] == (0, 0, 0)
    assert table[(RuleName.SIMPLE_GROUP_OFFSET_RETENTION, 1)][0] == 1
    assert table[(RuleName.SIMPLE_GROUP_OFFSET_RETENTION, 7)][0] == 0
    # the counts are the plan's own evaluation under that single rule
    single = with_single_rule(policy(), RuleName.EMPTY_GROUP_RETENTION, timedelta(days=1))
    assert evaluate(single, snapshot(), NOW).groups_eligible == 2
