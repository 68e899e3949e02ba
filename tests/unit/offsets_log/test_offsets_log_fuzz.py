"""The offsets-log codec and ledger under mutated records: only typed outcomes, bounded memory.

The regressions are what `bench/fuzz_codec.py` found; the last tests run a short version of that
campaign (the >= 1M-input runs and their numbers are in docs/benchmarks.md, "Fuzzing").
"""

from __future__ import annotations

import tracemalloc
from datetime import UTC, datetime

import pytest

from bench import fuzz_codec
from groupwarden.offsets_log import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    OffsetsLedger,
    decode_key,
    decode_value,
    log_time,
)
from groupwarden.offsets_log.snapshot import snapshot_from_ledger
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 23, tzinfo=UTC)
EXTREMES = [2**63 - 1, -(2**63), 253_402_300_800_000, -62_135_596_800_001]


@pytest.mark.parametrize("ms", EXTREMES)
def test_a_timestamp_beyond_datetime_is_clamped_not_a_crash(ms: int) -> None:
    """A corrupt record's int64 time raised OverflowError in log_time and failed the whole snapshot."""
    at = log_time(ms).at
    assert at.year in (1, 9999)


@pytest.mark.parametrize("ms", EXTREMES)
def test_a_snapshot_survives_records_with_extreme_times(ms: int) -> None:
    ledger = OffsetsLedger()
    commit = OffsetCommitValue(5, 1, "", ms, ms, None, 1)
    ledger.apply(encode_key(OffsetCommitKey("g", "t", 0)), encode_value(commit), ms, 0, 0)
    empty = GroupMetadataValue("consumer", 3, None, None, ms, (), 3)
    ledger.apply(encode_key(GroupMetadataKey("c")), encode_value(empty), ms, 0, 1)
    ledger.apply(
        encode_key(ConsumerGroupMetadataKey("k")), encode_value(ConsumerGroupMetadataValue(1)), ms, 0, 2
    )
    snapshot = snapshot_from_ledger(ledger, NOW)
    assert {g.group_id for g in snapshot.groups} == {"g", "c", "k"}
    assert len(ledger.committed_offsets("g")) == 1


@pytest.mark.parametrize(
    "value",
    [
        b"\x00\x04" + b"\x00" * 12 + b"\xff\xff\xff\xff\x0f",  # v4 metadata claims 4 GiB
        b"\x00\x03" + b"\x00" * 12 + b"\x7f\xff",  # v3 metadata claims 32 KiB of 2 bytes
        b"\x00\x04" + b"\x00" * 12 + b"\x01" + b"\x00" * 8 + b"\xff\xff\xff\xff\x0f",  # 4G tagged fields
    ],
)
def test_a_length_claiming_gigabytes_allocates_nothing_like_it(value: bytes) -> None:
    key = OffsetCommitKey("g", "t", 0)
    for _ in range(2):  # warm up: first-call allocations (caches, lazy imports) are not the input's
        with pytest.raises(CorruptRecordError):
            decode_value(key, value)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptRecordError):
            decode_value(key, value)
        with pytest.raises(CorruptRecordError):
            decode_key(b"\x00\x02\x7f\xff" + b"g")
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < 64 << 10


def test_short_fuzz_campaign_finds_nothing() -> None:
    """Mutated records of every type and version: typed records, unknown, tombstones or corrupt only."""
    campaign = fuzz_codec.run(5000, seed=20261123)
    assert campaign.finding_count == 0, [f.__dict__ for f in campaign.findings[:3]]
    decoded = {name for name in campaign.outcomes if name.startswith("decoded:")}
    assert decoded >= {
        "decoded:OffsetCommitValue",
        "decoded:GroupMetadataValue",
        "decoded:ConsumerGroupMetadataValue",
    }
    assert campaign.outcomes["corrupt-value"] > 0 and campaign.outcomes["unknown-type-or-version"] > 0
    assert campaign.max_peak_bytes < 1 << 20
