"""The ListGroups answer decoder (adapters/list_groups.py) against kafka-python's own encoder and
decoder of the same schema: the same rows for every flexible version, typed errors for bad bytes."""

from __future__ import annotations

import contextlib
import io
import random
import sys

import pytest
from kafka.protocol.admin import ListGroupsResponse

from groupwarden.adapters.list_groups import MalformedListGroups, _RowsAnswer, decode_list_groups
from groupwarden.cleanup.gateway import ListedGroup
from groupwarden.core.snapshot import GroupState

pytestmark = pytest.mark.unit

FLEXIBLE_VERSIONS = (3, 4, 5)


def encoded(version: int, groups: list[dict[str, str]], error_code: int = 0) -> bytes:
    rows = [ListGroupsResponse.ListedGroup(version=version, **g) for g in groups]
    answer = ListGroupsResponse(version=version, throttle_time_ms=7, error_code=error_code, groups=rows)
    return bytes(answer.encode())


def kafka_rows(version: int, data: bytes) -> list[ListedGroup]:
    """What the gateway made of kafka-python's decoding before (kafka_gateway.list_groups)."""
    answer = ListGroupsResponse[version].decode(data)
    return [
        ListedGroup(
            group_id=g.group_id,
            group_type=(getattr(g, "group_type", None) or "").lower(),
            protocol_type=g.protocol_type or "",
            state=GroupState.parse(getattr(g, "group_state", None)),
        )
        for g in answer.groups
    ]


def some_groups(rng: random.Random, count: int) -> list[dict[str, str]]:
    alphabet = "abcXYZ019-_.üñ€"
    return [
        {
            # ids up to 300 characters: lengths past 127 take a two-byte varint
            "group_id": "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300))),
            "protocol_type": rng.choice(["", "consumer", "connect"]),
            "group_state": rng.choice(["Empty", "Stable", "PreparingRebalance", "Dead"]),
            "group_type": rng.choice(["classic", "consumer", "share", "streams"]),
        }
        for _ in range(count)
    ]


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
def test_rows_equal_kafka_pythons_decoding(version: int) -> None:
    rng = random.Random(version)
    for count in (0, 1, 2, 50, 1000):
        data = encoded(version, some_groups(rng, count))
        decoded = decode_list_groups(data, version)
        assert decoded.error_code == 0
        assert decoded.rows == kafka_rows(version, data)


def test_fields_a_version_lacks_are_empty_and_the_error_code_is_kept() -> None:
    groups = [{"group_id": "g", "protocol_type": "consumer", "group_state": "Empty", "group_type": "share"}]
    unknown, empty = GroupState.UNKNOWN, GroupState.EMPTY
    assert decode_list_groups(encoded(3, groups), 3).rows == [ListedGroup("g", "", "consumer", unknown)]
    assert decode_list_groups(encoded(4, groups), 4).rows == [ListedGroup("g", "", "consumer", empty)]
    assert decode_list_groups(encoded(5, groups, error_code=15), 5).error_code == 15


def test_group_ids_are_interned_and_small_fields_shared() -> None:
    groups = [
        {"group_id": f"app-{i}", "protocol_type": "consumer", "group_state": "Empty", "group_type": "classic"}
        for i in range(3)
    ]
    rows = decode_list_groups(encoded(5, groups), 5).rows
    assert rows[0].group_id is sys.intern("".join(["app-", "0"]))
    assert rows[0].protocol_type is rows[1].protocol_type is rows[2].protocol_type
    assert rows[0].group_type is rows[2].group_type


def test_tagged_fields_are_skipped() -> None:
    # One row with a tagged field (tag 5, 3 bytes) on the row and one on the answer.
    body = bytearray(b"\x00\x00\x00\x00" + b"\x00\x00")  # throttle, error
    body += b"\x02"  # 1 group
    body += b"\x02g" + b"\x09consumer" + b"\x06Empty" + b"\x08classic"
    body += b"\x01\x05\x03abc"  # row tags
    body += b"\x01\x00\x01z"  # answer tags
    assert decode_list_groups(bytes(body), 5).rows == [
        ListedGroup("g", "classic", "consumer", GroupState.EMPTY)
    ]


def test_rows_of_the_same_shape_and_rows_off_it_interleaved() -> None:
    """The decoder reuses a row's tail (protocol type, state, group type, no tag) for the rows that
    repeat it; a row with a tag, a null or a long string between them is read field by field."""
    tail = b"\x09consumer" + b"\x06Empty" + b"\x08classic" + b"\x00"
    long_type = "x" * 200  # a 2-byte length varint
    body = bytearray(b"\x00\x00\x00\x00" + b"\x00\x00" + b"\x06")  # throttle, error, 5 groups
    body += b"\x03g0" + tail
    body += b"\x03g1" + tail[:-1] + b"\x01\x05\x03abc"  # the same fields, and a tag
    body += b"\x03g2" + tail
    body += b"\x03g3" + b"\x00" + tail[9:]  # null protocol type
    body += b"\x03g4" + b"\xc9\x01" + long_type.encode() + tail[9:]
    body += b"\x00"  # no answer tags
    rows = decode_list_groups(bytes(body), 5).rows
    empty = GroupState.EMPTY
    assert rows == [
        ListedGroup("g0", "classic", "consumer", empty),
        ListedGroup("g1", "classic", "consumer", empty),
        ListedGroup("g2", "classic", "consumer", empty),
        ListedGroup("g3", "classic", "", empty),
        ListedGroup("g4", "classic", long_type, empty),
    ]
    assert rows[0].protocol_type is rows[2].protocol_type


@pytest.mark.parametrize("version", FLEXIBLE_VERSIONS)
def test_every_truncation_is_a_typed_error(version: int) -> None:
    data = encoded(version, some_groups(random.Random(1), 5))
    for cut in range(len(data)):
        with pytest.raises(MalformedListGroups):
            decode_list_groups(data[:cut], version)


def test_random_bytes_give_rows_or_a_typed_error_never_a_crash() -> None:
    rng = random.Random(11)
    valid = encoded(5, some_groups(rng, 20))
    for _ in range(3000):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        with contextlib.suppress(MalformedListGroups):
            decode_list_groups(bytes(data), 5)


def test_a_huge_announced_group_count_is_refused_without_allocating() -> None:
    body = b"\x00\x00\x00\x00\x00\x00" + b"\xff\xff\xff\x7f"  # 268M groups announced in 10 bytes
    with pytest.raises(MalformedListGroups):
        decode_list_groups(body, 5)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_versions_before_flexible_use_kafka_pythons_decoder(version: int) -> None:
    rows = [ListGroupsResponse.ListedGroup(version=version, group_id="g1", protocol_type="consumer")]
    fields = {"error_code": 0, "groups": rows}
    if version >= 1:
        fields["throttle_time_ms"] = 0
    data = bytes(ListGroupsResponse(version=version, **fields).encode())
    answer = _RowsAnswer(version).decode(io.BytesIO(data))
    assert answer.rows == [ListedGroup("g1", "", "consumer", GroupState.UNKNOWN)]
    with pytest.raises(ValueError):
        decode_list_groups(data, version)
