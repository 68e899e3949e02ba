"""`__share_group_state` (KIP-932) records: the codec against Kafka 4.3.1's schemas (literal bytes,
round trips, mangled bytes only ever raise CorruptRecordError) and the ledger's "when did this
share-partition's start offset last change"."""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from groupwarden.offsets_log import CorruptRecordError, UnknownRecord
from groupwarden.offsets_log.records import TOMBSTONE
from groupwarden.offsets_log.share_state import (
    ShareSnapshotValue,
    ShareStateBatch,
    ShareStateKey,
    ShareStateLedger,
    ShareUpdateValue,
    UnknownShareStateKey,
    decode_share_state_key,
    decode_share_state_value,
)
from groupwarden.testing.offsets_log_encoder import encode_share_state_key, encode_share_state_value

TOPIC_ID = uuid.UUID("bdb0bab2-4807-431f-a3da-44a40a9839d0")
SNAPSHOT_KEY = ShareStateKey(0, "jobs", TOPIC_ID, 1)
UPDATE_KEY = ShareStateKey(1, "jobs", TOPIC_ID, 1)


def test_keys_and_values_literal_bytes() -> None:
    key = b"\x00\x00" + b"\x00\x04jobs" + TOPIC_ID.bytes + b"\x00\x00\x00\x01"
    assert decode_share_state_key(key) == SNAPSHOT_KEY
    assert decode_share_state_key(b"\x00\x01" + key[2:]) == UPDATE_KEY
    assert decode_share_state_key(b"\x00\x07" + key[2:]) == UnknownShareStateKey(7)
    with pytest.raises(CorruptRecordError):
        decode_share_state_key(key[:-2])
    # ShareSnapshotValue v0: SnapshotEpoch, StateEpoch, LeaderEpoch, StartOffset, CreateTimestamp,
    # WriteTimestamp, StateBatches[FirstOffset, LastOffset, DeliveryState, DeliveryCount, tags],
    # then the tagged DeliveryCompleteCount (tag 0).
    batch = struct.pack(">qqbh", 10, 12, 2, 1) + b"\x00"
    snapshot = (
        struct.pack(">hiiiqqq", 0, 3, 1, 0, 10, 1_700_000_000_000, 1_700_000_005_000)
        + b"\x02"
        + batch
        + b"\x01\x00\x04"
        + struct.pack(">i", 3)
    )
    assert decode_share_state_value(SNAPSHOT_KEY, snapshot) == ShareSnapshotValue(
        3, 1, 0, 10, 1_700_000_000_000, 1_700_000_005_000, (ShareStateBatch(10, 12, 2, 1),), 3
    )
    # ShareUpdateValue v0: SnapshotEpoch, LeaderEpoch, StartOffset (-1: unchanged), StateBatches.
    update = struct.pack(">hiiq", 0, 3, 0, -1) + b"\x01" + b"\x00"
    assert decode_share_state_value(UPDATE_KEY, update) == ShareUpdateValue(3, 0, -1)
    assert decode_share_state_value(UPDATE_KEY, None) is TOMBSTONE
    assert decode_share_state_value(UPDATE_KEY, b"\x00\x01" + update[2:]) == UnknownRecord(1, 1)


BATCHES = st.lists(
    st.builds(
        ShareStateBatch,
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-(2**63), 2**63 - 1),
        st.integers(-128, 127),
        st.integers(-(2**15), 2**15 - 1),
    ),
    max_size=3,
).map(tuple)
I32 = st.integers(-(2**31), 2**31 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
VALUES = st.one_of(
    st.builds(ShareSnapshotValue, I32, I32, I32, I64, I64, I64, BATCHES, I32),
    st.builds(ShareUpdateValue, I32, I32, I64, BATCHES, I32),
)


@given(VALUES, st.binary(max_size=3), st.data())
def test_round_trip_and_mangled_bytes_only_raise_corrupt(
    value: ShareSnapshotValue | ShareUpdateValue, junk: bytes, data: st.DataObject
) -> None:
    key = SNAPSHOT_KEY if isinstance(value, ShareSnapshotValue) else UPDATE_KEY
    encoded = encode_share_state_value(value)
    assert decode_share_state_value(key, encoded) == value
    assert decode_share_state_value(key, encoded + junk) == value  # trailing bytes are ignored
    mangled = bytearray(encoded)
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(mangled) - 1))
        mangled[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(mangled)))
    for candidate in (bytes(mangled), bytes(mangled[:cut])):
        with contextlib.suppress(CorruptRecordError):  # the only error allowed
            decode_share_state_value(key, candidate)
        ledger = ShareStateLedger()
        ledger.apply(encode_share_state_key(key), candidate, 0, 0, 0)  # never raises


def snapshot(start: int, written_ms: int) -> bytes:
    return encode_share_state_value(ShareSnapshotValue(1, 1, 0, start, 1_000, written_ms))


def update(start: int) -> bytes:
    return encode_share_state_value(ShareUpdateValue(1, 0, start, (ShareStateBatch(start, start + 1, 2, 1),)))


def test_the_ledger_dates_the_last_start_offset_change() -> None:
    ledger = ShareStateLedger()
    snap, upd = encode_share_state_key(SNAPSHOT_KEY), encode_share_state_key(UPDATE_KEY)
    records = [
        (snap, snapshot(0, 1_000), 1_001),  # initialised
        (upd, update(5), 2_000),  # moved to 5 at 2 s (the update's record time)
        (upd, update(-1), 3_000),  # acknowledgements that do not move it
        (snap, snapshot(5, 4_000), 4_000),  # a new snapshot of the same start offset
        (upd, update(8), 5_000),  # moved to 8
        (snap, snapshot(8, 9_000), 9_000),  # a periodic snapshot: no change
    ]
    for offset, (key, value, at) in enumerate(records):
        ledger.apply(key, value, at, 0, offset)
        if offset == 3:
            assert ledger.start_offset("jobs", TOPIC_ID, 1) == (5, 2_000)
    assert ledger.start_offset("jobs", TOPIC_ID, 1) == (8, 5_000)
    assert ledger.start_offset("jobs", TOPIC_ID, 0) is None
    ledger.apply(snap, None, 10_000, 0, len(records))  # the state deleted (DeleteShareGroupOffsets)
    assert ledger.start_offset("jobs", TOPIC_ID, 1) is None
    assert (ledger.records, ledger.corrupt, ledger.unknown) == (len(records) + 1, 0, 0)


def test_the_first_record_seen_dates_by_itself_and_replays_are_skipped() -> None:
    ledger = ShareStateLedger()
    snap = encode_share_state_key(SNAPSHOT_KEY)
    ledger.apply(snap, snapshot(7, 8_000), 8_001, 0, 100)  # older history was pruned
    assert ledger.start_offset("jobs", TOPIC_ID, 1) == (7, 8_000)  # never earlier than the truth
    ledger.apply(snap, snapshot(9, 9_000), 9_000, 0, 100)  # below the position: a replay
    assert ledger.start_offset("jobs", TOPIC_ID, 1) == (7, 8_000) and ledger.duplicates == 1
    ledger.apply(None, None, 0, 0, 101)
    ledger.apply(b"\x00", None, 0, 0, 102)
    ledger.apply(b"\x00\x09", None, 0, 0, 103)
    assert (ledger.corrupt, ledger.unknown) == (2, 1)
