"""Kafka message primitives: the reader used by the codec and the writers used by the encoder.

Non-flexible versions: strings are int16 length + UTF-8 (-1 = null), bytes and arrays int32
length/count (-1 = null). Flexible versions: compact strings/bytes/arrays whose length is an
unsigned varint of `length + 1` (0 = null), and every struct ends with a tagged-field section
(`uvarint count`, then `uvarint tag`, `uvarint size`, `size` bytes per field).
The bounds checks mirror the generated Java readers (e.g. an array count larger than the bytes
left is rejected before allocating), so garbage never makes us allocate or loop a lot.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable

from groupwarden.offsets_log.records import CorruptRecordError

Buffer = bytes | bytearray | memoryview

I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
I64 = struct.Struct(">q")

MAX_STRING = 0x7FFF  # Kafka's limit for a string field


class Reader:
    """A cursor over one message. Every method raises CorruptRecordError past the end."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: Buffer, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def _take(self, n: int) -> int:
        start = self.pos
        stop = start + n
        if n < 0 or stop > self.end:
            raise CorruptRecordError(f"need {n} bytes at {start}, have {self.end - start}")
        self.pos = stop
        return start

    def remaining(self) -> int:
        return self.end - self.pos

    def int8(self) -> int:
        start = self._take(1)
        value = self.buf[start]
        return value - 256 if value > 127 else value

    def int16(self) -> int:
        return int(I16.unpack_from(self.buf, self._take(2))[0])

    def int32(self) -> int:
        return int(I32.unpack_from(self.buf, self._take(4))[0])

    def int64(self) -> int:
        return int(I64.unpack_from(self.buf, self._take(8))[0])

    def uuid(self) -> uuid.UUID:
        start = self._take(16)
        return uuid.UUID(bytes=bytes(self.buf[start : start + 16]))

    def uvarint(self) -> int:
        """An unsigned varint of at most 5 bytes (Kafka's `readUnsignedVarint`)."""
        value = 0
        shift = 0
        buf = self.buf
        pos = self.pos
        end = self.end
        while True:
            if pos >= end:
                raise CorruptRecordError("truncated varint")
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
            if shift > 28:
                raise CorruptRecordError("varint longer than 5 bytes")
        self.pos = pos
        return value

    def _text(self, length: int) -> str:
        if length > MAX_STRING:
            raise CorruptRecordError(f"string length {length} exceeds {MAX_STRING}")
        start = self._take(length)
        try:
            return str(self.buf[start : start + length], "utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptRecordError(f"string at {start} is not UTF-8") from exc

    # Non-flexible (classic) encodings ---------------------------------------------------------

    def string(self) -> str:
        length = self.int16()
        if length < 0:
            raise CorruptRecordError("non-nullable string is null")
        return self._text(length)

    def nullable_string(self) -> str | None:
        length = self.int16()
        return None if length < 0 else self._text(length)

    def bytes_(self) -> bytes:
        length = self.int32()
        if length < 0:
            raise CorruptRecordError("non-nullable bytes are null")
        start = self._take(length)
        return bytes(self.buf[start : start + length])

    def array_len(self) -> int:
        count = self.int32()
        if count < 0:
            raise CorruptRecordError("non-nullable array is null")
        if count > self.end - self.pos:
            raise CorruptRecordError(f"array of {count} with {self.end - self.pos} bytes left")
        return count

    # Flexible (compact) encodings -------------------------------------------------------------

    def compact_string(self) -> str:
        length = self.uvarint() - 1
        if length < 0:
            raise CorruptRecordError("non-nullable compact string is null")
        return self._text(length)

    def compact_nullable_string(self) -> str | None:
        length = self.uvarint() - 1
        return None if length < 0 else self._text(length)

    def compact_bytes(self) -> bytes:
        length = self.uvarint() - 1
        if length < 0:
            raise CorruptRecordError("non-nullable compact bytes are null")
        start = self._take(length)
        return bytes(self.buf[start : start + length])

    def compact_array_len(self) -> int:
        count = self.uvarint() - 1
        if count < 0:
            raise CorruptRecordError("non-nullable compact array is null")
        if count > self.end - self.pos:
            raise CorruptRecordError(f"array of {count} with {self.end - self.pos} bytes left")
        return count

    def tagged_fields(self) -> dict[int, Reader]:
        """The tagged-field section: tag -> a reader bounded to that field's bytes."""
        count = self.uvarint()
        if count > self.end - self.pos:
            raise CorruptRecordError(f"{count} tagged fields with {self.end - self.pos} bytes left")
        fields: dict[int, Reader] = {}
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            start = self._take(size)
            fields[tag] = Reader(self.buf[start : start + size])
        return fields

    def skip_tagged_fields(self) -> None:
        count = self.uvarint()
        if count > self.end - self.pos:
            raise CorruptRecordError(f"{count} tagged fields with {self.end - self.pos} bytes left")
        for _ in range(count):
            self.uvarint()
            self._take(self.uvarint())


# ---------------------------------------------------------------------------------------------
# Writers (encoder only)
# ---------------------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    if value < 0:
        raise ValueError("unsigned varint cannot be negative")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def w_string(value: str) -> bytes:
    data = value.encode()
    return I16.pack(len(data)) + data


def w_nullable_string(value: str | None) -> bytes:
    return I16.pack(-1) if value is None else w_string(value)


def w_bytes(value: bytes) -> bytes:
    return I32.pack(len(value)) + value


def w_array(items: Iterable[bytes], count: int) -> bytes:
    return I32.pack(count) + b"".join(items)


def w_compact_string(value: str) -> bytes:
    data = value.encode()
    return uvarint(len(data) + 1) + data


def w_compact_nullable_string(value: str | None) -> bytes:
    return b"\x00" if value is None else w_compact_string(value)


def w_compact_bytes(value: bytes) -> bytes:
    return uvarint(len(value) + 1) + value


def w_compact_array(items: Iterable[bytes], count: int) -> bytes:
    return uvarint(count + 1) + b"".join(items)


def w_tagged(fields: Iterable[tuple[int, bytes]]) -> bytes:
    """A tagged-field section; fields must be given in ascending tag order."""
    parts = [uvarint(tag) + uvarint(len(data)) + data for tag, data in fields]
    return uvarint(len(parts)) + b"".join(parts)
