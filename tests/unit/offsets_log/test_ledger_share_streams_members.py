"""Share (KIP-932) and streams (KIP-1071) groups in the ledger: their member and metadata records
say when the last member left, so "Empty since" comes from the log as for KIP-848 groups."""

from __future__ import annotations

import pytest

from groupwarden.core.snapshot import GroupKind
from groupwarden.offsets_log import (
    OffsetsLedger,
    StreamsGroupTopologyKey,
    StreamsGroupTopologyValue,
    StreamsSubtopology,
    StreamsTopicInfo,
    UnknownRecordKey,
)
from groupwarden.offsets_log.rows import group_from_row, group_row
from groupwarden.offsets_log.views import UNDECODABLE_TOPOLOGY, LedgerStreamsTopology
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value

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
    record(ledger, 20, "g", None, True, 1_000)  # target assignment metadata: not needed
    record(ledger, 23, "g", None, True, 1_000)  # topology (undecodable bytes here)
    record(ledger, STREAMS_METADATA, "g", None, False, 2_000)
    record(ledger, 23, "g", None, False, 2_000)  # DeleteGroups writes a tombstone per record
    assert ledger.membership("g") is None
    assert "g" not in ledger


def topology_record(ledger: OffsetsLedger, group: str, value: bytes | None, at: int = 1_000) -> None:
    ledger.apply(encode_key(StreamsGroupTopologyKey(group)), value, at, 0, ledger.positions.get(0, 0))


WORDCOUNT = StreamsGroupTopologyValue(
    3,
    (
        StreamsSubtopology("0", ("words",), repartition_sink_topics=("app-store-repartition",)),
        StreamsSubtopology(
            "1",
            state_changelog_topics=(StreamsTopicInfo("app-store-changelog"),),
            repartition_source_topics=(StreamsTopicInfo("app-store-repartition", 4, 1),),
        ),
    ),
)


def test_the_topology_is_the_streams_groups_subscription_and_names_its_internal_topics() -> None:
    ledger = OffsetsLedger()
    # The topology may come before the metadata record: the group is a streams group either way.
    topology_record(ledger, "app", encode_value(WORDCOUNT))
    record(ledger, STREAMS_MEMBER, "app", "a1", True, 1_000)
    record(ledger, STREAMS_METADATA, "app", None, True, 1_000)
    view = ledger.group("app")
    assert view is not None and view.kind is GroupKind.STREAMS and view.member_count == 1
    assert view.subscribed_topics == frozenset({"words", "app-store-repartition"})
    assert view.streams_topology == LedgerStreamsTopology(
        3,
        frozenset({"words", "app-store-repartition"}),
        frozenset({"app-store-repartition"}),
        frozenset({"app-store-changelog"}),
    )
    assert group_from_row(group_row(view, {}))[0] == view  # the audit's row form keeps it
    # A new topology replaces the old one; a regex source makes the subscription unknown.
    regex = StreamsGroupTopologyValue(4, (StreamsSubtopology("0", source_topic_regex=("in-.*",)),))
    topology_record(ledger, "app", encode_value(regex))
    view = ledger.group("app")
    assert view is not None and view.subscribed_topics is None
    assert view.streams_topology is not None and view.streams_topology.internal_topics == frozenset()
    # Undecodable bytes: counted corrupt, nothing known (never an empty subscription).
    topology_record(ledger, "app", b"\x00\x00\xff")
    view = ledger.group("app")
    assert ledger.corrupt == 1 and view is not None and view.streams_topology == UNDECODABLE_TOPOLOGY
    assert view.subscribed_topics is None and view.streams_topology.internal_topics is None
    # A tombstone removes it: no topology, subscription unknown.
    topology_record(ledger, "app", None)
    view = ledger.group("app")
    assert view is not None and view.streams_topology is None and view.subscribed_topics is None


def test_a_future_topology_version_is_unknown_not_corrupt() -> None:
    ledger = OffsetsLedger()
    record(ledger, STREAMS_METADATA, "app", None, True, 1_000)
    topology_record(ledger, "app", b"\x00\x09" + b"\x01" * 10)
    view = ledger.group("app")
    assert (ledger.unknown_by_type[23], ledger.corrupt) == (1, 0)
    assert view is not None and view.streams_topology == UNDECODABLE_TOPOLOGY
