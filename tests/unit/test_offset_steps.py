"""Offset deletions in steps of many groups (cleanup/steps.py, cleanup/execute.py): one re-check
and one batch of intents per step, every request after every intent of its step, and a step
bounded in size; what the broker refuses or the re-check drops stays per group."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from groupwarden.cleanup.cluster_pass import gather_and_decide, scope_of
from groupwarden.cleanup.execute import execute_plan
from groupwarden.cleanup.gather import ClusterKnowledge
from groupwarden.cleanup.recheck import Recheck
from groupwarden.cleanup.steps import ALWAYS_GO, AuditBlocked, execute_guarded, offset_steps
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import Action, ActionKind, ActionOutcome, Plan, ResultKind
from groupwarden.core.policy import ConsumerGroupPolicy, RuleName, parse_policy
from groupwarden.core.snapshot import GroupKind, TimestampSource, TopicPartition
from groupwarden.deletion_trail import AuditRecorder, MemorySink, TrailEntry
from groupwarden.testing.audit_keys import fixed_signer
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

HOUR_MS = 3_600_000


def policy() -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": {"include": ["svc-*"]},
                "rules": {"simpleGroupOffsetRetention": "1h"},
                "mode": "Enforce",
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def services(count: int) -> FakeKafka:
    """`count` simple groups, each with an old partition (past the retention) and a fresh one: a
    plan of `count` DeleteOffsets actions."""
    fake = FakeKafka(topics=["old", "new"])
    for i in range(count):
        fake.add_group(f"svc-{i:04d}", GroupKind.SIMPLE, offsets={("old", 0): i + 1})
    fake.advance(2 * HOUR_MS)
    for i in range(count):
        fake.commit(f"svc-{i:04d}", {("new", 0): 7})
    return fake


def clock_of(fake: FakeKafka) -> datetime:
    return datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)


class Ordered:
    """A sink that notes, per record, whether the fake had already deleted the group's offsets."""

    def __init__(self, fake: FakeKafka) -> None:
        self.fake = fake
        self.seen: list[tuple[str, str, bool]] = []

    def write(self, entry: TrailEntry) -> None:
        group = entry.record["group"]
        gone = TopicPartition("old", 0) not in self.fake.fetch_offsets([group])[group].offsets
        self.seen.append((entry.record["type"], group, gone))


def offsets_action(group: str) -> Action:
    now = datetime(2026, 12, 1, tzinfo=UTC)
    return Action(
        ActionKind.DELETE_OFFSETS,
        group,
        GroupKind.SIMPLE,
        RuleName.SIMPLE_GROUP_OFFSET_RETENTION,
        timedelta(hours=1),
        "test",
        now,
        TimestampSource.OFFSETS_LOG,
        timedelta(hours=2),
        (TopicPartition("t", 0),),
    )


def test_a_step_holds_at_most_its_size_and_never_one_group_twice() -> None:
    actions = [offsets_action(f"g{i}") for i in range(250)]
    steps = offset_steps(actions, 100)
    assert [len(s) for s in steps] == [100, 100, 50]
    assert [a for s in steps for a in s] == actions  # plan order
    twice = [actions[0], actions[1], actions[0]]
    assert [len(s) for s in offset_steps(twice, 100)] == [2, 1]


def test_many_groups_offsets_go_in_few_steps_every_intent_before_every_request() -> None:
    fake = services(250)
    policies = [policy()]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    assert [a.kind for a in plan.actions] == [ActionKind.DELETE_OFFSETS] * 250
    recheck = Recheck(
        fake, memory, cluster_pass.snapshot, policies, scope_of(policies), lambda: clock_of(fake)
    )
    probe, memory_sink = Ordered(fake), MemorySink()
    recorder = AuditRecorder(
        [memory_sink, probe], cluster_pass.snapshot, ["fake:9092"], signer=fixed_signer()
    )
    logs_before = fake.calls["read_offsets_log"]
    outcomes, stop = execute_guarded(fake, plan, ALWAYS_GO, recorder=recorder, recheck=recheck)
    assert stop is None and [o.result for o in outcomes] == [ResultKind.DELETED] * 250
    # Three steps (100, 100, 50): three re-checks, not 250.
    assert fake.calls["read_offsets_log"] - logs_before == 3
    assert fake.calls["delete_offsets"] == 250
    # Write-ahead per step: every intent of a step was written while its group still had the
    # offsets, every outcome after.
    intents = [(g, gone) for kind, g, gone in probe.seen if kind == "intent"]
    assert len(intents) == 250 and not any(gone for _, gone in intents)
    assert all(gone for kind, _, gone in probe.seen if kind == "outcome")
    kinds = [kind for kind, _, _ in probe.seen]
    assert (
        kinds
        == ["intent"] * 100
        + ["outcome"] * 100
        + ["intent"] * 100
        + ["outcome"] * 100
        + ["intent"] * 50
        + ["outcome"] * 50
    )
    for i in range(250):  # only the planned partition went; the fresh one stays
        offsets = fake.fetch_offsets([f"svc-{i:04d}"])[f"svc-{i:04d}"].offsets
        assert set(offsets) == {TopicPartition("new", 0)}


def test_a_commit_in_the_middle_of_a_step_drops_only_that_group() -> None:
    fake = services(30)
    policies = [policy()]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    fake.commit("svc-0017", {("old", 0): 99})  # between the plan and the step
    recheck = Recheck(
        fake, memory, cluster_pass.snapshot, policies, scope_of(policies), lambda: clock_of(fake)
    )
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recheck=recheck)
    results = {o.action.group_id: o.result for o in outcomes}
    assert results.pop("svc-0017") is ResultKind.SKIPPED_BECAME_ACTIVE
    assert set(results.values()) == {ResultKind.DELETED}
    assert TopicPartition("old", 0) in fake.fetch_offsets(["svc-0017"])["svc-0017"].offsets


class RefuseAt:
    """Refuses the intent of one group: the whole batch of its step must not run."""

    def __init__(self, group: str) -> None:
        self.group = group

    def write(self, entry: TrailEntry) -> None:
        if entry.record["group"] == self.group and entry.record["type"] == "intent":
            raise OSError(28, "No space left on device")


def test_a_refused_intent_in_a_batch_sends_none_of_its_requests() -> None:
    fake = services(150)
    policies = [policy()]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    recorder = AuditRecorder(
        [RefuseAt("svc-0120")], cluster_pass.snapshot, ["fake:9092"], signer=fixed_signer()
    )
    with pytest.raises(AuditBlocked) as blocked:
        execute_guarded(fake, plan, ALWAYS_GO, recorder=recorder)
    # The first step (100 groups) ran; nothing of the second one, whose intent 21 was refused.
    assert fake.calls["delete_offsets"] == 100
    assert len(blocked.value.outcomes) == 100
    assert "svc-0120" in str(blocked.value)


def test_the_broker_answers_each_group_of_a_batch_on_its_own() -> None:
    fake = services(3)
    fake.join("svc-0001", ["old"])  # subscribed again: the broker refuses that group's partition
    old = TopicPartition("old", 0)
    requests = [(g, [old]) for g in ("svc-0000", "svc-0001", "svc-0002", "gone")]
    answers = fake.delete_offsets_many(requests)
    assert answers["svc-0000"] == (None, {old: None})
    subscribed = answers["svc-0001"][1][old]
    assert subscribed is not None and subscribed.name == "GROUP_SUBSCRIBED_TO_TOPIC"
    gone = answers["gone"][0]
    assert gone is not None and gone.name == "GROUP_ID_NOT_FOUND"
    # execute_plan turns them into one outcome each.
    plan = replace(
        plan_of(fake),
        actions=tuple(offsets_action(g) for g in ("svc-0002", "gone")),
    )
    plan = replace(plan, actions=tuple(replace(a, partitions=(old,)) for a in plan.actions))
    results = [o.result for o in execute_plan(fake, plan)]
    assert results == [ResultKind.DELETED, ResultKind.NOT_FOUND]


def plan_of(fake: FakeKafka) -> Plan:
    [plan] = gather_and_decide(fake, ClusterKnowledge(ObservedTimes()), [policy()], clock_of(fake)).plans
    return plan


class CommitsWhileRecorded:
    """A client commits to one group while the step's intents are written (after its re-check)."""

    def __init__(self, fake: FakeKafka, group: str) -> None:
        self.fake, self.group = fake, group

    def write(self, entry: TrailEntry) -> None:
        if entry.record["group"] == self.group and entry.record["type"] == "intent":
            self.fake.commit(self.group, {("old", 0): 500})


def committing_while_recorded(
    fake: FakeKafka, memory: ClusterKnowledge, cluster_pass: Any, policies: list[Any], group: str
) -> tuple[Recheck, MemorySink, AuditRecorder]:
    """The pass's re-check, and a recorder through which `group` commits while its intent is written."""
    recheck = Recheck(
        fake, memory, cluster_pass.snapshot, policies, scope_of(policies), lambda: clock_of(fake)
    )
    sink = MemorySink()
    recorder = AuditRecorder(
        [CommitsWhileRecorded(fake, group), sink], cluster_pass.snapshot, ["fake:9092"], signer=fixed_signer()
    )
    return recheck, sink, recorder


def kept_by_its_last_read(
    fake: FakeKafka, outcomes: Sequence[ActionOutcome], sink: MemorySink, group: str
) -> None:
    """`group`'s commit after the step's re-check kept it (intent and outcome written, the commit
    in place); every other action deleted."""
    results = {o.action.group_id: o for o in outcomes}
    kept = results.pop(group)
    assert kept.result is ResultKind.SKIPPED_BECAME_ACTIVE and "after the step's re-check" in (
        kept.error or ""
    )
    assert {o.result for o in results.values()} == {ResultKind.DELETED}
    assert fake.fetch_offsets([group])[group].offsets[TopicPartition("old", 0)].offset == 500
    recorded = [(r["type"], r["group"]) for r in sink.records if r["group"] == group]
    assert recorded == [("intent", group), ("outcome", group)]
    [outcome] = [r for r in sink.records if r["group"] == group and r["type"] == "outcome"]
    assert outcome["result"] == "SkippedBecameActive"  # restore will not put it back


def test_a_commit_after_the_steps_recheck_is_caught_by_its_waves_own_read() -> None:
    """Each wave of a step's requests follows its own OffsetFetch: a commit between the step's
    re-check and the wave keeps the group (its intent is written, its outcome says so)."""
    fake = services(40)
    policies = [policy()]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    recheck, sink, recorder = committing_while_recorded(fake, memory, cluster_pass, policies, "svc-0033")
    sizes: list[int] = []
    fetch = fake.fetch_offsets

    def counted(group_ids: Sequence[str]) -> Any:
        sizes.append(len(group_ids))
        return fetch(group_ids)

    fake.fetch_offsets = counted  # type: ignore[method-assign]
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recorder=recorder, recheck=recheck)
    fake.fetch_offsets = fetch  # type: ignore[method-assign]
    kept_by_its_last_read(fake, outcomes, sink, "svc-0033")
    # The step's re-check reads all 40 groups; then one OffsetFetch per wave of 8 (5 waves).
    assert sizes[-5:] == [8, 8, 8, 8, 8] and all(n == 40 for n in sizes[:-5])


def test_a_commit_while_the_group_deletions_intents_are_written_keeps_the_group() -> None:
    """Group deletions too are read once more after their intents are written (an fsync or a
    topic's acks can take seconds): a simple group that commits meanwhile is not deleted."""
    fake = FakeKafka(topics=["old"])
    for i in range(5):
        fake.add_group(f"svc-{i}", GroupKind.SIMPLE, offsets={("old", 0): i + 1})
    fake.advance(2 * HOUR_MS)
    policies = [policy()]
    memory = ClusterKnowledge(ObservedTimes())
    cluster_pass = gather_and_decide(fake, memory, policies, clock_of(fake))
    [plan] = cluster_pass.plans
    assert {a.kind for a in plan.actions} == {ActionKind.DELETE_GROUP}
    recheck, sink, recorder = committing_while_recorded(fake, memory, cluster_pass, policies, "svc-3")
    outcomes, _ = execute_guarded(fake, plan, ALWAYS_GO, recorder=recorder, recheck=recheck)
    kept_by_its_last_read(fake, outcomes, sink, "svc-3")
