"""The pure pieces the fleet audit builds on: ledger rows, commit compaction, snapshots from the
log alone, come-backs. No Spark here: the Spark job is proven equal in tests/integration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from groupwarden.cleanup.gather import ClusterKnowledge, gather_snapshot
from groupwarden.core.decide_many import decide_many
from groupwarden.core.observed_clocks import ObservedTimes
from groupwarden.core.policy import ConsumerGroupPolicy, parse_policy
from groupwarden.core.render import plan_to_json
from groupwarden.core.snapshot import GroupKind, GroupState, TimestampSource
from groupwarden.offsets_log import LogRecord, OffsetsLedger
from groupwarden.offsets_log.history import ReplayWithHistory, comebacks_longer_than
from groupwarden.offsets_log.records import GroupMetadataKey
from groupwarden.offsets_log.rows import group_from_row, group_row
from groupwarden.offsets_log.snapshot import ledger_answers, snapshot_from_ledger
from groupwarden.testing.fake_kafka import FakeKafka
from groupwarden.testing.offsets_log_encoder import encode_key
from groupwarden.testing.synthetic_offsets_log import synthetic_log

DAY_MS = 86_400_000


def policy(name: str, include: list[str], **rules: str) -> ConsumerGroupPolicy:
    return parse_policy(
        {
            "apiVersion": "groupwarden.io/v1beta1",
            "kind": "ConsumerGroupPolicy",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "kafka": {"bootstrapServers": "fake:9092"},
                "selector": {"include": include, "groupTypes": ["classic", "consumer", "simple"]},
                "rules": rules,
                "limits": {"maxDeletionRatio": 1.0},
            },
        }
    )


def compact_commits(records: list[LogRecord]) -> list[LogRecord]:
    """What each task of the Spark job does (fleet/partition_audit.py), in plain Python: the latest
    OffsetCommit per (partition, key without its type); every other record as is; log order."""
    latest: dict[tuple[int, bytes], LogRecord] = {}
    others: list[LogRecord] = []
    for record in records:
        key = record[0]
        if key is not None and len(key) >= 2 and key[0] == 0 and key[1] in (0, 1):
            slot = (record[3], bytes(key[2:]))
            if slot not in latest or latest[slot][4] < record[4]:
                latest[slot] = record
        else:
            others.append(record)
    return sorted([*latest.values(), *others], key=lambda r: (r[3], r[4]))


def ledger_of(records: list[LogRecord]) -> OffsetsLedger:
    ledger = OffsetsLedger()
    ledger.apply_many(records)
    return ledger


def state_of(ledger: OffsetsLedger) -> dict[str, object]:
    return {g: (ledger.group(g), ledger.offsets(g)) for g in ledger.groups()}


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_compacting_commits_first_gives_the_same_ledger(seed: int) -> None:
    records = list(synthetic_log(30_000, 300, partitions=5, seed=seed))
    full, compacted = ledger_of(records), ledger_of(compact_commits(records))
    assert len(compact_commits(records)) < len(records) // 2
    assert state_of(full) == state_of(compacted)
    assert full.positions == compacted.positions


def test_rows_round_trip_to_the_ledgers_own_answers() -> None:
    ledger = ledger_of(list(synthetic_log(20_000, 200, partitions=3, seed=5)))
    kinds = set()
    for view, offsets in ledger_answers(ledger):
        kinds.add(view.kind)
        assert group_from_row(group_row(view, offsets)) == (view, offsets)
    assert {GroupKind.CLASSIC, GroupKind.CONSUMER, GroupKind.SIMPLE} <= kinds


def fake_cluster() -> FakeKafka:
    fake = FakeKafka(topics=["orders", "payments", "old"], cluster_id="fake-1")
    fake.add_group("simple-old", GroupKind.SIMPLE, offsets={("orders", 0): 5, ("orders", 1): 6})
    fake.add_group("classic-gone", subscribed=["orders"], offsets={("orders", 0): 7})
    fake.add_group("kip848-gone", GroupKind.CONSUMER, subscribed=["payments"], offsets={("payments", 0): 1})
    fake.add_group("stable-moved-on", subscribed=["payments"], offsets={("old", 0): 3, ("payments", 1): 2})
    fake.advance(1000)
    fake.leave("classic-gone")
    fake.leave("kip848-gone")
    fake.advance(3 * DAY_MS)
    fake.add_group("simple-new", GroupKind.SIMPLE, offsets={("orders", 0): 9})
    fake.commit("stable-moved-on", {("payments", 1): 4})
    fake.advance(1000)
    return fake


def test_snapshot_from_the_log_alone_plans_like_gather() -> None:
    fake = fake_cluster()
    now = datetime.fromtimestamp(fake.now_ms / 1000, tz=UTC)
    policies = [
        policy(
            "a",
            ["classic-*", "kip848-*", "simple-old"],
            emptyGroupRetention="1d",
            simpleGroupOffsetRetention="1d",
        ),
        policy(
            "b", ["stable-*", "simple-*"], unsubscribedOffsetRetention="2d", simpleGroupOffsetRetention="2h"
        ),
    ]
    gathered = gather_snapshot(fake, ClusterKnowledge(ObservedTimes()), now)
    ledger = ledger_of(
        [(r.key, r.value, r.timestamp_ms, r.partition, r.offset) for r in fake.read_offsets_log({})]
    )
    logged = snapshot_from_ledger(ledger, now, cluster_id=fake.cluster_id(), topics=fake.list_topics())

    expected = [plan_to_json(p) for p in decide_many(policies, gathered, now)]
    assert [plan_to_json(p) for p in decide_many(policies, logged, now)] == expected
    planned = {(a["group"], a["rule"]) for p in expected for a in p["actions"]}
    assert planned == {
        ("classic-gone", "emptyGroupRetention"),
        ("kip848-gone", "emptyGroupRetention"),
        ("stable-moved-on", "unsubscribedOffsetRetention"),
    }  # simple-old is selected by both policies: DryRun overlap blocks it, in both snapshots alike
    states = {g.group_id: g.state for g in logged.groups}
    assert states["stable-moved-on"] is GroupState.STABLE and states["classic-gone"] is GroupState.EMPTY


def test_an_empty_group_without_a_logged_empty_since_is_dated_now_as_observed() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("simple", GroupKind.SIMPLE, offsets={("t", 0): 1})
    ledger = ledger_of(
        [(r.key, r.value, r.timestamp_ms, r.partition, r.offset) for r in fake.read_offsets_log({})]
    )
    now = datetime(2030, 1, 1, tzinfo=UTC)
    [group] = snapshot_from_ledger(ledger, now).groups
    assert group.empty_since is not None
    assert (group.empty_since.at, group.empty_since.source) == (now, TimestampSource.OBSERVED)
    assert group.offsets[0].committed_at is not None
    assert group.offsets[0].committed_at.source is TimestampSource.OFFSETS_LOG


def test_comebacks_of_classic_and_kip848_groups_are_found_with_their_pause() -> None:
    fake = FakeKafka(topics=["t"])
    fake.add_group("classic", subscribed=["t"], offsets={("t", 0): 1})
    fake.add_group("kip848", GroupKind.CONSUMER, subscribed=["t"], offsets={("t", 0): 1})
    fake.add_group("never-back", subscribed=["t"])
    fake.advance(1000)
    left = fake.now_ms
    for group in ("classic", "kip848", "never-back"):
        fake.leave(group)
    fake.advance(2 * DAY_MS)
    fake.join("classic", ["t"])
    fake.join("kip848", ["t"])
    replay = ReplayWithHistory()
    replay.apply_many(
        (r.key, r.value, r.timestamp_ms, r.partition, r.offset) for r in fake.read_offsets_log({})
    )

    found = {c.group: c for c in replay.comebacks}
    assert set(found) == {"classic", "kip848"}
    for comeback in found.values():
        assert comeback.empty_since_ms == left
        assert comeback.pause == timedelta(days=2)
    assert found["kip848"].kind is GroupKind.CONSUMER
    assert comebacks_longer_than(replay.comebacks, timedelta(days=1)) == sorted(
        found.values(), key=lambda c: c.group
    )
    assert comebacks_longer_than(replay.comebacks, timedelta(days=3)) == []
    # the tracked replay builds exactly the ledger a plain replay builds
    plain = ledger_of(
        [(r.key, r.value, r.timestamp_ms, r.partition, r.offset) for r in fake.read_offsets_log({})]
    )
    assert state_of(replay.ledger) == state_of(plain)


def test_a_replay_names_the_groups_whose_pending_empty_since_it_forgets() -> None:
    """`on_forgotten`: a membership record that leaves the group gone from the ledger while its
    Empty-since is pending. Fed every record, the ledger keeps a group whose GroupMetadata was
    deleted while its offsets live (and finds its come-back); fed only the membership records, as
    a fleet task's ledger is (fleet/partition_audit.py), it forgets it and says so."""
    fake = FakeKafka(topics=["t"])
    fake.add_group("classic", subscribed=["t"], offsets={("t", 0): 1})
    fake.advance(1000)
    fake.leave("classic")
    records = [(r.key, r.value, r.timestamp_ms, r.partition, r.offset) for r in fake.read_offsets_log({})]
    _, _, at, partition, offset = records[-1]
    records.append((encode_key(GroupMetadataKey("classic")), None, at + 1, partition, offset + 1))
    fake.advance(2 * DAY_MS)
    fake.join("classic", ["t"])
    back = [(r.key, r.value, r.timestamp_ms, r.partition, r.offset) for r in fake.read_offsets_log({})][-1]
    records.append((back[0], back[1], back[2], partition, offset + 2))

    forgotten: list[str] = []
    every = ReplayWithHistory(on_forgotten=forgotten.append)
    every.apply_many(records)
    assert forgotten == [] and [c.group for c in every.comebacks] == ["classic"]
    membership_only = ReplayWithHistory(on_forgotten=forgotten.append)
    membership_only.apply_many(
        r for r in records if not (r[0] is not None and r[0][:2] in (b"\0\0", b"\0\1"))
    )
    assert forgotten == ["classic"] and membership_only.comebacks == []


def test_log_time_memo_gives_the_same_times_and_snapshots() -> None:
    """`LogTimes` (a fleet task's memo of `log_time`) is `log_time`, clamping included, and a
    snapshot built with it equals one built without."""
    from groupwarden.offsets_log.snapshot import ledger_answers, snapshot_from_answers
    from groupwarden.offsets_log.views import LogTimes, log_time

    times = LogTimes()
    for ms in (0, 1_700_000_000_123, -(2**63), 2**63 - 1, 1_700_000_000_123):
        assert times[ms] == log_time(ms)
    assert len(times) == 4
    ledger = OffsetsLedger()
    ledger.apply_many(list(synthetic_log(3_000, 80, partitions=2, seed=5)))
    now = datetime(2030, 1, 1, tzinfo=UTC)
    answers = ledger_answers(ledger)
    assert snapshot_from_answers(answers, now, times=LogTimes()) == snapshot_from_answers(answers, now)
