"""Share (KIP-932) and streams (KIP-1071) groups in the ledger: their member and metadata records
say when the last member left, so "Empty since" comes from the log as for KIP-848 groups."""

from __future__ import annotations

import pytest

from groupwarden.offsets_log import OffsetsLedger, UnknownRecordKey
from groupwarden.testing.offsets_log_encoder import encode_key

SHARE_MEMBER, SHARE_METADATA = 10, 11
STREAMS_METADATA, STREAMS_MEMBER = 17, 19
VALUE = b"\x00\x00\x00"  # the ledger never decodes these values: presence is what counts


def record(ledger: OffsetsLedger, rtype: int, group: str, member: str | None, live: bool, at: int) -> None:
    key = encode_key(UnknownRecordKey(rtype, group, member))
    position = ledger.positions.get(0, 0)  # the next offset of partition 0
    ledger.apply(key, VALUE if live else None, at, 0, position)


@pytest.mark.parametrize(
    ("member_type", "metadata_type"), [(SHARE_MEMBER, SHARE_METADATA), (STREAMS_MEMBER, STREAMS_METADATA)]
)
def test_empty_since_is_the_tombstone_of_the_last_member(member_type: int, metadata_type: int) -> None:
    ledger = OffsetsLedger()
    record(ledger, metadata_type, "g", None, True, 1_000)
    record(ledger, member_type, "g", "m1", True, 1_000)
    record(ledger, member_type, "g", "m2", True, 2_000)
    assert ledger.membership("g") == (2, None)
    record(ledger, member_type, "g", "m1", False, 3_000)
    record(ledger, metadata_type, "g", None, True, 3_000)
    assert ledger.membership("g") == (1, None)
    record(ledger, member_type, "g", "m2", False, 4_000)
    record(ledger, metadata_type, "g", None, True, 4_001)
    assert ledger.membership("g") == (0, 4_000)
    # a member that comes back makes it non-Empty again
    record(ledger, member_type, "g", "m3", True, 5_000)
    assert ledger.membership("g") == (1, None)


def test_compacted_member_tombstones_fall_back_to_the_metadata_record() -> None:
    ledger = OffsetsLedger()
    record(ledger, SHARE_METADATA, "g", None, True, 7_000)  # all that compaction left
    assert ledger.membership("g") == (0, 7_000)


def test_a_deleted_group_is_gone_and_other_records_are_ignored() -> None:
    ledger = OffsetsLedger()
    record(ledger, STREAMS_METADATA, "g", None, True, 1_000)
    record(ledger, 23, "g", None, True, 1_000)  # topology: not needed
    record(ledger, STREAMS_METADATA, "g", None, False, 2_000)
    assert ledger.membership("g") is None
    assert "g" not in ledger
