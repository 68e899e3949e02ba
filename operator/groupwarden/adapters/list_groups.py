"""ListGroups (API 16) whose answer is read straight into rows of interned strings.

A ListGroups answer names every group a broker coordinates: 100k+ rows on the clusters this
product is for, in every pass. kafka-python decodes each row into a generic data object; at 115k
groups that was ~0.7 s of CPU per pass and ~20-40 MB of short-lived objects that the allocator
kept after the pass (the operator's peak RSS sits at that moment). The flexible versions (3-5,
Kafka 2.4+) are read here instead: one slotted `ListedGroup` per row, the group id interned (the
offsets-log ledger interns the same names, so a selected group's id is one object) and the few
distinct protocol types, states and group types shared. Versions 0-2 use kafka-python's decoder.

The request is kafka-python's own ListGroupsRequest; only the header it is sent with differs: the
connection asks the in-flight request's header which class decodes the answer
(`RequestHeader.get_response_class`), so nothing is registered globally and every other
ListGroups sent in the process (kafka-python's admin client) decodes as before.
"""

from __future__ import annotations

import struct
import sys
from dataclasses import dataclass
from typing import Any, BinaryIO

from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse
from kafka.protocol.api_header import RequestHeader

from groupwarden.cleanup.gateway import ListedGroup
from groupwarden.core.snapshot import GroupState

_FIRST_FLEXIBLE_VERSION = 3
_I32_I16 = struct.Struct(">ih")


@dataclass(frozen=True, slots=True)
class ListGroupsRows:
    """A ListGroups answer: its error code and one row per group."""

    error_code: int
    # state UNKNOWN before v4, group type "" before v5 (lower case, as the gateway compares it)
    rows: list[ListedGroup]


class MalformedListGroups(ValueError):
    """The answer's bytes do not follow the schema (kafka-python turns a ValueError raised while
    decoding into KafkaProtocolError and closes the connection: the call fails, nothing guessed)."""


def decode_list_groups(data: bytes, version: int) -> ListGroupsRows:
    """Decodes a flexible (v3+) ListGroups response body (the bytes after the response header)."""
    if version < _FIRST_FLEXIBLE_VERSION:
        raise ValueError(f"ListGroups v{version} is not a flexible version")
    try:
        return _decode_flexible(data, version)
    except (IndexError, UnicodeDecodeError, struct.error) as exc:
        raise MalformedListGroups(f"malformed ListGroups v{version} answer: {exc}") from None


def _decode_flexible(data: bytes, version: int) -> ListGroupsRows:
    _throttle_ms, error_code = _I32_I16.unpack_from(data, 0)
    pos = 6
    count, pos = _uvarint(data, pos)
    count -= 1  # compact array: length + 1 (0 = null)
    rows: list[ListedGroup] = []
    if count > 0:
        if count > len(data):  # each row takes at least one byte: a bogus length, not an allocation
            raise MalformedListGroups(f"malformed ListGroups v{version} answer: {count} groups")
        shared: dict[bytes, str] = {}
        states: dict[str, GroupState] = {"": GroupState.UNKNOWN}
        types: dict[str, str] = {"": ""}
        intern = sys.intern
        with_state = version >= 4
        with_type = version >= 5
        fields = 1 + with_state + with_type
        tails: dict[bytes, tuple[str, str, GroupState]] = {}
        last = len(data) - 1  # the answer's own tagged fields follow the rows
        append = rows.append
        for _ in range(count):
            # group id (compact string: length + 1); lengths under 128 take one byte
            n = data[pos]
            if n < 0x80:
                pos += 1
            else:
                n, pos = _uvarint(data, pos)
            end = pos + n - 1
            if n == 0 or end > len(data):
                raise MalformedListGroups(f"malformed ListGroups v{version} answer: bad group id")
            group_id = intern(str(data[pos:end], "utf-8"))
            pos = end
            # The rest of a row (protocol type, state, group type, no tagged field) is one of a
            # few byte strings: found whole in `tails`, it costs a slice and a lookup instead of
            # three string reads (0.32 -> ~0.15 s at 115k groups). A length byte of 0 (null) or
            # >= 0x80 (a long string), or a tagged field, takes the general path below.
            tail_end = pos
            for _ in range(fields):
                n = data[tail_end]
                if n == 0 or n >= 0x80:
                    break
                tail_end += n
            else:
                if data[tail_end] == 0 and tail_end < last:
                    tail_end += 1
                    found = tails.get(data[pos:tail_end])
                    if found is not None:
                        append(ListedGroup(group_id, found[0], found[1], found[2]))
                        pos = tail_end
                        continue
            start = pos
            protocol_type, pos = _shared_string(data, pos, shared)
            state_name = group_type = ""
            if with_state:
                state_name, pos = _shared_string(data, pos, shared)
            if with_type:
                group_type, pos = _shared_string(data, pos, shared)
            pos = _skip_tagged_fields(data, pos)
            state = states.get(state_name)
            if state is None:
                state = states[state_name] = GroupState.parse(state_name)
            lower = types.get(group_type)
            if lower is None:
                lower = types[group_type] = group_type.lower()
            if pos == tail_end:  # the fast path's shape: its next rows take it
                tails[data[start:pos]] = (lower, protocol_type, state)
            append(ListedGroup(group_id, lower, protocol_type, state))
    _skip_tagged_fields(data, pos)
    return ListGroupsRows(error_code, rows)


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise MalformedListGroups("malformed ListGroups answer: varint too long")


def _shared_string(data: bytes, pos: int, shared: dict[bytes, str]) -> tuple[str, int]:
    """A compact string among few distinct values (protocol type, state, group type)."""
    n, pos = _uvarint(data, pos)
    if n == 0:
        return "", pos  # null: read as "" (as kafka-python's answer objects are used here)
    end = pos + n - 1
    if end > len(data):
        raise MalformedListGroups("malformed ListGroups answer: string past the end")
    raw = data[pos:end]
    found = shared.get(raw)
    if found is None:
        found = shared[raw] = str(raw, "utf-8")
    return found, end


def _skip_tagged_fields(data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _tag, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
        if pos > len(data):
            raise MalformedListGroups("malformed ListGroups answer: tagged field past the end")
    return pos


def list_groups_request(**fields: Any) -> Any:
    """A ListGroupsRequest whose answer comes back as `ListGroupsRows` (any version)."""
    return _ListGroupsRowsRequest(**fields)


class _RowsAnswer:
    """What the connection decodes a ListGroups answer with (one per request version)."""

    def __init__(self, version: int) -> None:
        self.version = version
        self._kafka_class = ListGroupsResponse[version]

    def parse_header(self, buffer: BinaryIO) -> Any:
        return self._kafka_class.parse_header(buffer)

    def decode(self, buffer: BinaryIO) -> ListGroupsRows:
        if self.version >= _FIRST_FLEXIBLE_VERSION:
            return decode_list_groups(buffer.read(), self.version)
        answer = self._kafka_class.decode(buffer)
        return ListGroupsRows(
            answer.error_code,
            [ListedGroup(g.group_id, "", g.protocol_type or "", GroupState.UNKNOWN) for g in answer.groups],
        )


class _RowsRequestHeader(RequestHeader, init=False):  # type: ignore[misc,call-arg]
    __slots__ = ()

    def get_response_class(self) -> _RowsAnswer:
        return _RowsAnswer(self.request_api_version)


class _ListGroupsRowsRequest(ListGroupsRequest, init=False):  # type: ignore[misc,call-arg]
    __slots__ = ()

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        self._header = _RowsRequestHeader(  # type: ignore[misc]
            request_api_key=self.API_KEY,
            request_api_version=self.API_VERSION,
            correlation_id=correlation_id,
            client_id=client_id,
        )
