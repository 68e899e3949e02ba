"""A widening of a ledger's scope ends when the read that replays the log is finished
(`finish_read`), also on the partitions whose log did not grow since the old positions: the ledger
can then be saved (the CLI's checkpoint), rejects out-of-scope commits on their raw bytes again,
and knows exactly what a ledger that read the whole log in the wide scope knows."""

from __future__ import annotations

import pickle
from collections import defaultdict
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupwarden.offsets_log import OffsetCommitKey, OffsetCommitValue, OffsetsLedger
from groupwarden.offsets_log import ledger as ledger_module
from groupwarden.offsets_log._wire import Buffer
from groupwarden.offsets_log.codec import read_offset_commit_key
from groupwarden.offsets_log.ledger import GroupPredicate, LogRecord
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytestmark = pytest.mark.unit

PARTITIONS = 6


def _by_partition(records: list[LogRecord]) -> dict[int, list[LogRecord]]:
    log: dict[int, list[LogRecord]] = defaultdict(list)
    for record in records:
        log[record[3]].append(record)
    assert all(r[4] == i for rs in log.values() for i, r in enumerate(rs))  # offset = index
    return {p: log[p] for p in range(PARTITIONS)}


# Each partition's whole log; a test's log at some moment is a prefix of each (`Ends`).
LOG = _by_partition(list(synthetic_log(12_000, 400, partitions=PARTITIONS, seed=23)))
Ends = Mapping[int, int]  # partition -> end offset of the log at some moment (0: empty)
EVERYTHING: Ends = {p: len(records) for p, records in LOG.items()}
SMALL_LOG = _by_partition(list(synthetic_log(2_000, 80, partitions=PARTITIONS, seed=29)))  # (hypothesis)


def in_group_mod(*residues: int) -> GroupPredicate:
    def accepts(group: str) -> bool:
        return int(group.rsplit("-", 1)[1]) % 4 in residues

    return accepts


NARROW = in_group_mod(0)
WIDE = in_group_mod(0, 1, 2)


def read(
    ledger: OffsetsLedger, ends: Ends, *, tell_ends: bool = False, log: Mapping[int, list[LogRecord]] = LOG
) -> None:
    """What the gather does with a reader's bounded read: each partition from the ledger's position
    up to the log's end, then the read is finished (told its ends, or only that it is finished)."""
    positions = dict(ledger.positions)
    ledger.apply_many(r for p, end in sorted(ends.items()) for r in log[p][positions.get(p, 0) : end])
    ledger.finish_read(ends if tell_ends else None)


def saved_and_loaded(ledger: OffsetsLedger, scope: GroupPredicate | None) -> OffsetsLedger:
    """Through a pickle, as the CLI's checkpoint saves and loads it (the scope is set again)."""
    loaded = pickle.loads(pickle.dumps(ledger, protocol=pickle.HIGHEST_PROTOCOL))
    assert isinstance(loaded, OffsetsLedger)
    loaded.narrow_scope(scope)
    return loaded


def read_from_the_start(
    scope: GroupPredicate | None, ends: Ends, log: Mapping[int, list[LogRecord]] = LOG
) -> OffsetsLedger:
    ledger = OffsetsLedger(scope)
    read(ledger, ends, log=log)
    return ledger


def view(ledger: OffsetsLedger) -> dict[str, object]:
    return {g: (ledger.group(g), ledger.offsets(g)) for g in sorted(ledger.groups())}


def assert_same(ledger: OffsetsLedger, expected: OffsetsLedger) -> None:
    assert view(ledger) == view(expected)
    assert ledger.positions == expected.positions


def test_a_widened_ledger_is_saved_after_its_read_and_resumes_like_a_wide_read_from_the_start() -> None:
    third = {p: len(records) // 3 for p, records in LOG.items()}
    # At the checkpoint: 0, 4 whole, 1 and 2 in part, 3 and 5 empty.
    checkpoint = {0: EVERYTHING[0], 1: third[1], 2: third[2], 3: 0, 4: EVERYTHING[4], 5: 0}
    # At the next run: 0, 2 and 4 did not grow, 1 grew, 3 has its first records, 5 is still empty.
    later = {0: EVERYTHING[0], 1: 2 * third[1], 2: third[2], 3: third[3], 4: EVERYTHING[4], 5: 0}
    tail = {**EVERYTHING, 5: 0}  # the run after: every partition but 5 grew (or is whole)

    ledger = saved_and_loaded(read_from_the_start(NARROW, checkpoint), NARROW)
    ledger.widen_scope(WIDE)
    read(ledger, later)
    assert_same(ledger, read_from_the_start(WIDE, later))
    ledger = saved_and_loaded(ledger, WIDE)  # refused before: 0, 2 and 4 were replaying for good
    assert_same(ledger, read_from_the_start(WIDE, later))
    read(ledger, tail)
    assert_same(ledger, read_from_the_start(WIDE, tail))
    assert_same(saved_and_loaded(ledger, WIDE), read_from_the_start(WIDE, tail))


def test_widening_to_every_group_ends_with_the_read_too() -> None:
    half = {p: len(records) // 2 for p, records in LOG.items()}
    ledger = read_from_the_start(NARROW, half)
    ledger.widen_scope(None)
    read(ledger, half)  # no partition grew
    ledger = saved_and_loaded(ledger, None)
    read(ledger, EVERYTHING)
    assert_same(ledger, read_from_the_start(None, EVERYTHING))


def test_a_ledger_cannot_be_saved_before_the_read_that_widens_it_is_finished() -> None:
    ledger = read_from_the_start(NARROW, EVERYTHING)
    ledger.widen_scope(WIDE)
    positions = dict(ledger.positions)
    ledger.apply_many(r for p in sorted(LOG) for r in LOG[p][positions.get(p, 0) :])  # not finished
    with pytest.raises(ValueError, match="widening"):
        pickle.dumps(ledger)
    ledger.finish_read()
    assert_same(saved_and_loaded(ledger, WIDE), read_from_the_start(WIDE, EVERYTHING))


def test_a_read_told_its_ends_ends_the_widening_only_where_it_reached_the_old_positions() -> None:
    """A reader of some partitions, or up to some offsets (`OffsetsLogReader.read(partitions=,
    until=)`), tells how far each partition was read: the others go on replaying."""
    ledger = read_from_the_start(NARROW, EVERYTHING)
    ledger.widen_scope(WIDE)
    part = {0: EVERYTHING[0], 1: EVERYTHING[1] // 2, 2: EVERYTHING[2]}
    read(ledger, part, tell_ends=True)
    with pytest.raises(ValueError, match="widening"):
        pickle.dumps(ledger)  # 1 was read to half its old position, 3 to 5 not at all
    read(ledger, {1: EVERYTHING[1], 3: EVERYTHING[3]}, tell_ends=True)
    with pytest.raises(ValueError, match="widening"):
        pickle.dumps(ledger)
    read(ledger, {4: EVERYTHING[4], 5: EVERYTHING[5]}, tell_ends=True)
    assert_same(saved_and_loaded(ledger, WIDE), read_from_the_start(WIDE, EVERYTHING))


def test_finishing_a_read_without_a_widening_changes_nothing() -> None:
    half = {p: len(records) // 2 for p, records in LOG.items()}
    ledger = read_from_the_start(NARROW, half)
    before = (view(ledger), dict(ledger.positions), ledger.records, ledger.out_of_scope)
    ledger.finish_read()
    ledger.finish_read({0: 0})
    assert (view(ledger), dict(ledger.positions), ledger.records, ledger.out_of_scope) == before


def test_a_read_that_ends_below_an_old_position_still_ends_the_widening() -> None:
    """The tail below the old position is gone (a tombstone and the value it deleted, compacted
    away after delete.retention.ms): the replay never gets there, the finished read does."""

    def commit(group: str, offset: int | None, at: int) -> LogRecord:
        value = None if offset is None else encode_value(OffsetCommitValue(offset, -1, "", 1_000, -1))
        return (encode_key(OffsetCommitKey(group, "t", 0)), value, 1_000, 0, at)

    before = [commit("g-4", 5, 0), commit("g-1", 7, 1), commit("g-4", None, 2)]
    compacted = [before[1]]
    ledger = OffsetsLedger(NARROW)
    ledger.apply_many(before)
    ledger.widen_scope(WIDE)
    ledger.apply_many(compacted)
    ledger.finish_read()
    wide = OffsetsLedger(WIDE)
    wide.apply_many(compacted)
    ledger = saved_and_loaded(ledger, WIDE)
    assert view(ledger) == view(wide) and list(ledger.groups()) == ["g-1"]
    tail = [commit("g-0", 9, 3), commit("g-8", 1, 4)]
    ledger.apply_many(tail)
    wide.apply_many(tail)
    assert view(ledger) == view(wide) and sorted(ledger.groups()) == ["g-0", "g-1", "g-8"]


def test_out_of_scope_commits_are_rejected_on_their_raw_bytes_again_once_the_widening_is_finished(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: a partition that did not grow since the widening kept replaying, and every commit of
    every out-of-scope group was decoded for good."""
    half = {p: len(records) // 2 for p, records in LOG.items()}
    half[0] = EVERYTHING[0]  # partition 0 never grows again
    ledger = read_from_the_start(NARROW, half)
    ledger.widen_scope(WIDE)
    read(ledger, half)
    decoded: list[bytes] = []

    def counted(key: bytes) -> tuple[str, str, int]:
        decoded.append(bytes(key))
        return read_offset_commit_key(key)

    monkeypatch.setattr(ledger_module, "read_offset_commit_key", counted)
    read(ledger, EVERYTHING)
    assert ledger._rejected_raw  # the rejected groups' names, as bytes
    commits = [
        r[0]
        for p, records in LOG.items()
        for r in records[half[p] :]
        if r[0] is not None and r[0][:2] in (b"\x00\x00", b"\x00\x01") and r[0][4:5] != b"x"  # not corrupt
    ]
    out_of_scope = [key for key in commits if not WIDE(group_of(key))]
    groups = {group_of(key) for key in out_of_scope}
    assert len(groups) * 5 < len(out_of_scope)  # most out-of-scope commits are of a group seen before
    # Each out-of-scope group is decoded once, on its first commit: its later ones are not.
    assert len([key for key in decoded if not WIDE(group_of(key))]) <= len(groups)
    assert_same(ledger, read_from_the_start(WIDE, EVERYTHING))


def group_of(key: Buffer) -> str:
    return bytes(key[4 : 4 + ((key[2] << 8) | key[3])]).decode()


@st.composite
def moments(draw: st.DrawFn) -> tuple[Ends, Ends, Ends]:
    """Per partition, the log's end at the checkpoint, at the run that widens and at the next
    run: each often equal to the one before (a partition that did not grow), sometimes 0."""
    first: dict[int, int] = {}
    second: dict[int, int] = {}
    third: dict[int, int] = {}
    for p, records in SMALL_LOG.items():
        end = len(records)
        cuts = sorted(
            draw(
                st.lists(
                    st.sampled_from((0, end // 5, end // 2, end)) | st.integers(0, end),
                    min_size=3,
                    max_size=3,
                )
            )
        )
        first[p], second[p], third[p] = cuts
    return first, second, third


SCOPES = st.sets(st.integers(0, 3), max_size=4)


@settings(max_examples=60)
@given(moments(), SCOPES, st.none() | SCOPES)
def test_a_widening_saved_and_resumed_equals_a_wide_read_from_the_start(
    ends: tuple[Ends, Ends, Ends], narrow: set[int], added: set[int] | None
) -> None:
    at_checkpoint, at_widening, later = ends
    old = in_group_mod(*narrow)
    new = None if added is None else in_group_mod(*(narrow | added))
    ledger = saved_and_loaded(read_from_the_start(old, at_checkpoint, SMALL_LOG), old)
    ledger.widen_scope(new)
    read(ledger, at_widening, log=SMALL_LOG)
    assert_same(ledger, read_from_the_start(new, at_widening, SMALL_LOG))
    ledger = saved_and_loaded(ledger, new)
    read(ledger, later, log=SMALL_LOG)
    assert_same(ledger, read_from_the_start(new, later, SMALL_LOG))
