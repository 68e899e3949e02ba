"""A later gather reuses the facts of groups that did not change (cleanup/gather.py), and the
engine's verdicts on them (core/verdicts.py): a pass at 100k groups costs what changed."""

from __future__ import annotations

from datetime import UTC, datetime

from groupwarden.cleanup.cluster_pass import gather_and_decide
from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.decide_many import decide_many
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.snapshot import ClusterSnapshot, GroupFacts, GroupKind, GroupState, TopicPartition
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.testing.fake_kafka import FakeKafka

DAY_MS = 86_400_000


def now_of(fake: FakeKafka) -> datetime:
    return datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)


def by_id(snapshot: ClusterSnapshot) -> dict[str, GroupFacts]:
    return {g.group_id: g for g in snapshot.groups}


def policy(**rules: str) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": {"include": ["*"]},
                "rules": rules,
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def cluster() -> FakeKafka:
    fake = FakeKafka(topics=["t", "u"])
    fake.add_group("simple-1", GroupKind.SIMPLE, offsets={("t", 0): 5, ("t", 1): 6})
    fake.add_group("simple-2", GroupKind.SIMPLE, offsets={("u", 0): 1})
    fake.add_group("classic-1", subscribed=["t"], offsets={("t", 2): 7})
    fake.advance(1000)
    fake.leave("classic-1")
    fake.add_group("app", subscribed=["t"], offsets={("t", 0): 3})  # stays Stable
    fake.advance(DAY_MS)
    return fake


def test_unchanged_empty_groups_keep_their_facts_and_changed_ones_are_rebuilt() -> None:
    fake = cluster()
    memory = ClusterKnowledge(ObservedTimes())
    first = by_id(gather_snapshot(fake, memory, now_of(fake)))
    fake.advance(1000)
    fake.commit("simple-2", {("u", 0): 2})  # a new commit: its facts change
    fake.join("classic-1", ["t"])  # no longer Empty
    second = by_id(gather_snapshot(fake, memory, now_of(fake)))

    assert second["simple-1"] is first["simple-1"]
    assert second["simple-2"] is not first["simple-2"]
    assert [o.offset for o in second["simple-2"].offsets] == [2]
    assert second["classic-1"] is not first["classic-1"]
    assert second["classic-1"].state is GroupState.STABLE
    assert second["app"] is not first["app"]  # described again: only Empty groups are kept

    fake.advance(1000)
    fake.leave("classic-1")  # Empty again, since a new time
    third = by_id(gather_snapshot(fake, memory, now_of(fake)))
    assert third["classic-1"].state is GroupState.EMPTY
    assert third["classic-1"].empty_since is not None
    assert third["classic-1"].empty_since.at == now_of(fake)


def test_reused_facts_equal_what_a_fresh_gather_builds() -> None:
    fake = cluster()
    reusing, rebuilding = ClusterKnowledge(ObservedTimes()), ClusterKnowledge(ObservedTimes())
    gather_snapshot(fake, reusing, now_of(fake))
    gather_snapshot(fake, rebuilding, now_of(fake))
    fake.advance(5000)
    fake.commit("simple-1", {("t", 1): 9})
    kept = gather_snapshot(fake, reusing, now_of(fake))
    rebuilding.facts = {}  # the same history (ledger, first observations), nothing to reuse
    rebuilt = gather_snapshot(fake, rebuilding, now_of(fake))
    assert by_id(kept) == by_id(rebuilt)
    assert any(by_id(kept)[g] is not by_id(rebuilt)[g] for g in by_id(kept))


def test_a_record_applied_to_the_ledger_outside_a_read_is_seen() -> None:
    fake = cluster()
    memory = ClusterKnowledge(ObservedTimes())
    first = by_id(gather_snapshot(fake, memory, now_of(fake)))
    assert memory.ledger is not None
    tombstones = [r for r in fake.read_offsets_log({}) if r.value is not None][:1]
    record = tombstones[0]
    memory.ledger.apply(record.key, None, fake.now_ms, record.partition, 10_000)  # offset deleted
    second = by_id(gather_snapshot(fake, memory, now_of(fake)))
    changed = [
        g for g in first if g in second and second[g] is not first[g] and first[g].state is GroupState.EMPTY
    ]
    assert changed, "the group whose offset was deleted must be rebuilt"


def test_nothing_is_reused_after_the_ledger_is_rebuilt_or_the_scope_changes() -> None:
    fake = cluster()
    memory = ClusterKnowledge(ObservedTimes())
    first = by_id(gather_snapshot(fake, memory, now_of(fake)))
    memory.ledger = None  # e.g. rebuilt after a gap or a long pause
    second = by_id(gather_snapshot(fake, memory, now_of(fake)))
    assert second["simple-1"] is not first["simple-1"]
    assert second["simple-1"] == first["simple-1"]
    third = by_id(gather_snapshot(fake, memory, now_of(fake), lambda g: g.startswith("simple")))
    assert third["simple-1"] is not second["simple-1"]


def test_the_ledger_reports_the_groups_its_records_touched() -> None:
    fake = cluster()
    ledger = OffsetsLedger(lambda g: g != "simple-2")
    records = list(fake.read_offsets_log({}))
    for r in records[:2]:
        ledger.apply(r.key, r.value, r.timestamp_ms, r.partition, r.offset)
    assert ledger.take_touched() is None  # nothing was tracked before the first call
    for r in records[2:]:
        ledger.apply(r.key, r.value, r.timestamp_ms, r.partition, r.offset)
    touched = ledger.take_touched()
    assert touched is not None and "simple-2" not in touched  # out of scope: never applied
    assert ledger.take_touched() == set()


def test_later_passes_reuse_verdicts_and_plan_exactly_like_a_fresh_pass() -> None:
    fake = cluster()
    policies = [policy(simpleGroupOffsetRetention="1d", emptyGroupRetention="2d")]
    memory = ClusterKnowledge(ObservedTimes())
    for step in range(6):
        fake.advance(DAY_MS // 3)
        if step == 3:
            fake.commit("simple-2", {("u", 0): 4})
        kept = gather_and_decide(fake, memory, policies, now_of(fake))
        # The same snapshot decided without remembered verdicts.
        assert list(kept.plans) == decide_many(policies, kept.snapshot, now_of(fake))
    assert len(memory.verdicts) > 0


def test_share_groups_are_always_rebuilt_their_start_offsets_are_not_in_the_log() -> None:
    """A share group's start offsets live in __share_group_state: they can move (an
    AlterShareGroupOffsets, a consumer acknowledging) without a __consumer_offsets record."""
    fake = cluster()
    fake.add_group("shared", GroupKind.SHARE)
    fake.alter_share_offsets("shared", {TopicPartition("t", 0): 5})
    memory = ClusterKnowledge(ObservedTimes())
    first = by_id(gather_snapshot(fake, memory, now_of(fake)))
    fake.alter_share_offsets("shared", {TopicPartition("t", 0): 9})
    second = by_id(gather_snapshot(fake, memory, now_of(fake)))
    assert second["simple-1"] is first["simple-1"]
    assert [o.offset for o in second["shared"].offsets] == [9]


def test_a_recheck_of_some_groups_neither_uses_nor_consumes_the_kept_facts() -> None:
    """The re-check before a deletion step (cleanup/recheck.py) reads the log's tail for a few
    groups; a change it read for another group must still reach the next full gather."""
    from groupwarden.cleanup.gather import regather

    fake = cluster()
    memory = ClusterKnowledge(ObservedTimes())
    first = by_id(gather_snapshot(fake, memory, now_of(fake)))
    fake.advance(1000)
    fake.commit("simple-2", {("u", 0): 7})
    rechecked = regather(fake, memory, now_of(fake), memory.scope, [first["simple-1"]])
    assert [g.group_id for g in rechecked.groups] == ["simple-1"]
    assert set(memory.facts) == set(first) - {"app"}  # the full gather's kept facts, untouched
    second = by_id(gather_snapshot(fake, memory, now_of(fake)))
    assert [o.offset for o in second["simple-2"].offsets] == [7]
    assert second["simple-1"] is first["simple-1"]


def test_a_recheck_describes_share_and_streams_groups_with_their_own_apis() -> None:
    from groupwarden.cleanup.gather import regather

    fake = cluster()
    fake.add_group("shared", GroupKind.SHARE)
    fake.alter_share_offsets("shared", {TopicPartition("t", 0): 5})
    memory = ClusterKnowledge(ObservedTimes())
    first = by_id(gather_snapshot(fake, memory, now_of(fake)))
    rechecked = by_id(regather(fake, memory, now_of(fake), memory.scope, [first["shared"]]))
    assert rechecked["shared"].kind is GroupKind.SHARE
    assert rechecked["shared"].state is GroupState.EMPTY
    assert [o.offset for o in rechecked["shared"].offsets] == [5]
