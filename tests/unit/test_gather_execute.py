"""gather -> decide -> execute through the port, on the in-memory FakeKafka (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from groupwarden.cleanup.execute import PlanNotExecutable, execute_plan
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.cleanup.steps import AbortReason, execute_guarded
from groupwarden.core.engine import decide
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.plan import ActionKind, ResultKind
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import GroupKind, GroupState, TimestampSource, TopicPartition
from groupwarden.testing.fake_kafka import FakeKafka

DAY_MS = 86_400_000


def now_of(fake: FakeKafka) -> datetime:
    return datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)


def policy(mode: str = "Enforce", **rules: str) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": {"include": ["*"]},
                "rules": rules,
                "mode": mode,
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def memory() -> ClusterKnowledge:
    return ClusterKnowledge(ObservedTimes())


def test_log_times_are_exact_and_sourced() -> None:
    fake = FakeKafka(topics=["t"])
    committed = fake.now_ms
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    fake.add_group("classic-1", subscribed=["t"], offsets={("t", 1): 7})
    fake.advance(1000)
    fake.leave("classic-1")
    fake.advance(DAY_MS)

    snapshot = gather_snapshot(fake, memory(), now_of(fake))
    by_id = {g.group_id: g for g in snapshot.groups}
    assert snapshot.offsets_log_available
    [simple_offset] = by_id["simple-1"].offsets
    assert simple_offset.committed_at is not None
    assert simple_offset.committed_at.source is TimestampSource.OFFSETS_LOG
    assert simple_offset.committed_at.at == datetime.fromtimestamp(committed / 1000, tz=UTC)
    empty_since = by_id["classic-1"].empty_since
    assert empty_since is not None and empty_since.source is TimestampSource.OFFSETS_LOG
    assert empty_since.at == datetime.fromtimestamp((committed + 1000) / 1000, tz=UTC)


def test_unreadable_log_falls_back_to_first_observed_times() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    fake.advance(30 * DAY_MS)
    fake.offsets_log_unavailable = True
    mem = memory()

    first_now = now_of(fake)
    snapshot = gather_snapshot(fake, mem, first_now)
    assert not snapshot.offsets_log_available
    assert any("not readable" in w for w in snapshot.warnings)
    [offset] = snapshot.groups[0].offsets
    # The log said 30 days ago; without it the clock starts now: a deletion can only come later.
    assert offset.committed_at is not None and offset.committed_at.at == first_now
    assert offset.committed_at.source is TimestampSource.OBSERVED
    plan = decide(policy(simpleGroupOffsetRetention="1d"), snapshot, first_now)
    assert plan.actions == ()

    fake.advance(2 * DAY_MS)
    later = gather_snapshot(fake, mem, now_of(fake))
    assert later.groups[0].offsets[0].committed_at == offset.committed_at  # remembered, not reset
    plan = decide(policy(simpleGroupOffsetRetention="1d"), later, now_of(fake))
    assert [a.kind for a in plan.actions] == [ActionKind.DELETE_GROUP]


def test_offsets_come_from_the_log_read_after_the_describe() -> None:
    # The log is read after the describe, so a commit made in between is in the snapshot with its
    # exact time (OffsetFetch is not needed while the log is readable).
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    fake.advance(10 * DAY_MS)
    mem = memory()
    gather_snapshot(fake, mem, now_of(fake))  # the ledger now holds offset 5
    fake.advance(1000)
    fake.before("read_offsets_log", lambda f: f.commit("simple-1", {("t", 0): 9}))
    snapshot = gather_snapshot(fake, mem, now_of(fake))
    [offset] = snapshot.groups[0].offsets
    assert offset.offset == 9
    assert offset.committed_at is not None and offset.committed_at.source is TimestampSource.OFFSETS_LOG
    assert offset.committed_at.at == now_of(fake)
    assert fake.calls["fetch_offsets"] == 0


def test_a_group_that_joined_after_the_listing_is_not_judged_as_empty() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("app", offsets={("t", 0): 1})  # an Empty classic group
    fake.advance(10 * DAY_MS)
    fake.before("read_offsets_log", lambda f: f.join("app", ["t"]))
    snapshot = gather_snapshot(fake, memory(), now_of(fake))
    [group] = snapshot.groups
    assert group.state is GroupState.UNKNOWN and group.empty_since is None
    assert decide(policy(emptyGroupRetention="1d"), snapshot, now_of(fake)).actions == ()


def test_an_undecodable_latest_commit_gets_an_observed_time() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    mem = memory()
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is not None
    # An OffsetCommit value of a version this codec does not know, as the latest record.
    key = next(iter(fake.read_offsets_log({}))).key
    mem.ledger.apply(key, b"\x00\x63garbage", fake.now_ms, fake.partition_for("simple-1"), 10_000)
    fake.advance(10 * DAY_MS)
    snapshot = gather_snapshot(fake, mem, now_of(fake))
    [offset] = snapshot.groups[0].offsets
    assert offset.committed_at is not None and offset.committed_at.source is TimestampSource.OBSERVED
    assert offset.committed_at.at == now_of(fake)


def test_without_the_log_offsets_are_fetched_and_observed() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    fake.offsets_log_unavailable = True
    snapshot = gather_snapshot(fake, memory(), now_of(fake))
    [offset] = snapshot.groups[0].offsets
    assert offset.offset == 5 and fake.calls["fetch_offsets"] == 1
    assert offset.committed_at is not None and offset.committed_at.source is TimestampSource.OBSERVED
    assert not snapshot.offsets_log_available


def test_ledger_resumes_and_rebuilds_after_a_gap() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    mem = memory()
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is not None
    first_records = mem.ledger.records
    fake.commit("simple-2", {("t", 0): 1})
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger.records == first_records + 1  # only the new record was read

    partition = fake.partition_for("simple-1")
    fake.truncate_log(partition, fake.log_end(partition) + 1)
    snapshot = gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is not None and snapshot.offsets_log_available


def test_enforce_deletes_exactly_the_eligible_items() -> None:
    fake = FakeKafka(topics=["live", "dropped"])
    fake.add_group("stale-ci", subscribed=["live"], offsets={("live", 0): 1})
    fake.leave("stale-ci")
    fake.add_group("service", subscribed=["live"], offsets={("live", 0): 3, ("dropped", 0): 4})
    fake.add_group("active", subscribed=["live"], offsets={("live", 0): 3})
    fake.advance(3 * DAY_MS)
    now = now_of(fake)
    snapshot = gather_snapshot(fake, memory(), now)
    plan = decide(policy(emptyGroupRetention="1d", unsubscribedOffsetRetention="1d"), snapshot, now)
    outcomes = execute_plan(fake, plan)

    assert {(o.action.kind, o.action.group_id, o.result) for o in outcomes} == {
        (ActionKind.DELETE_GROUP, "stale-ci", ResultKind.DELETED),
        (ActionKind.DELETE_OFFSETS, "service", ResultKind.DELETED),
    }
    assert "stale-ci" not in fake.groups
    assert set(fake.groups["service"].offsets) == {TopicPartition("live", 0)}
    assert set(fake.groups["active"].offsets) == {TopicPartition("live", 0)}


def test_a_consumer_that_comes_back_is_skipped_not_failed() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", subscribed=["t"], offsets={("t", 0): 1})
    fake.leave("ci-1")
    fake.add_group("svc", subscribed=["t"], offsets={("t", 0): 1, ("old", 0): 2})
    fake.advance(3 * DAY_MS)
    now = now_of(fake)
    plan = decide(
        policy(emptyGroupRetention="1d", unsubscribedOffsetRetention="1d"),
        gather_snapshot(fake, memory(), now),
        now,
    )
    fake.before("delete_groups", lambda f: f.join("ci-1", ["t"]))
    fake.before("delete_offsets", lambda f: f.join("svc", ["t", "old"]))
    outcomes = execute_plan(fake, plan)
    assert {o.action.group_id: o.result for o in outcomes} == {
        "ci-1": ResultKind.SKIPPED_BECAME_ACTIVE,
        "svc": ResultKind.SKIPPED_BECAME_ACTIVE,
    }
    assert "ci-1" in fake.groups and TopicPartition("old", 0) in fake.groups["svc"].offsets


def test_groups_already_gone_are_not_found() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", subscribed=["t"], offsets={("t", 0): 1})
    fake.leave("ci-1")
    fake.advance(3 * DAY_MS)
    now = now_of(fake)
    plan = decide(policy(emptyGroupRetention="1d"), gather_snapshot(fake, memory(), now), now)
    fake.before("delete_groups", lambda f: f.groups.pop("ci-1"))
    [outcome] = execute_plan(fake, plan)
    assert outcome.result is ResultKind.NOT_FOUND


def test_dry_run_plans_are_never_executed() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", subscribed=["t"], offsets={("t", 0): 1})
    fake.leave("ci-1")
    fake.advance(3 * DAY_MS)
    now = now_of(fake)
    plan = decide(policy(mode="DryRun", emptyGroupRetention="1d"), gather_snapshot(fake, memory(), now), now)
    assert plan.actions
    with pytest.raises(PlanNotExecutable):
        execute_plan(fake, plan)
    assert fake.calls["delete_groups"] == 0


def test_a_failing_write_ahead_hook_blocks_the_deletion() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", subscribed=["t"], offsets={("t", 0): 1})
    fake.leave("ci-1")
    fake.advance(3 * DAY_MS)
    now = now_of(fake)
    plan = decide(policy(emptyGroupRetention="1d"), gather_snapshot(fake, memory(), now), now)

    def refuse(_action: object) -> None:
        raise OSError("audit sink full")

    with pytest.raises(OSError):
        execute_plan(fake, plan, before_action=refuse)
    assert "ci-1" in fake.groups and fake.calls["delete_groups"] == 0


def test_only_selected_groups_are_described() -> None:
    fake = FakeKafka(topics=["t"])
    for i in range(5):
        fake.add_group(f"ci-{i}", GroupKind.SIMPLE, offsets={("t", 0): i})
    fake.add_group("prod-1", GroupKind.SIMPLE, offsets={("t", 0): 1})
    snapshot = gather_snapshot(
        fake, memory(), now_of(fake) + timedelta(seconds=1), lambda g: g.startswith("ci-")
    )
    assert sorted(g.group_id for g in snapshot.groups) == [f"ci-{i}" for i in range(5)]
    # Listed Empty: a describe would add nothing, and the log has their offsets.
    assert fake.calls["describe_groups"] == 0 and fake.calls["fetch_offsets"] == 0
    assert all(g.state is GroupState.EMPTY for g in snapshot.groups)
    assert mem_ledger_groups(fake) >= 6  # (sanity: the fake's log holds all six groups)


def test_only_active_selected_groups_are_described_and_the_ledger_keeps_only_selected_ones() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-empty", offsets={("t", 0): 1})
    fake.add_group("ci-live", subscribed=["t"], offsets={("t", 0): 2})
    fake.add_group("prod-live", subscribed=["t"], offsets={("t", 0): 3})
    mem = memory()
    snapshot = gather_snapshot(fake, mem, now_of(fake), lambda g: g.startswith("ci-"))
    assert fake.calls["describe_groups"] == 1
    live = next(g for g in snapshot.groups if g.group_id == "ci-live")
    assert live.state is GroupState.STABLE and live.subscribed_topics == frozenset({"t"})
    assert mem.ledger is not None
    assert "prod-live" not in mem.ledger and "ci-live" in mem.ledger and mem.ledger.out_of_scope > 0


def mem_ledger_groups(fake: FakeKafka) -> int:
    mem = memory()
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is not None
    return mem.ledger.group_count


def test_a_ledger_paused_longer_than_tombstones_live_is_rebuilt() -> None:
    # delete.retention.ms (24 h) may have dropped tombstones the ledger never saw: past 12 h of
    # pause the ledger is read again from the log's start instead of resumed.
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5})
    mem = memory()
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is not None and mem.caught_up_at is not None
    resumed = mem.ledger
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is resumed  # a short pause: resumed
    mem.caught_up_at -= timedelta(hours=13)
    gather_snapshot(fake, mem, now_of(fake))
    assert mem.ledger is not resumed and mem.ledger is not None and mem.ledger.group_count == 1


def test_the_run_guard_is_asked_again_by_the_gateway_before_it_sends_a_deletion() -> None:
    """The operator's guard reaches the gateway's deletions (`before_send`): a Lease lost after the
    step's own check but before the request (e.g. during a long write-ahead record, or between
    re-sends through a failover) sends nothing."""
    fake = FakeKafka(topics=["t"])
    fake.add_group("ci-1", subscribed=["t"], offsets={("t", 0): 1})
    fake.leave("ci-1")
    fake.advance(3 * DAY_MS)
    now = now_of(fake)
    plan = decide(policy(emptyGroupRetention="1d"), gather_snapshot(fake, memory(), now), now)
    asked: list[int] = []

    class LosesTheLeaseAfterTheStepCheck:
        def stop_reason(self) -> AbortReason | None:
            asked.append(1)
            return AbortReason.LEADERSHIP_LOST if len(asked) > 1 else None

    outcomes, aborted = execute_guarded(fake, plan, LosesTheLeaseAfterTheStepCheck())
    [outcome] = outcomes
    assert outcome.result is ResultKind.FAILED and outcome.retriable
    assert outcome.error is not None and "lost the leader Lease" in outcome.error
    assert "ci-1" in fake.groups and fake.calls["delete_groups"] == 0
    assert aborted is None and len(asked) == 2
