"""A simple group that has offsets keeps no Empty-since clock (cleanup/gather.py `_empty_since`).

Its offsets expire per partition from their own last commit (KIP-211: the broker keeps no group
clock for a group without a protocol type), and the engine reads a simple group's Empty-since only
when it has no offsets (core/rules.py `simple_group_offsets`); the log has no member record for
it, so before, every such group got a first-observed clock: 100k clocks, and an observation store,
on a cluster of CI groups whose log dates everything. Proven here: the gather keeps no clock for
such a group with and without the log, starts one when the group is first seen without offsets
(never dated from before), and the engine's verdicts and plans are the same with or without the
clock for any simple group with offsets (hypothesis)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ActionKind
from groupwarden.core.policy import parse_policy
from groupwarden.core.rules import judge_group
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
from groupwarden.core.verdicts import VerdictCache
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

DAY_MS = 86_400_000


def now_of(fake: FakeKafka) -> datetime:
    return datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)


def by_id(snapshot: ClusterSnapshot) -> dict[str, GroupFacts]:
    return {g.group_id: g for g in snapshot.groups}


@pytest.mark.parametrize("log", [True, False])
def test_a_simple_group_with_offsets_gets_no_empty_since_clock(log: bool) -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", GroupKind.SIMPLE, offsets={("t", 0): 5, ("t", 1): 6})
    fake.add_group("bare", GroupKind.SIMPLE)  # no offsets: its Empty-since is what the engine reads
    fake.add_group("app", offsets={("t", 0): 1})  # Empty classic: the log dates it, else a clock
    fake.offsets_log_unavailable = not log
    memory = ClusterKnowledge(ObservedTimes())
    groups = by_id(gather_snapshot(fake, memory, now_of(fake)))
    assert groups["ci-1"].empty_since is None and len(groups["ci-1"].offsets) == 2
    bare = groups["bare"].empty_since
    assert bare is not None and bare.source is TimestampSource.OBSERVED
    assert set(memory.observed.empty_since) == ({"bare"} if log else {"bare", "app"})


def test_a_clock_left_from_before_is_dropped_and_written_as_a_tombstone() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    memory = ClusterKnowledge(ObservedTimes())
    start = now_of(fake) - timedelta(days=3)
    memory.observed.empty_since["ci-1"] = start  # kept by an earlier version (or its store)
    gather_snapshot(fake, memory, now_of(fake))
    assert memory.observed.empty_since == {} and memory.observed.take_changes() == {"ci-1"}


@pytest.mark.parametrize("log", [True, False])
def test_the_clock_starts_when_the_group_is_first_seen_without_offsets(log: bool) -> None:
    """Never from a first sight while it still had offsets: the later base, which can only delay."""
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    fake.offsets_log_unavailable = not log
    memory = ClusterKnowledge(ObservedTimes())
    rules = parse_policy(_policy("1d"))
    gather_snapshot(fake, memory, now_of(fake))
    fake.advance(2 * DAY_MS)
    fake.delete_offsets("ci-1", [TopicPartition("t", 0)])  # an admin's OffsetDelete, say
    seen_bare = now_of(fake)
    bare = by_id(gather_snapshot(fake, memory, seen_bare))["ci-1"]
    assert bare.offsets == () and bare.empty_since == SourcedTime(seen_bare, TimestampSource.OBSERVED)
    assert decide(rules, gather_snapshot(fake, memory, seen_bare), seen_bare).actions == ()
    fake.advance(DAY_MS)
    plan = decide(rules, gather_snapshot(fake, memory, now_of(fake)), now_of(fake))
    assert [(a.kind, a.group_id) for a in plan.actions] == [(ActionKind.DELETE_GROUP, "ci-1")]
    # A commit again: the clock goes (the group has offsets), the next bare spell starts afresh.
    fake.commit("ci-1", {("t", 0): 9})
    gather_snapshot(fake, memory, now_of(fake))
    assert "ci-1" not in memory.observed.empty_since


def _policy(retention: str, empty: str | None = None) -> dict[str, object]:
    return {
        "apiVersion": "groupwarden.io/v1beta1",
        "kind": "ConsumerGroupPolicy",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "kafka": {"bootstrapServers": "fake:9092"},
            "selector": {"include": ["*"]},
            "rules": {"simpleGroupOffsetRetention": retention, "emptyGroupRetention": empty or retention},
            "mode": "Enforce",
            "limits": {"maxDeletionRatio": 1.0},
        },
    }


NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
_AGES = st.sampled_from([-3600, 0, 1, 3599, 3600, 3601, 86399, 86400, 86401, 7 * 86400]) | st.integers(
    -86400, 40 * 86400
)
_TIMES = _AGES.map(lambda s: NOW - timedelta(seconds=s))
_SOURCED = st.builds(SourcedTime, _TIMES, st.sampled_from(list(TimestampSource)))
_OFFSETS = st.lists(
    st.builds(
        CommittedOffset,
        partition=st.builds(TopicPartition, st.sampled_from(["a", "b"]), st.integers(0, 3)),
        offset=st.integers(0, 100),
        committed_at=st.none() | _SOURCED | _SOURCED,
        expire_at=st.none() | _TIMES,
    ),
    min_size=1,
    max_size=5,
    unique_by=lambda o: o.partition,
).map(tuple)
_SIMPLE_WITH_OFFSETS = st.builds(
    GroupFacts,
    group_id=st.sampled_from(["ci-1", "ci-2", "ci-3", "x"]),
    kind=st.just(GroupKind.SIMPLE),
    state=st.sampled_from([GroupState.EMPTY] * 4 + list(GroupState)),
    protocol_type=st.just(""),
    member_count=st.sampled_from([0, 0, 0, 1]),
    subscribed_topics=st.none(),
    empty_since=_SOURCED,
    offsets=_OFFSETS,
)
_RETENTIONS = st.sampled_from(["1s", "1h", "1d", "7d"])


def _without_clock(group: GroupFacts) -> GroupFacts:
    return dataclasses.replace(group, empty_since=None)


@settings(max_examples=300)
@given(_SIMPLE_WITH_OFFSETS, _RETENTIONS, _RETENTIONS, _AGES)
def test_a_simple_group_with_offsets_is_judged_the_same_with_or_without_the_clock(
    group: GroupFacts, simple: str, empty: str, later_s: int
) -> None:
    rules = parse_policy(_policy(simple, empty)).spec.rules.enabled()
    bare = _without_clock(group)
    assert judge_group(group, rules, NOW) == _candidate_of(judge_group(bare, rules, NOW), group)
    # Kept verdicts too: the cache decides the same at any later time (fewer times to cross is
    # never a stale verdict: the clock is not one the rule reads).
    later = NOW + timedelta(seconds=abs(later_s))
    with_clock, without = VerdictCache(), VerdictCache()
    token = with_clock.rules_token("r")
    assert without.rules_token("r") == token
    with_clock.judge(group, rules, token, NOW)
    without.judge(bare, rules, token, NOW)
    with_clock.end_pass()
    without.end_pass()
    assert with_clock.judge(group, rules, token, later) == _candidate_of(
        without.judge(bare, rules, token, later), group
    )
    assert with_clock.judge(group, rules, token, later) == judge_group(group, rules, later)


@settings(max_examples=200)
@given(st.lists(_SIMPLE_WITH_OFFSETS, max_size=6, unique_by=lambda g: g.group_id), _RETENTIONS, st.booleans())
def test_plans_are_the_same_with_or_without_the_clocks(
    groups: list[GroupFacts], retention: str, log: bool
) -> None:
    policy = parse_policy(_policy(retention))

    def snapshot(facts: list[GroupFacts]) -> ClusterSnapshot:
        return ClusterSnapshot(
            taken_at=NOW, groups=tuple(facts), cluster_id="c", offsets_log_available=log, warnings=()
        )

    with_clocks = decide(policy, snapshot(groups), NOW)
    assert decide(policy, snapshot([_without_clock(g) for g in groups]), NOW) == with_clocks


def _candidate_of(verdict: object, group: GroupFacts) -> object:
    """A verdict on the clock-less facts, re-pointed at the facts with the clock (a candidate
    carries its facts; everything else must be equal)."""
    if verdict is None or not hasattr(verdict, "group"):
        return verdict
    return dataclasses.replace(verdict, group=group)  # type: ignore[type-var]
