"""The ledger's compact storage (offsets_log/_state.py): packed entries and dense partition lists
give back exactly what they stored, whatever the values (the fallbacks keep what does not fit)."""

from __future__ import annotations

import random

import pytest

from groupwarden.offsets_log._state import (
    UNDECODABLE_ENTRY,
    Entry,
    get_partition,
    new_partitions,
    pack_entry,
    partition_count,
    partition_items,
    pop_partition,
    put_partition,
    unpack_entry,
)

pytestmark = pytest.mark.unit

TOPIC_ID = bytes(range(16))
TABLE: list[bytes | None] = [None, TOPIC_ID]


@pytest.mark.parametrize(
    "entry",
    [
        (0, -1, "", 0, -1, None),
        (12345, 0, "", 1_764_000_000_000, -1, None),
        (2**63 - 1, 2**31 - 2, "", 2**44 - 1, -1, TOPIC_ID),
        (7, 3, "", 1_764_000_000_000, -1, TOPIC_ID),
    ],
)
def test_plain_commits_pack_into_one_int_and_back(entry: Entry) -> None:
    index = 0 if entry[5] is None else 1
    stored = pack_entry(entry, index)
    assert isinstance(stored, int)
    assert unpack_entry(stored, TABLE) == entry


@pytest.mark.parametrize(
    "entry",
    [
        UNDECODABLE_ENTRY,  # commit time unknown
        (5, -1, "meta", 1_764_000_000_000, -1, None),  # metadata
        (5, -1, "", 1_764_000_000_000, 1_765_000_000_000, None),  # explicit expiry (v1)
        (-1, -1, "", 1_764_000_000_000, -1, None),  # negative offset
        (5, -2, "", 1_764_000_000_000, -1, None),  # leader epoch below -1
        (5, -1, "", -3, -1, None),  # negative time
        (5, -1, "", 2**44, -1, None),  # time past the packed width
    ],
)
def test_anything_else_stays_a_tuple(entry: Entry) -> None:
    assert pack_entry(entry, 0) is entry
    assert unpack_entry(entry, TABLE) == entry


def test_random_entries_round_trip() -> None:
    rng = random.Random(3)
    for _ in range(20_000):
        entry: Entry = (
            rng.choice([-1, 0, rng.randrange(2**63)]),
            rng.choice([-2, -1, 0, rng.randrange(2**31 - 1)]),
            rng.choice(["", "", "x"]),
            rng.choice([None, -5, 0, rng.randrange(2**45)]),
            rng.choice([-1, -1, 5]),
            rng.choice([None, TOPIC_ID]),
        )
        assert unpack_entry(pack_entry(entry, 0 if entry[5] is None else 1), TABLE) == entry


def test_partitions_behave_like_a_dict_whatever_the_partition_numbers() -> None:
    rng = random.Random(5)
    for _ in range(300):
        model: dict[int, int] = {}
        first = rng.choice([0, 3, 63, 64, 1000, -1])
        partitions = new_partitions(first, 1)
        model[first] = 1
        for step in range(rng.randint(1, 60)):
            partition = rng.choice([rng.randrange(8), rng.randrange(200), -1, 5000])
            if rng.random() < 0.3:
                assert pop_partition(partitions, partition) == (model.pop(partition, None) is not None)
            else:
                partitions = put_partition(partitions, partition, step)
                model[partition] = step
            assert sorted(partition_items(partitions)) == sorted(model.items())
            assert partition_count(partitions) == len(model)
            for probe in (-1, 0, 7, 150, 5000):
                assert get_partition(partitions, probe) == model.get(probe)


def test_dense_partitions_are_a_list_and_the_int_zero_is_an_entry() -> None:
    partitions = new_partitions(0, 0)
    for p in range(1, 6):
        partitions = put_partition(partitions, p, 0)
    assert isinstance(partitions, list)
    assert partition_count(partitions) == 6
    assert get_partition(partitions, 0) == 0
    assert pop_partition(partitions, 0) and not pop_partition(partitions, 0)
