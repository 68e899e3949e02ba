"""A second reader of OffsetCommit keys and values, vectorised with numpy over Arrow buffers.

The core codec (`offsets_log/codec.py`) is the definition of the format. This module reads only the
shapes brokers write for nearly every commit, many records at once, and says for every other record
"not mine": the caller hands those to the core codec (through the core ledger). A property test
(`tests/unit/fleet/test_fleet_fast_codec.py`) asserts record by record that whatever is decoded here
equals the core codec's answer and that everything else is handed over.

- Keys (types 0 and 1, given without their 2-byte type: the "slot"): group and topic strings and the
  partition, read like `read_offset_commit_key` (trailing bytes ignored, as the codec does). Names
  with a byte >= 0x80 are checked by Python's own UTF-8 decoder, exactly the codec's check.
- Values: the plain shapes only: v3 without metadata (24 bytes), v4 without metadata and without
  tagged fields (24 bytes) or with only the TopicId (42 bytes). Metadata strings, other versions,
  other lengths, other tags, truncated or extended bytes: not plain, handed over.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from groupwarden.offsets_log.codec import read_offset_commit_key
from groupwarden.offsets_log.records import CorruptRecordError

_PAD = 64  # bytes appended to a data buffer so fixed windows never read past it


@dataclass(frozen=True)
class BinaryColumn:
    """A binary Arrow array as numpy: `starts`/`lengths` per row into `data` (padded), `valid`."""

    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64
    data: np.ndarray  # uint8, padded with _PAD zero bytes
    valid: np.ndarray  # bool


def binary_column(array: pa.Array | pa.ChunkedArray) -> BinaryColumn:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if array.type == pa.large_binary():
        array = array.cast(pa.binary())
    n = len(array)
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=n + 1 + array.offset)[array.offset :]
    offsets = offsets.astype(np.int64)
    data_buffer = buffers[2]
    raw = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    data = np.concatenate([raw[: int(offsets[-1]) if n else 0], np.zeros(_PAD, np.uint8)])
    valid = (
        np.ones(n, dtype=bool)
        if array.null_count == 0
        else np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    )
    return BinaryColumn(offsets[:-1], offsets[1:] - offsets[:-1], data, valid)


def _window(column: BinaryColumn, rows: np.ndarray, start: int, width: int) -> np.ndarray:
    """(len(rows), width) bytes of each row from `start` (past a row's end: its neighbour's or pad
    bytes: callers check lengths first). Rows of a sliding view of the data are copied whole: no
    index of every byte is built."""
    return _rows_of(column.data, column.starts[rows] + start, width)


def _rows_of(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """(len(at), width): the `width` bytes of `data` from each position of `at` (clamped so the
    window stays inside `data`)."""
    windows = np.lib.stride_tricks.sliding_window_view(data, width)
    rows: np.ndarray = windows[np.minimum(at, len(data) - width)]
    return rows


def _int_at(column: BinaryColumn, rows: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of `width` bytes at per-row `positions`."""
    raw = _rows_of(column.data, column.starts[rows] + positions, width)
    dtype = {2: ">i2", 4: ">i4", 8: ">i8"}[width]
    return raw.view(dtype).reshape(len(rows)).astype(np.int64)


def _gather(column: BinaryColumn, rows: np.ndarray, positions: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The bytes [position, position + length) of each row, as a binary array."""
    lengths = np.maximum(lengths, 0)
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 2**31:
        raise ValueError("strings too large for one binary array")
    begin = column.starts[rows] + positions
    index = np.repeat(begin - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    data = column.data[index]
    return pa.Array.from_buffers(
        pa.binary(), len(rows), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
    )


def without_prefix(array: pa.Array, rows: np.ndarray, cut: int) -> pa.Array:
    """The values of `rows` (valid, each at least `cut` bytes) without their first `cut` bytes,
    as a binary array. Taken whole first (Arrow copies the bytes in one pass), then the cut
    bytes dropped under a mask: cheaper than `_gather`'s index of every byte."""
    chosen = array.take(pa.array(rows, pa.int64()))
    n = len(chosen)
    buffers = chosen.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=n + 1 + chosen.offset)[chosen.offset :]
    offsets = offsets.astype(np.int64)
    raw = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    data = raw[int(offsets[0]) : int(offsets[-1])]
    offsets -= offsets[0]
    if n and int(np.min(offsets[1:] - offsets[:-1])) < cut:
        raise ValueError(f"a value shorter than {cut} bytes")
    keep = np.ones(len(data), dtype=bool)
    for k in range(cut):
        keep[offsets[:-1] + k] = False
    cut_offsets = (offsets - cut * np.arange(n + 1, dtype=np.int64)).astype(np.int32)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(cut_offsets), pa.py_buffer(np.ascontiguousarray(data[keep]))]
    )


def _non_ascii_rows(strings: pa.Array) -> np.ndarray:
    """Indices of the rows of a binary array holding a byte >= 0x80."""
    buffers = strings.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int32, count=len(strings) + 1)
    data = np.frombuffer(buffers[2], dtype=np.uint8, count=int(offsets[-1])) if buffers[2] else None
    if data is None or not len(data):
        return np.zeros(0, dtype=np.int64)
    high = np.flatnonzero(data >= 0x80)
    if not len(high):
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.searchsorted(offsets, high, side="right") - 1)


@dataclass(frozen=True)
class CommitKeys:
    ok: np.ndarray  # bool: the codec reads this key
    group: pa.Array  # string (rows not ok: "")
    topic: pa.Array  # string
    partition: np.ndarray  # int32


def decode_commit_keys(slots: pa.Array | pa.ChunkedArray) -> CommitKeys:
    """OffsetCommit keys without their 2-byte type -> (group, topic, partition), as
    `read_offset_commit_key` reads them; `ok` False where it raises."""
    column = binary_column(slots)
    n = len(column.starts)
    rows = np.arange(n, dtype=np.int64)
    length = column.lengths
    ok = column.valid & (length >= 2)
    group_len = np.where(ok, _int_at(column, rows, np.zeros(n, np.int64), 2), 0)
    ok &= (group_len >= 0) & (length >= 2 + group_len + 2)
    group_len = np.where(ok, group_len, 0)
    topic_len = np.where(ok, _int_at(column, rows, 2 + group_len, 2), 0)
    ok &= (topic_len >= 0) & (length >= 2 + group_len + 2 + topic_len + 4)
    topic_len = np.where(ok, topic_len, 0)
    group_len = np.where(ok, group_len, 0)
    partition = np.where(ok, _int_at(column, rows, 4 + group_len + topic_len, 4), 0).astype(np.int32)
    groups = _gather(column, rows, np.full(n, 2, np.int64), group_len)
    topics = _gather(column, rows, 4 + group_len, topic_len)
    # Non-ASCII names: Python's strict UTF-8 decoder, the codec's own check.
    suspects = np.union1d(_non_ascii_rows(groups), _non_ascii_rows(topics))
    if len(suspects):
        for row in suspects.tolist():
            if not ok[row]:
                continue
            try:
                read_offset_commit_key(b"\x00\x01" + (slots[row].as_py() or b""))
            except CorruptRecordError:
                ok[row] = False
        empty = pa.array([b""], pa.binary())
        mask = pa.array(~ok)
        groups = _replace_where(groups, mask, empty)
        topics = _replace_where(topics, mask, empty)
    return CommitKeys(ok, groups.view(pa.string()), topics.view(pa.string()), partition)


def _replace_where(array: pa.Array, mask: pa.Array, empty: pa.Array) -> pa.Array:
    import pyarrow.compute as pc

    return pc.if_else(mask, empty[0], array)


@dataclass(frozen=True)
class PlainCommits:
    plain: np.ndarray  # bool: decoded here; every other row goes to the core codec
    offset: np.ndarray  # int64
    leader_epoch: np.ndarray  # int64 (raw: -1 = none)
    commit_ms: np.ndarray  # int64
    topic_id: np.ndarray  # (n, 16) uint8
    has_topic_id: np.ndarray  # bool (a zero TopicId is no TopicId, as in the codec)


def decode_plain_values(values: pa.Array | pa.ChunkedArray) -> PlainCommits:
    """OffsetCommit values of the plain shapes (module docstring); `plain` False for the rest
    (tombstones included)."""
    column = binary_column(values)
    n = len(column.starts)
    rows = np.arange(n, dtype=np.int64)
    head = _window(column, rows, 0, 26)
    length = column.lengths
    version_3 = (head[:, 0] == 0) & (head[:, 1] == 3)
    version_4 = (head[:, 0] == 0) & (head[:, 1] == 4)
    v3 = column.valid & version_3 & (length == 24) & (head[:, 14] == 0) & (head[:, 15] == 0)
    v4 = column.valid & version_4 & (head[:, 14] == 1)
    v4_bare = v4 & (length == 24) & (head[:, 23] == 0)
    v4_tid = v4 & (length == 42) & (head[:, 23] == 1) & (head[:, 24] == 0) & (head[:, 25] == 16)
    plain = v3 | v4_bare | v4_tid
    offset = np.ascontiguousarray(head[:, 2:10]).view(">i8").reshape(n).astype(np.int64)
    epoch = np.ascontiguousarray(head[:, 10:14]).view(">i4").reshape(n).astype(np.int64)
    commit_v3 = np.ascontiguousarray(head[:, 16:24]).view(">i8").reshape(n).astype(np.int64)
    commit_v4 = np.ascontiguousarray(head[:, 15:23]).view(">i8").reshape(n).astype(np.int64)
    commit = np.where(v3, commit_v3, commit_v4)
    topic_id = np.zeros((n, 16), dtype=np.uint8)
    tid_rows = np.flatnonzero(v4_tid)
    if len(tid_rows):
        topic_id[tid_rows] = _window(column, tid_rows, 26, 16)
    has_topic_id = v4_tid & topic_id.any(axis=1)
    return PlainCommits(plain, offset, epoch, commit, topic_id, has_topic_id)


_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_UUID_LAYOUT = np.array(
    [*range(0, 8), -1, *range(8, 12), -1, *range(12, 16), -1, *range(16, 20), -1, *range(20, 32)]
)


def uuid_strings(raw: np.ndarray, present: np.ndarray) -> pa.Array:
    """(n, 16) bytes -> `str(uuid.UUID(bytes=...))` strings (null where not `present`). A log
    has a few topics and millions of offsets: each distinct id is formatted once (Arrow's hash
    of the ids as fixed-size binaries), then taken per row."""
    import pyarrow.compute as pc

    n = len(raw)
    ids = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), n, [None, pa.py_buffer(np.ascontiguousarray(raw, dtype=np.uint8))]
    )
    encoded = pc.dictionary_encode(ids)
    distinct = encoded.dictionary
    start = distinct.offset * 16
    buffer = distinct.buffers()[1]
    distinct_raw = (
        np.frombuffer(buffer, dtype=np.uint8, count=16 * len(distinct), offset=start).reshape(-1, 16)
        if buffer is not None
        else np.zeros((0, 16), dtype=np.uint8)
    )
    indices = pa.array(encoded.indices.to_numpy(zero_copy_only=False), pa.int32(), mask=~present)
    return _formatted_uuids(distinct_raw).take(indices)


def _formatted_uuids(raw: np.ndarray) -> pa.Array:
    n = len(raw)
    digits = np.empty((n, 32), dtype=np.uint8)
    digits[:, 0::2] = _HEX[raw >> 4]
    digits[:, 1::2] = _HEX[raw & 15]
    text = np.full((n, 36), ord("-"), dtype=np.uint8)
    columns = np.flatnonzero(_UUID_LAYOUT >= 0)
    text[:, columns] = digits[:, _UUID_LAYOUT[columns]]
    offsets = (np.arange(n + 1, dtype=np.int32) * 36).astype(np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(text.ravel())])
