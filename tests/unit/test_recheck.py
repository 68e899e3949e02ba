"""The re-check before each deletion step (cleanup/recheck.py), on the in-memory FakeKafka.

The race campaign (bench/race_campaign.py) found on the real broker that a commit, or a member that
came and went, between the plan and the request was deleted; these pin down the re-check's rules
(the real-broker regressions are tests/integration/test_race_recheck.py).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from groupwarden.cleanup.cluster_pass import gather_and_decide, scope_of
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.cleanup.recheck import BECAME_EMPTY, CHANGED, Recheck
from groupwarden.cleanup.steps import ALWAYS_GO, execute_guarded
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ActionKind, ResultKind
from groupwarden.core.policy import ConsumerGroupPolicy, GroupType, parse_policy
from groupwarden.core.snapshot import GroupKind, TopicPartition
from groupwarden.testing.fake_kafka import FakeKafka

HOUR_MS = 3_600_000


def policy(group_types: tuple[str, ...] = ("classic", "consumer", "simple")) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": {"include": ["*"], "groupTypes": list(group_types)},
                "rules": {
                    "emptyGroupRetention": "1h",
                    "unsubscribedOffsetRetention": "1h",
                    "simpleGroupOffsetRetention": "1h",
                },
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def clock_of(fake: FakeKafka) -> datetime:
    return datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)


def cluster() -> FakeKafka:
    fake = FakeKafka(topics=["live", "dropped"])
    fake.add_group("simple", GroupKind.SIMPLE, offsets={("live", 0): 5})
    fake.add_group("left", offsets={("live", 0): 7})
    fake.add_group("svc", offsets={("live", 0): 1, ("dropped", 0): 2})
    fake.join("svc", ["live"])
    fake.advance(2 * HOUR_MS)
    return fake


def plan_and_recheck(fake: FakeKafka):  # type: ignore[no-untyped-def]
    policies = [policy()]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    kinds = {(a.kind, a.group_id) for a in plan.actions}
    assert kinds == {
        (ActionKind.DELETE_GROUP, "simple"),
        (ActionKind.DELETE_GROUP, "left"),
        (ActionKind.DELETE_OFFSETS, "svc"),
    }
    recheck = Recheck(
        fake, memory, cluster_pass.snapshot, policies, scope_of(policies), lambda: clock_of(fake)
    )
    return plan, recheck


def results(outcomes):  # type: ignore[no-untyped-def]
    return {o.action.group_id: (o.result, o.error) for o in outcomes}


def test_unchanged_groups_are_deleted_after_the_recheck() -> None:
    fake = cluster()
    plan, recheck = plan_and_recheck(fake)
    outcomes, aborted = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    assert aborted is None
    assert {g: r for g, (r, _) in results(outcomes).items()} == dict.fromkeys(
        ("simple", "left", "svc"), ResultKind.DELETED
    )
    assert set(fake.groups) == {"svc"} and set(fake.groups["svc"].offsets) == {TopicPartition("live", 0)}
    # The re-check describes by id: one listing for the whole run.
    assert fake.calls["list_groups"] == 1


def test_a_commit_after_the_plan_keeps_the_group_and_its_offsets() -> None:
    fake = cluster()
    plan, recheck = plan_and_recheck(fake)
    fake.advance(1000)
    fake.commit("simple", {("live", 0): 6})  # a standalone consumer committed again
    fake.commit("svc", {("dropped", 0): 3})  # the service committed on the topic it dropped
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    found = results(outcomes)
    assert found["left"] == (ResultKind.DELETED, None)
    for group in ("simple", "svc"):
        result, error = found[group]
        assert result is ResultKind.SKIPPED_BECAME_ACTIVE and error is not None and error.startswith(CHANGED)
    assert fake.groups["simple"].offsets[TopicPartition("live", 0)].offset == 6
    assert fake.groups["svc"].offsets[TopicPartition("dropped", 0)].offset == 3
    assert fake.calls["delete_offsets"] == 0


def test_a_member_that_came_and_went_since_the_plan_keeps_the_group() -> None:
    fake = cluster()
    plan, recheck = plan_and_recheck(fake)
    fake.join("left", ["live"])
    fake.advance(500)
    fake.leave("left")  # Empty again, but only since now
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    result, error = results(outcomes)["left"]
    assert result is ResultKind.SKIPPED_BECAME_ACTIVE and error and error.startswith(CHANGED)
    assert "left" in fake.groups


def test_a_commit_the_log_read_missed_is_caught_by_the_last_offset_fetch() -> None:
    fake = cluster()
    plan, recheck = plan_and_recheck(fake)
    # The commit lands after the re-check read the log's tail, before its OffsetFetch.
    fake.before("fetch_offsets", lambda f: f.commit("simple", {("live", 0): 9}))
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    result, error = results(outcomes)["simple"]
    assert result is ResultKind.SKIPPED_BECAME_ACTIVE and error == f"{CHANGED}: committed offsets moved"
    assert fake.groups["simple"].offsets[TopicPartition("live", 0)].offset == 9


def test_a_group_deleted_meanwhile_is_not_found_and_nothing_is_requested() -> None:
    fake = cluster()
    plan, recheck = plan_and_recheck(fake)
    fake.delete_groups(["left"])  # someone else (another tool, a broker expiry) removed it
    calls = fake.calls["delete_groups"]
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    assert results(outcomes)["left"][0] is ResultKind.NOT_FOUND
    assert fake.calls["delete_groups"] == calls + 1  # only `simple` was requested


def test_the_offset_fetch_is_the_last_read_before_a_step_with_share_groups() -> None:
    """Found by the race campaign with share groups as clients: DescribeShareGroupOffsets can take
    seconds on the real broker while a share consumer (re)initialises a group's state (2.4 s
    measured on Kafka 4.3.1). Asked after the OffsetFetch, it left the other groups' committed
    offsets that old at the request: a commit made meanwhile would have been deleted."""
    policies = [policy(tuple(t.value for t in GroupType))]
    fake = FakeKafka(topics=["live"])
    fake.add_group("left", offsets={("live", 0): 7})
    fake.add_group("queue", GroupKind.SHARE, offsets={("live", 0): 3})
    memory = ClusterKnowledge(ObservedTimes())
    gather_and_decide(fake, memory, policies, clock_of(fake))  # the share start offsets' first observation
    fake.advance(2 * HOUR_MS)
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    assert {(a.kind, a.group_id) for a in plan.actions} == {
        (ActionKind.DELETE_GROUP, "left"),
        (ActionKind.DELETE_GROUP, "queue"),
    }
    recheck = Recheck(
        fake, memory, cluster_pass.snapshot, policies, scope_of(policies), lambda: clock_of(fake)
    )
    share_fetches: list[int] = []

    def slow_share_fetch(f: FakeKafka) -> None:
        share_fetches.append(1)
        if len(share_fetches) == 2:  # the re-check's own fetch (the first is its re-gather's)
            f.commit("left", {("live", 0): 8})  # lands while the slow share fetch runs

    fake.before("fetch_share_offsets", slow_share_fetch, once=False)
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    found = results(outcomes)
    assert found["queue"] == (ResultKind.DELETED, None)
    assert found["left"] == (ResultKind.SKIPPED_BECAME_ACTIVE, f"{CHANGED}: committed offsets moved")
    assert fake.groups["left"].offsets[TopicPartition("live", 0)].offset == 8


def decided(fake: FakeKafka, policies: list[ConsumerGroupPolicy]):  # type: ignore[no-untyped-def]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    recheck = Recheck(
        fake, memory, cluster_pass.snapshot, policies, scope_of(policies), lambda: clock_of(fake)
    )
    return plan, recheck


def simple_group_with_one_fresh_partition() -> FakeKafka:
    """A simple group: `live-0` committed 2 h before the plan (eligible), `live-1` 30 min before
    (not yet): the plan deletes the offsets of `live-0` only."""
    fake = FakeKafka(topics=["live"])
    fake.add_group("standalone", GroupKind.SIMPLE, offsets={("live", 0): 5})
    fake.advance(90 * 60_000)
    fake.commit("standalone", {("live", 1): 8})
    fake.advance(30 * 60_000)
    return fake


def test_a_simple_group_that_became_eligible_as_a_whole_still_loses_only_the_planned_partitions() -> None:
    """Its last fresh partition aged past the retention between the plan and the step, so the
    fresh judgement makes the group a whole-group candidate (DeleteGroup). Nothing was committed:
    the planned partitions are still eligible and are deleted, and only they (never widened to
    the group or to `live-1`)."""
    fake = simple_group_with_one_fresh_partition()
    plan, recheck = decided(fake, [policy()])
    [action] = plan.actions
    assert (action.kind, action.partitions) == (ActionKind.DELETE_OFFSETS, (TopicPartition("live", 0),))
    fake.advance(HOUR_MS)  # live-1 is now 1.5 h old: every partition is eligible
    outcomes, aborted = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    assert aborted is None
    [outcome] = outcomes
    assert (outcome.result, outcome.error) == (ResultKind.DELETED, None)
    assert outcome.action == action
    assert fake.calls["delete_groups"] == 0 and fake.calls["delete_offsets"] == 1
    assert set(fake.groups["standalone"].offsets) == {TopicPartition("live", 1)}


def test_a_commit_on_a_planned_partition_keeps_it_even_when_others_became_eligible() -> None:
    """The safety side of the case above: the planned partition was committed again, another one
    aged past the retention meanwhile; the planned one is kept and the other is not added."""
    fake = simple_group_with_one_fresh_partition()
    plan, recheck = decided(fake, [policy()])
    fake.advance(HOUR_MS)
    fake.commit("standalone", {("live", 0): 6})
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    [outcome] = outcomes
    assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE
    assert outcome.error == f"{CHANGED}: a commit since the plan (live-0)"
    assert fake.calls["delete_offsets"] == 0
    assert {tp: o.offset for tp, o in fake.groups["standalone"].offsets.items()} == {
        TopicPartition("live", 0): 6,
        TopicPartition("live", 1): 8,
    }


@pytest.mark.parametrize("kind", [GroupKind.CLASSIC, GroupKind.CONSUMER])
@pytest.mark.parametrize("empty_for_ms", [0, 2 * HOUR_MS], ids=["clock-just-started", "group-eligible"])
def test_a_stable_group_that_became_empty_keeps_its_unsubscribed_offsets(
    kind: GroupKind, empty_for_ms: int
) -> None:
    """The plan deletes the offsets of `dropped`, a topic the Stable service no longer reads
    (unsubscribedOffsetRetention); then every member leaves. An Empty group is judged by
    emptyGroupRetention (KIP-211): its offsets go with the group, all or nothing, from when it
    became Empty. Whether that clock has just started or the whole group is already eligible, the
    planned DeleteOffsets is dropped, saying why (not "a commit or a member"), and never turned
    into a DeleteGroup: the next run decides."""
    fake = FakeKafka(topics=["live", "dropped"])
    fake.add_group("svc", kind, offsets={("live", 0): 1, ("dropped", 0): 2}, subscribed=["live"])
    fake.advance(2 * HOUR_MS)
    plan, recheck = decided(fake, [policy()])
    [action] = plan.actions
    assert (action.kind, action.partitions) == (ActionKind.DELETE_OFFSETS, (TopicPartition("dropped", 0),))
    fake.advance(1000)
    fake.leave("svc")  # a deploy (or a shutdown): Empty since now, nothing committed
    fake.advance(empty_for_ms)
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    [outcome] = outcomes
    assert outcome.result is ResultKind.SKIPPED_BECAME_ACTIVE
    assert outcome.error == f"{CHANGED}: {BECAME_EMPTY}"
    assert fake.calls["delete_offsets"] == 0 and fake.calls["delete_groups"] == 0
    assert {tp: o.offset for tp, o in fake.groups["svc"].offsets.items()} == {
        TopicPartition("live", 0): 1,
        TopicPartition("dropped", 0): 2,
    }
    if empty_for_ms:  # the next run deletes the group as a whole, under its own rule
        plan, _ = decided(fake, [policy()])
        assert [(a.kind, a.group_id) for a in plan.actions] == [(ActionKind.DELETE_GROUP, "svc")]
