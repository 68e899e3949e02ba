"""The observation memory as stored records: exact round trips, changes-only batches, and the
age rule (an entry not confirmed within the bound restarts its clock; none ever gets earlier)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from groupwarden.core.observation_store_records import (
    BatchPieces,
    ObservationBatch,
    StoredGroup,
    StoredObservations,
    adopt,
    batch_groups,
    batch_records,
    fold,
    group_key,
    pass_key,
    restore,
    resume,
    take_batch,
)
from groupwarden.core.observed_clocks import GroupObservations, ObservedTimes
from groupwarden.core.snapshot import TopicPartition

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 20, 8, 0, 0, 123456, tzinfo=UTC)
GAP = timedelta(minutes=30)
TP = TopicPartition("orders", 3)


def stored_after(observed: ObservedTimes, at: datetime, cluster: str = "c1") -> StoredObservations:
    return fold(cluster, batch_records(take_batch(observed, cluster, at, "replica-a")))


def test_a_restored_clock_is_the_first_observation_to_the_microsecond() -> None:
    observed = ObservedTimes()
    observed.observe_group_state("g", True, T0)
    observed.observe_offset("g", TP, 42, T0 + timedelta(microseconds=1))
    restored = restore(stored_after(observed, T0 + timedelta(seconds=1)), T0 + timedelta(minutes=5), GAP)
    assert restored.empty_since == {"g": T0}
    assert restored.offsets == {("g", TP): (42, T0 + timedelta(microseconds=1))}
    # Observed again after the restart: the clock goes on from the stored time, not from now.
    assert restored.observe_group_state("g", True, T0 + timedelta(minutes=5)) is not None
    assert restored.empty_since["g"] == T0
    assert not restored.changed  # nothing to write: the store already says so


@pytest.mark.parametrize(
    ("silence", "kept"), [(GAP, True), (GAP + timedelta(microseconds=1), False), (timedelta(0), True)]
)
def test_an_entry_not_confirmed_within_the_bound_restarts(silence: timedelta, kept: bool) -> None:
    observed = ObservedTimes()
    observed.observe_group_state("g", True, T0)
    written = T0 + timedelta(minutes=3)
    restored = restore(stored_after(observed, written), written + silence, GAP)
    assert ("g" in restored.empty_since) is kept
    # A restarted entry is named for a tombstone: otherwise a later pass record would make the
    # stale record look confirmed at the next load.
    assert restored.changed == (set() if kept else {"g"})
    later = written + silence + timedelta(seconds=1)
    since = restored.observe_group_state("g", True, later)
    assert since is not None and since.at == (T0 if kept else later)


def test_the_pass_record_confirms_entries_written_long_before() -> None:
    observed = ObservedTimes()
    observed.observe_group_state("g", True, T0)
    stored = stored_after(observed, T0)
    for hour in range(1, 5):  # four hours of passes that changed nothing: only pass records
        more = fold("c1", batch_records(take_batch(observed, "c1", T0 + timedelta(hours=hour), "a")))
        assert not more.groups and more.last_pass == T0 + timedelta(hours=hour)
        stored.last_pass = more.last_pass
    assert restore(stored, T0 + timedelta(hours=4, minutes=10), GAP).empty_since == {"g": T0}
    assert restore(stored, T0 + timedelta(hours=4, minutes=31), GAP).empty_since == {}


def test_batches_hold_only_the_changes_and_tombstones_for_forgotten_groups() -> None:
    observed = ObservedTimes()
    for i in range(100):
        observed.observe_group_state(f"g{i}", True, T0)
    first = take_batch(observed, "c1", T0, "a")
    assert len(first.groups) == 100 and not first.tombstones
    # The next pass sees the same: nothing but the pass record.
    for i in range(100):
        observed.observe_group_state(f"g{i}", True, T0 + timedelta(minutes=1))
    quiet = take_batch(observed, "c1", T0 + timedelta(minutes=1), "a")
    assert quiet.size == 0 and len(batch_records(quiet)) == 1
    # One group became active, another committed a new offset, a third was deleted.
    observed.observe_group_state("g1", False, T0 + timedelta(minutes=2))
    observed.observe_offset("g2", TP, 7, T0 + timedelta(minutes=2))
    observed.forget_missing({f"g{i}" for i in range(100) if i != 3}, lambda _g: ())
    changed = take_batch(observed, "c1", T0 + timedelta(minutes=2), "a")
    assert set(changed.groups) == {"g2"} and set(changed.tombstones) == {"g1", "g3"}
    records = dict(batch_records(changed))
    assert records[group_key("c1", "g1")] is None and records[group_key("c1", "g3")] is None
    # Folded over the first batch, the store is the memory.
    stored = fold("c1", [*batch_records(first), *batch_records(quiet), *batch_records(changed)])
    assert restore(stored, T0 + timedelta(minutes=3), GAP) == observed


def test_other_clusters_other_formats_and_damaged_records_set_no_clock() -> None:
    observed = ObservedTimes()
    observed.observe_group_state("g", True, T0)
    observed.observe_group_state("h", True, T0)
    records = batch_records(take_batch(observed, "c1", T0, "a"))
    damaged = (group_key("c1", "h"), b'{"format": "groupwarden-observations/1", "cluster": "c1"')
    stored = fold("c1", [*records, damaged, (b"not json", b"{}")])
    assert set(stored.groups) == {"g"}  # h's damaged latest record voids its older one
    assert fold("another-cluster", records).groups == {}


def test_a_store_opened_late_is_made_equal_to_the_memory() -> None:
    stored = stored_after(_empty("old", T0), T0)
    memory = _empty("new", T0 + timedelta(minutes=1))
    adopt(memory, stored)
    batch = take_batch(memory, "c1", T0 + timedelta(minutes=1), "a")
    assert set(batch.groups) == {"new"} and batch.tombstones == ("old",)


def test_the_memory_restarts_as_a_whole_when_it_was_last_confirmed_too_long_ago() -> None:
    observed = _empty("g", T0)
    observed.observe_offset("g", TP, 1, T0)
    observed.take_changes()
    assert not observed.drop_unconfirmed(T0, T0 + GAP, GAP)
    assert observed.drop_unconfirmed(T0, T0 + GAP + timedelta(seconds=1), GAP)
    assert not observed.empty_since and not observed.offsets and observed.changed == {"g"}


def _empty(group: str, at: datetime) -> ObservedTimes:
    observed = ObservedTimes()
    observed.observe_group_state(group, True, at)
    return observed


def test_resuming_after_one_pass_takes_only_the_stored_clocks_that_agree_with_it() -> None:
    before = ObservedTimes()
    before.observe_group_state("idle", True, T0)
    before.observe_group_state("back", True, T0)
    before.observe_offset("idle", TP, 42, T0)
    before.observe_offset("moved", TP, 7, T0)
    stored = stored_after(before, T0 + timedelta(minutes=1))
    now = T0 + timedelta(minutes=10)
    # A new process's first pass: idle still Empty with offset 42; "back" is active now; "moved"
    # committed 8 since; "new" was never stored.
    seen = ObservedTimes()
    seen.observe_group_state("idle", True, now)
    seen.observe_group_state("back", False, now)
    seen.observe_group_state("new", True, now)
    seen.observe_offset("idle", TP, 42, now)
    seen.observe_offset("moved", TP, 8, now)
    assert resume(seen, stored, now, GAP) == {"idle": 2}  # its Empty-since and its offset
    assert seen.empty_since == {"idle": T0, "new": now}
    assert seen.offsets == {("idle", TP): (42, T0), ("moved", TP): (8, now)}
    # The store is made equal to the memory: every group written again, "back" tombstoned.
    assert {"idle", "new", "moved", "back"} <= seen.changed


def test_resuming_never_takes_a_clock_not_confirmed_within_the_bound() -> None:
    before = ObservedTimes()
    before.observe_group_state("idle", True, T0)
    stored = stored_after(before, T0)
    now = T0 + GAP + timedelta(seconds=1)
    seen = ObservedTimes()
    seen.observe_group_state("idle", True, now)
    assert resume(seen, stored, now, GAP) == {}
    assert seen.empty_since == {"idle": now}


def _mixed_memory() -> ObservedTimes:
    """23 groups: Empty-since clocks, offset clocks, both, and 3 forgotten (tombstones)."""
    observed = ObservedTimes()
    for i in range(20):
        if i % 3 != 1:
            observed.observe_group_state(f"g{i:02d}", True, T0 + timedelta(seconds=i))
        if i % 3 != 0:
            for p in range(i % 4 + 1):
                tp = TopicPartition("orders", p)
                observed.observe_offset(f"g{i:02d}", tp, 10 * i + p, T0 + timedelta(microseconds=p))
    observed.take_changes()
    stored = stored_after(observed, T0)
    for i in range(20, 23):  # stored once, gone from the memory since
        stored.groups[f"g{i}"] = StoredGroup(f"g{i}", GroupObservations(T0, {}), T0)
    adopt(observed, stored)
    return observed


@pytest.mark.parametrize("size", [1, 4, 7, 23, 1000])
def test_a_pass_in_pieces_stores_what_one_batch_stores(size: int) -> None:
    whole, pieced = _mixed_memory(), _mixed_memory()
    batch = take_batch(whole, "c1", T0 + timedelta(minutes=1), "a")
    pieces = BatchPieces(pieced, "c1", T0 + timedelta(minutes=1), "a", size=size)
    batches = list(pieces)
    assert len(batches) == len(pieces) == -(-23 // size)
    assert all(b.size <= size for b in batches)
    # The pass record only once, in the last piece, after every group of the pass.
    assert [b.pass_record for b in batches] == [False] * (len(batches) - 1) + [True]
    records = [r for b in batches for r in batch_records(b)]
    assert [k for k, _ in records].index(pass_key("c1")) == len(records) - 1
    assert sorted(records, key=repr) == sorted(batch_records(batch), key=repr)
    assert {g for b in batches for g in batch_groups(b)} == batch_groups(batch) == set(pieces.groups)
    assert not pieced.changed  # taken at once, like `take_batch`
    assert pieces.unwritten(len(pieces)) == [] and sorted(pieces.unwritten(0)) == sorted(pieces.groups)


def test_a_pass_without_changes_is_one_piece_with_the_pass_record() -> None:
    (batch,) = BatchPieces(ObservedTimes(), "c1", T0, "a")
    assert batch.size == 0 and batch.pass_record
    assert batch_records(batch) == [(pass_key("c1"), batch_records(batch)[0][1])]


def test_pieces_are_built_one_at_a_time_from_one_pass_over_the_offsets() -> None:
    observed = _mixed_memory()
    pieces = [sorted(observed.changed)[i : i + 5] for i in range(0, 23, 5)]
    built = observed.entries_in_pieces(pieces)
    assert next(built) == observed.entries_of(set(pieces[0]))
    observed.forget_offset("g07", TopicPartition("orders", 0))  # between two pieces
    assert next(built) == observed.entries_of(set(pieces[1]))
    assert list(built) == [observed.entries_of(set(p)) for p in pieces[2:]]


def test_a_write_stopped_between_pieces_confirms_nothing_it_did_not_write() -> None:
    """Pieces are safe because the pass record comes last: a stale entry waiting in an unwritten
    piece for its tombstone keeps the confirmation of the last complete pass, so the age rule
    still restarts it; a pass record written first would have made it look confirmed now."""
    before = ObservedTimes()
    before.observe_group_state("z-stale", True, T0)
    stored = stored_after(before, T0)  # confirmed at T0
    now = T0 + timedelta(minutes=20)
    memory = ObservedTimes()  # z-stale was seen active since: no clock, a tombstone to write
    for i in range(4):
        memory.observe_group_state(f"a{i}", True, now)
    adopt(memory, stored)
    batches = list(BatchPieces(memory, "c1", now, "a", size=2))
    assert "z-stale" in batches[-1].tombstones
    partial = fold("c1", [*batch_records(batch_of(stored)), *batch_records(batches[0])])
    assert partial.last_pass == T0 and set(partial.groups) == {"a0", "a1", "z-stale"}
    late = T0 + GAP + timedelta(seconds=1)
    assert set(restore(partial, late, GAP).empty_since) == {"a0", "a1"}  # z-stale restarts
    # The wrong order, for contrast: the same piece with the pass record would confirm it.
    wrong = ObservationBatch("c1", batches[0].groups, (), now, "a", pass_record=True)
    confirmed = fold("c1", [*batch_records(batch_of(stored)), *batch_records(wrong)])
    assert "z-stale" in restore(confirmed, late, GAP).empty_since
    # All pieces written: the store is the memory.
    complete = fold("c1", [*batch_records(batch_of(stored)), *(r for b in batches for r in batch_records(b))])
    assert restore(complete, now + timedelta(seconds=1), GAP) == memory


def batch_of(stored: StoredObservations) -> ObservationBatch:
    """The records that make `stored` again (one batch, its own pass record)."""
    assert stored.last_pass is not None
    groups = {g: e.observations for g, e in stored.groups.items()}
    return ObservationBatch("c1", groups, (), stored.last_pass, "a")
