"""The operator's observation keeper (controller/observation_keeper.py) with the real gather on a
FakeKafka and an in-memory store that fences like the Kafka one (a transactional id's epoch):
restarts and failovers continue the clocks, a deposed leader writes nothing, a gap longer than
the bound restarts them."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.cleanup.observation_store_port import (
    ObservationStoreError,
    ObservationStoreFenced,
    ObservationStoreMissing,
)
from groupwarden.connectivity.settings import ConnectionSettings, settings_from_properties
from groupwarden.controller.connections import ClusterState
from groupwarden.controller.observation_keeper import ObservationKeeper
from groupwarden.core.observation_store_records import (
    PIECE_GROUPS,
    ObservationBatch,
    StoredObservations,
    batch_records,
    fold,
)
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.snapshot import ClusterSnapshot, GroupKind, GroupState
from groupwarden.testing.fake_kafka import FakeKafka

pytestmark = pytest.mark.unit

GAP = timedelta(minutes=30)


@dataclass
class SharedTopic:
    """The records of one compacted topic, and the transactional id's current epoch."""

    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    epoch: int = 0
    fail_writes: bool = False
    exists: bool = False  # created by the first open(create=True)
    # Writes (transactions) that succeed before every later one fails (None: no limit).
    writes_left: int | None = None
    writes: int = 0


class FencingStore:
    """`ObservationStore` over a SharedTopic: `open` bumps the epoch (init_transactions), a write
    of an older epoch is refused (ProducerFenced)."""

    def __init__(self, topic: SharedTopic, cluster_id: str) -> None:
        self.topic, self.cluster_id = topic, cluster_id
        self.epoch: int | None = None

    def open(self, create: bool = True) -> StoredObservations:
        if not self.topic.exists:
            if not create:
                raise ObservationStoreMissing("no topic")
            self.topic.exists = True
        self.topic.epoch += 1
        self.epoch = self.topic.epoch
        return fold(self.cluster_id, self.topic.records)

    def write(self, batch: ObservationBatch) -> None:
        if self.epoch != self.topic.epoch:
            raise ObservationStoreFenced("PRODUCER_FENCED")
        if self.topic.fail_writes or self.topic.writes_left == 0:
            raise ObservationStoreError("NOT_ENOUGH_REPLICAS")
        if self.topic.writes_left is not None:
            self.topic.writes_left -= 1
        self.topic.writes += 1
        self.topic.records.extend(batch_records(batch))

    def close(self) -> None:
        self.epoch = None


@dataclass
class Lease:
    is_leader: bool = True

    async def wait_until_leader(self) -> None:
        return None


class Replica:
    """One operator process: its keeper and its memory of the cluster."""

    def __init__(
        self,
        topic: SharedTopic,
        fake: FakeKafka,
        name: str,
        leader: bool = True,
        *,
        pieces: int = PIECE_GROUPS,
        log: bool = False,
    ) -> None:
        self.fake, self.lease = fake, Lease(leader)
        stores = lambda _settings, cluster: FencingStore(topic, cluster)  # noqa: E731
        self.keeper = ObservationKeeper(stores, self.lease, name, GAP, piece_groups=pieces)
        self.cluster = ClusterState(fake.cluster, ClusterKnowledge(ObservedTimes(), read_offsets_log=log))

    def pass_at(self, now: datetime) -> dict[str, datetime | None]:
        """One pass as the reconciler runs it: open (first pass), gather, write the changes."""
        self.keeper.before_pass(self.cluster, _settings(), now)
        snapshot = gather_snapshot(self.fake, self.cluster.memory, now)
        self.keeper.after_gather(self.cluster, _settings(), now)
        return {g.group_id: g.empty_since.at if g.empty_since else None for g in snapshot.groups}


def _settings() -> ConnectionSettings:
    return settings_from_properties({}, bootstrap_servers="fake:9092")


def cluster() -> FakeKafka:
    fake = FakeKafka(topics=["t"])
    fake.add_group("idle", GroupKind.CONSUMER, offsets={("t", 0): 5})
    fake.add_group("busy", GroupKind.CONSUMER, subscribed=["t"], offsets={("t", 0): 9})
    return fake


T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def test_a_restarted_operator_continues_the_clocks() -> None:
    topic, fake = SharedTopic(), cluster()
    first = Replica(topic, fake, "a")
    assert first.pass_at(T0)["idle"] == T0
    assert first.pass_at(T0 + timedelta(seconds=10))["idle"] == T0
    restarted = Replica(topic, fake, "a-restarted")
    assert restarted.pass_at(T0 + timedelta(seconds=40))["idle"] == T0
    # Changes only: each group's clocks (Empty-since, offsets) were written once, in the first
    # batch; the quiet passes after it wrote one pass record each.
    group_records = [k for k, _ in topic.records if k.count(b",") == 1]
    assert sorted(group_records) == [b'["fake-cluster","busy"]', b'["fake-cluster","idle"]']
    assert len(topic.records) == 2 + 3


def test_offsets_clocks_continue_and_a_new_commit_restarts_one() -> None:
    topic, fake = SharedTopic(), cluster()
    Replica(topic, fake, "a").pass_at(T0)
    fake.commit("busy", {("t", 0): 10})
    replica = Replica(topic, fake, "b")
    replica.pass_at(T0 + timedelta(minutes=1))
    offsets = replica.cluster.memory.observed.offsets
    assert {g: since for (g, _tp), (_o, since) in offsets.items()} == {
        "idle": T0,
        "busy": T0 + timedelta(minutes=1),
    }


def test_the_standby_continues_the_leaders_clocks_and_fences_it() -> None:
    topic, fake = SharedTopic(), cluster()
    leader, standby = Replica(topic, fake, "a"), Replica(topic, fake, "b", leader=False)
    leader.pass_at(T0)
    assert standby.pass_at(T0 + timedelta(seconds=5))["idle"] == T0 + timedelta(seconds=5)
    assert standby.keeper._clusters[fake.cluster].store is None  # not leader: never opened
    standby.lease.is_leader = True
    standby.keeper.leadership_changed(True)
    assert standby.pass_at(T0 + timedelta(seconds=30))["idle"] == T0
    # The deposed leader does not know yet: its next batch is refused by the fence...
    fake.add_group("late", GroupKind.CONSUMER, offsets={("t", 0): 1})
    before = list(topic.records)
    leader.pass_at(T0 + timedelta(seconds=31))
    assert topic.records == before
    # ... and once it knows, it does not even try.
    leader.lease.is_leader = False
    leader.keeper.leadership_changed(False)
    leader.pass_at(T0 + timedelta(seconds=32))
    assert topic.records == before
    # The new leader's own batch still goes through.
    standby.pass_at(T0 + timedelta(seconds=40))
    assert len(topic.records) > len(before)


def test_a_silence_longer_than_the_bound_restarts_the_clocks() -> None:
    topic, fake = SharedTopic(), cluster()
    Replica(topic, fake, "a").pass_at(T0)
    late = T0 + GAP + timedelta(seconds=1)
    replica = Replica(topic, fake, "b")
    assert replica.pass_at(late)["idle"] == late
    # The stale entry was rewritten with its new clock (no stale record left for a next load).
    again = Replica(topic, fake, "c")
    assert again.pass_at(late + timedelta(minutes=1))["idle"] == late


def test_a_group_active_in_the_meantime_loses_its_stored_clock() -> None:
    topic, fake = SharedTopic(), cluster()
    Replica(topic, fake, "a").pass_at(T0)
    fake.join("idle", subscribed=["t"])
    Replica(topic, fake, "b").pass_at(T0 + timedelta(minutes=1))  # sees it Stable: tombstone
    fake.leave("idle")
    replica = Replica(topic, fake, "c")
    assert replica.pass_at(T0 + timedelta(minutes=2))["idle"] == T0 + timedelta(minutes=2)


def test_a_failed_write_is_retried_and_an_unreadable_store_costs_only_persistence() -> None:
    topic, fake = SharedTopic(), cluster()
    replica = Replica(topic, fake, "a")
    topic.fail_writes = True
    replica.pass_at(T0)
    assert replica.cluster.memory.observed.empty_since == {"idle": T0}
    assert topic.records == []
    topic.fail_writes = False
    replica.pass_at(T0 + timedelta(seconds=10))  # reopened, and made equal to the memory
    assert Replica(topic, fake, "b").pass_at(T0 + timedelta(seconds=20))["idle"] == T0


def test_a_cluster_whose_offsets_log_dates_everything_gets_no_store() -> None:
    topic, fake = SharedTopic(), cluster()
    replica = Replica(topic, fake, "a")
    replica.cluster.memory = ClusterKnowledge(ObservedTimes())  # the log is read: exact times
    for seconds in (0, 10, 20):
        replica.pass_at(T0 + timedelta(seconds=seconds))
    assert not replica.cluster.memory.observed.empty_since and not replica.cluster.memory.observed.offsets
    assert not topic.exists and topic.records == []  # no topic created on such a cluster


def test_the_first_pass_that_keeps_clocks_creates_the_store_and_writes_them() -> None:
    topic, fake = SharedTopic(), cluster()
    replica = Replica(topic, fake, "a")
    assert replica.pass_at(T0)["idle"] == T0  # no store yet: the probe found none, created after the gather
    assert topic.exists and any(k == b'["fake-cluster","idle"]' for k, _ in topic.records)
    # A later process resumes from it at once (its probe finds the store).
    assert Replica(topic, fake, "b").pass_at(T0 + timedelta(seconds=30))["idle"] == T0


def test_a_first_write_goes_in_pieces_and_one_that_fails_midway_keeps_what_it_stored() -> None:
    topic, fake = SharedTopic(), FakeKafka(topics=["t"])
    for i in range(7):
        fake.add_group(f"g{i}", GroupKind.CONSUMER, offsets={("t", 0): i})
    replica = Replica(topic, fake, "a", pieces=3)
    topic.writes_left = 1  # the first piece goes through, the second fails
    replica.pass_at(T0)
    stored = fold(fake.cluster, topic.records)
    assert set(stored.groups) == {"g0", "g1", "g2"} and stored.last_pass is None  # no pass record yet
    observed = replica.cluster.memory.observed
    assert observed.changed == {f"g{i}" for i in range(3, 7)}  # only the pieces not stored
    topic.writes_left = None
    replica.pass_at(T0 + timedelta(seconds=10))  # reopened: the store made equal to the memory
    stored = fold(fake.cluster, topic.records)
    assert set(stored.groups) == {f"g{i}" for i in range(7)} and stored.last_pass == T0 + timedelta(
        seconds=10
    )
    writes = topic.writes
    replica.pass_at(T0 + timedelta(seconds=20))
    assert topic.writes == writes + 1  # a quiet pass: one piece, its pass record alone
    assert Replica(topic, fake, "b").pass_at(T0 + timedelta(seconds=30))["g6"] == T0


def log_cluster() -> FakeKafka:
    """Its log dates everything but the Empty-since of simple groups without offsets."""
    fake = FakeKafka(topics=["t"])
    for i in range(3):
        fake.add_group(f"ci-{i}", GroupKind.SIMPLE, offsets={("t", i): 5})  # no clock
    fake.add_group("bare-1", GroupKind.SIMPLE)
    fake.add_group("bare-2", GroupKind.SIMPLE)
    return fake


def first_pass_creating_the_store(
    replica: Replica, topic: SharedTopic, now: datetime, meanwhile: list[tuple[bytes, bytes | None]]
) -> ClusterSnapshot:
    """A process's first pass that finds no store (so it decides with fresh clocks), and whose
    store, opened after the gather, holds `meanwhile` (another replica's records)."""
    replica.keeper.before_pass(replica.cluster, _settings(), now)  # no topic: nothing opened
    snapshot = gather_snapshot(replica.fake, replica.cluster.memory, now)
    topic.records = list(meanwhile)
    replica.keeper.after_gather(replica.cluster, _settings(), now)  # creates/opens it, resumes
    return snapshot


def test_resuming_with_no_clock_changed_keeps_every_fact_and_verdict() -> None:
    topic, fake = SharedTopic(), log_cluster()
    replica = Replica(topic, fake, "a", log=True)
    memory = replica.cluster.memory
    first = first_pass_creating_the_store(replica, topic, T0, [])
    verdicts = memory.verdicts
    assert set(memory.observed.empty_since) == {"bare-1", "bare-2"} and topic.exists
    assert len(memory.facts) == 5  # kept: no stored clock was earlier than the pass's own
    second = gather_snapshot(fake, memory, T0 + timedelta(seconds=20))
    assert memory.verdicts is verdicts
    assert all(a is b for a, b in zip(first.groups, second.groups, strict=True))  # not rebuilt


def test_resuming_a_clock_rebuilds_only_that_groups_facts() -> None:
    topic, fake = SharedTopic(), log_cluster()
    earlier = Replica(topic, fake, "a", log=True)
    earlier.pass_at(T0)  # stores bare-1's and bare-2's clocks at T0
    stored = list(topic.records)
    fake.commit("bare-2", {("t", 0): 1})  # bare-2 has offsets now: no clock to resume
    topic.exists, topic.records = False, []
    replica = Replica(topic, fake, "b", log=True)
    t1 = T0 + timedelta(minutes=5)
    first = {g.group_id: g for g in first_pass_creating_the_store(replica, topic, t1, stored).groups}
    assert first["bare-1"].empty_since is not None and first["bare-1"].empty_since.at == t1
    memory = replica.cluster.memory
    assert memory.observed.empty_since == {"bare-1": T0}  # resumed: the earlier stored clock
    assert set(memory.facts) == {"ci-0", "ci-1", "ci-2", "bare-2"}  # bare-1's facts dropped
    second = {g.group_id: g for g in gather_snapshot(fake, memory, t1 + timedelta(seconds=20)).groups}
    assert second["bare-1"].empty_since is not None and second["bare-1"].empty_since.at == T0
    assert all(second[g] is first[g] for g in ("ci-0", "ci-1", "ci-2", "bare-2"))


def test_without_a_store_every_gather_still_works() -> None:
    fake = cluster()
    memory = ClusterKnowledge(ObservedTimes(), read_offsets_log=False)
    snapshot = gather_snapshot(fake, memory, T0)
    assert {g.group_id: g.state for g in snapshot.groups}["idle"] is GroupState.EMPTY


def test_a_pass_in_flight_when_the_lease_changed_hands_counts_for_no_term() -> None:
    topic, fake = SharedTopic(), cluster()
    a, b = Replica(topic, fake, "a"), Replica(topic, fake, "b", leader=False)
    a.pass_at(T0)
    # a's next pass starts as leader; while it gathers, a loses the Lease, b leads and sees the
    # group active and Empty again, then a wins the Lease back: what a's pass saw is stale.
    a.keeper.before_pass(a.cluster, _settings(), T0 + timedelta(seconds=10))
    snapshot_at = T0 + timedelta(seconds=10)
    gather_snapshot(a.fake, a.cluster.memory, snapshot_at)
    a.lease.is_leader = False
    a.keeper.leadership_changed(False)
    b.lease.is_leader = True
    b.keeper.leadership_changed(True)
    fake.join("idle", subscribed=["t"])
    b.pass_at(T0 + timedelta(seconds=20))
    fake.leave("idle")
    b.pass_at(T0 + timedelta(seconds=25))
    b.lease.is_leader = False
    b.keeper.leadership_changed(False)
    a.lease.is_leader = True
    a.keeper.leadership_changed(True)
    a.keeper.after_gather(a.cluster, _settings(), snapshot_at)  # the stale pass ends: it writes nothing
    # a's next pass starts from the store (b's clock), not from its stale memory (T0).
    assert a.pass_at(T0 + timedelta(seconds=30))["idle"] == T0 + timedelta(seconds=25)


STEP = st.tuples(
    st.sampled_from(["pass", "pass", "restart", "join", "leave", "commit"]),
    st.integers(min_value=1, max_value=50 * 60),  # seconds before the step
)


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=25))
# A clock dropped by a late restart's load, the group then seen active, then Empty again after a
# quick restart: the dropped record must be gone from the store by then.
@example(
    [("pass", 1), ("restart", 1), ("join", 2400), ("pass", 1), ("leave", 1), ("restart", 1), ("pass", 1)]
)
def test_restarts_never_make_a_clock_earlier_than_a_watch_without_them(steps: list[tuple[str, int]]) -> None:
    """Property: the operator restarted at any points (its memory from the store alone) has, at
    every pass, the same clocks as a process that watched the same passes without a restart, or
    later ones once a restart came after a silence longer than the bound; never earlier."""
    topic, fake = SharedTopic(), FakeKafka(topics=["t"])
    fake.add_group("g", GroupKind.CONSUMER, offsets={("t", 0): 1})
    fake.add_group("bare", GroupKind.CONSUMER)  # no offsets: an Empty-since clock alone
    replica = Replica(topic, fake, "r0")
    uninterrupted = ClusterKnowledge(ObservedTimes(), read_offsets_log=False)
    now, members, offset, last_pass, restarted_late = T0, 0, 1, None, False
    for n, (action, seconds) in enumerate(steps):
        now += timedelta(seconds=seconds)
        if action == "restart":
            replica = Replica(topic, fake, f"r{n}")
            continue
        if action != "pass":  # what the clients do between passes
            if action == "join" and members == 0:
                fake.join("g", subscribed=["t"])
                fake.join("bare", subscribed=["t"])
                members = 1
            elif action == "leave" and members == 1:
                fake.leave("g")
                fake.leave("bare")
                members = 0
            elif action == "commit":
                offset += 1
                fake.commit("g", {("t", 0): offset})
            continue
        if not replica.keeper._clusters.get(fake.cluster) and last_pass is not None:
            restarted_late |= now - last_pass > GAP  # this pass is the restarted one's first
        replica.pass_at(now)
        gather_snapshot(fake, uninterrupted, now)
        last_pass = now
        kept, watched = replica.cluster.memory.observed, uninterrupted.observed
        assert kept.empty_since.keys() == watched.empty_since.keys()
        assert kept.offsets.keys() == watched.offsets.keys()
        for group, since in kept.empty_since.items():
            assert since >= watched.empty_since[group]
            assert restarted_late or since == watched.empty_since[group]
        for key, (value, since) in kept.offsets.items():
            assert value == watched.offsets[key][0] and since >= watched.offsets[key][1]
            assert restarted_late or since == watched.offsets[key][1]


class DeniedStore(FencingStore):
    """A store whose principal lacks a grant until `granted` (the authorizer's refusal)."""

    denied = True

    def open(self, create: bool = True) -> StoredObservations:
        if DeniedStore.denied:
            raise ObservationStoreError(
                "tenant-observations: fencing earlier writers: TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
                "Write on TransactionalId groupwarden-observations:tenant-observations",
            )
        return super().open(create)


def test_a_store_without_its_grants_is_reported_once_with_what_is_missing_and_clears_when_granted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import logging

    from groupwarden.controller import observation_keeper

    topic, fake = SharedTopic(), cluster()
    DeniedStore.denied = True
    lease = Lease()
    keeper = ObservationKeeper(lambda _s, c: DeniedStore(topic, c), lease, "a", GAP)
    state = ClusterState(fake.cluster, ClusterKnowledge(ObservedTimes(), read_offsets_log=False))
    clock = [1000.0]
    monkeypatch.setattr(observation_keeper.time, "monotonic", lambda: clock[0])

    def one_pass(now: datetime) -> None:
        keeper.before_pass(state, _settings(), now)
        gather_snapshot(fake, state.memory, now)
        keeper.after_gather(state, _settings(), now)

    assert keeper.clock_keeping(fake.cluster) is None  # nothing known before a pass
    with caplog.at_level(logging.DEBUG, logger="groupwarden.controller.observations"):
        for i in range(20):  # twenty passes, 10 s apart: one line, not twenty
            clock[0] += 10
            one_pass(T0 + timedelta(seconds=10 * i))
    keeping = keeper.clock_keeping(fake.cluster)
    assert keeping is not None and not keeping.persisted
    assert "missing Write on TransactionalId groupwarden-observations:tenant-observations" in keeping.message
    assert "for the principal of fake:9092 (PLAINTEXT)" in keeping.message
    assert "kept in memory only" in keeping.message
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in warnings[0].getMessage()

    caplog.clear()
    clock[0] += observation_keeper.SUMMARY_EVERY  # a long outage: one summary line per SUMMARY_EVERY
    with caplog.at_level(logging.WARNING, logger="groupwarden.controller.observations"):
        one_pass(T0 + timedelta(minutes=20))
        one_pass(T0 + timedelta(minutes=21))
    assert [r.getMessage().split(":")[1].strip() for r in caplog.records] == [
        "still failing (20 more attempts in 790 s)"
    ]

    DeniedStore.denied = False  # the ACL granted: the next pass opens and writes, no restart
    with caplog.at_level(logging.INFO, logger="groupwarden.controller.observations"):
        one_pass(T0 + timedelta(minutes=22))
    keeping = keeper.clock_keeping(fake.cluster)
    assert keeping is not None and keeping.persisted
    assert any("written again" in r.getMessage() for r in caplog.records)
    assert topic.records  # the memory's clocks are in the store now


def test_the_policies_that_decide_with_observed_times_carry_the_stores_state(tmp_path: Path) -> None:
    from controller_harness import make_harness, observe_quietly, policy_body, run_async

    from groupwarden.core.policy import PolicyRef

    topic, fake = SharedTopic(), cluster()
    DeniedStore.denied = True
    keeper = ObservationKeeper(lambda _s, c: DeniedStore(topic, c), Lease(), "a", GAP)
    h = make_harness(tmp_path, fake, options={"observations": keeper, "read_offsets_log": False})
    body = policy_body("watch", "team", selector={"include": ["*"]}, rules={"emptyGroupRetention": "1d"})

    async def runs(count: int, first: bool = False) -> None:
        if first:
            await observe_quietly(h, body)
        for _ in range(count):
            await h.reconcile("watch")

    run_async(lambda: runs(2, first=True))
    clocks = h.condition("watch", "ClocksPersisted")
    assert (clocks["status"], clocks["reason"]) == ("False", "ObservationStoreUnavailable")
    assert "TransactionalId" in clocks["message"]
    assert h.condition("watch")["status"] == "True"  # Ready: degraded, not failing
    ref = PolicyRef("team", "watch")
    assert h.events.reasons(ref).count("ObservationStoreUnavailable") == 1  # one event per change
    labels = {
        "namespace": "team",
        "name": "watch",
        "kafka_cluster": "kafka:9092",
        "condition": "ClocksPersisted",
        "status": "False",
        "reason": "ObservationStoreUnavailable",
    }
    assert h.metrics.registry.get_sample_value("groupwarden_policy_condition", labels) == 1

    DeniedStore.denied = False
    run_async(lambda: runs(1))
    clocks = h.condition("watch", "ClocksPersisted")
    assert (clocks["status"], clocks["reason"]) == ("True", "Stored")
    assert h.events.reasons(ref).count("Stored") == 1
    assert h.metrics.registry.get_sample_value("groupwarden_policy_condition", labels) is None
    assert (
        h.metrics.registry.get_sample_value(
            "groupwarden_policy_condition", {**labels, "status": "True", "reason": "Stored"}
        )
        == 1
    )
