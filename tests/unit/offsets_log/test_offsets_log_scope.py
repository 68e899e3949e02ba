"""A scoped ledger keeps exactly what an unscoped one knows of the groups in scope, also after its
scope is widened (one replay from the log start) or narrowed."""

from __future__ import annotations

import pytest

from groupwarden.offsets_log import OffsetsLedger
from groupwarden.offsets_log.ledger import LogRecord
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytestmark = pytest.mark.unit

RECORDS = list(synthetic_log(30_000, 600, partitions=5, seed=11))


def in_group_mod(*residues: int) -> object:
    def accepts(group: str) -> bool:
        return int(group.rsplit("-", 1)[1]) % 4 in residues

    return accepts


def read(ledger: OffsetsLedger, records: list[LogRecord]) -> None:
    """What a reader does: from each partition's position to the end of `records`."""
    positions = dict(ledger.positions)
    ledger.apply_many(r for r in records if r[4] >= positions.get(r[3], 0))


def view(ledger: OffsetsLedger) -> dict[str, object]:
    return {g: (ledger.group(g), ledger.offsets(g)) for g in sorted(ledger.groups())}


def expected(accepts: object, records: list[LogRecord]) -> dict[str, object]:
    full = OffsetsLedger()
    full.apply_many(records)
    return {g: v for g, v in view(full).items() if accepts(g)}  # type: ignore[operator]


def test_a_scoped_ledger_equals_the_full_ledger_restricted_to_its_scope() -> None:
    scope = in_group_mod(0)
    ledger = OffsetsLedger(scope)  # type: ignore[arg-type]
    read(ledger, RECORDS)
    assert view(ledger) == expected(scope, RECORDS)
    assert ledger.out_of_scope > 0 and 0 < ledger.group_count < 600


def test_widening_replays_only_the_new_groups_then_continues_with_all() -> None:
    half = len(RECORDS) // 2
    ledger = OffsetsLedger(in_group_mod(0))  # type: ignore[arg-type]
    read(ledger, RECORDS[:half])
    wider = in_group_mod(0, 1, 2)
    ledger.widen_scope(wider)  # type: ignore[arg-type]
    assert ledger.positions == {}  # the next read starts at the log start
    read(ledger, RECORDS)
    assert view(ledger) == expected(wider, RECORDS)


def test_widening_to_every_group_and_narrowing_drop_nothing_they_should_keep() -> None:
    ledger = OffsetsLedger(in_group_mod(3))  # type: ignore[arg-type]
    read(ledger, RECORDS[:10_000])
    ledger.widen_scope(None)
    read(ledger, RECORDS[:20_000])
    assert view(ledger) == expected(lambda g: True, RECORDS[:20_000])
    narrow = in_group_mod(1)
    ledger.narrow_scope(narrow)  # type: ignore[arg-type]
    read(ledger, RECORDS)
    assert view(ledger) == expected(narrow, RECORDS)


def test_widening_away_from_a_scope_drops_groups_out_of_the_new_one() -> None:
    ledger = OffsetsLedger(in_group_mod(0, 1))  # type: ignore[arg-type]
    read(ledger, RECORDS)
    moved = in_group_mod(1, 2)
    ledger.widen_scope(moved)  # type: ignore[arg-type]
    read(ledger, RECORDS)
    assert view(ledger) == expected(moved, RECORDS)


def test_out_of_scope_commits_are_rejected_on_their_raw_group_bytes_until_the_scope_changes() -> None:
    """After a group was rejected once, its OffsetCommit records are skipped before decoding; a
    new scope (narrowed or widened) forgets those rejections."""
    first, second = RECORDS[:15_000], RECORDS[15_000:]
    ledger = OffsetsLedger(in_group_mod(0))
    read(ledger, first)
    assert ledger._rejected_raw  # the rejected groups' names, as bytes
    read(ledger, second)
    assert view(ledger) == expected(in_group_mod(0), RECORDS)

    ledger.widen_scope(in_group_mod(0, 1))
    assert not ledger._rejected_raw
    read(ledger, RECORDS)
    assert view(ledger) == expected(in_group_mod(0, 1), RECORDS)
    ledger.narrow_scope(in_group_mod(1))
    assert not ledger._rejected_raw
    assert view(ledger) == expected(in_group_mod(1), RECORDS)
