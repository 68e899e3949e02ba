"""OffsetCommit records decoded by Spark SQL expressions, in the JVM (whole-stage code generation).

The core codec (`groupwarden.offsets_log.codec`) is the definition of the format and the oracle:
these expressions decode exactly what `read_offset_commit_key` / `read_offset_commit_value` decode
(property-tested record by record, `tests/unit/fleet/test_fleet_jvm_codec.py`), and everything they
are not sure about is *not decoded here* but flagged for the Python workers, where the core codec
and ledger handle it: unknown value versions, corrupt bytes, invalid UTF-8, metadata strings longer
than a 2-byte varint, tagged-field sections other than "none" or "TopicId only".

Integers are read big-endian with `conv(hex(substring(...)), 16, ±10)` (Spark has no binary-to-int
function; `conv` to base -10 reads 64 bits as signed); int16/int32 are sign-extended with shifts.
Positions are 1-based (Spark's `substring`). Every read is guarded by a length check, so truncated
bytes never reach `conv` (and ANSI casts never fail).

Value layouts (after the int16 version):
- v0, v2: offset int64, metadata string (int16 length), commitTimestamp int64
- v1: offset int64, metadata string, commitTimestamp int64, expireTimestamp int64
- v3: offset int64, leaderEpoch int32, metadata string, commitTimestamp int64
- v4 (flexible): offset int64, leaderEpoch int32, metadata compact string (uvarint length + 1),
  commitTimestamp int64, tagged fields (tag 0: TopicId, 16 bytes; all zero = absent)
Key (types 0 and 1 share it): int16 type, group string, topic string, partition int32.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

# Status of a decoded value (and of a compacted offset slot).
OK: Final = 0  # decoded here
TOMBSTONE: Final = 1  # null value: the offset is deleted
PYTHON: Final = 2  # not decoded here: the core codec decides (unknown version, corrupt, rare forms)


def _sql(text: str) -> Column:
    return F.expr(text)


def _u8(col: str, pos: str) -> str:
    return f"cast(conv(hex(substring({col}, {pos}, 1)), 16, 10) as int)"


def _i16(col: str, pos: str) -> str:
    return f"shiftright(shiftleft(cast(conv(hex(substring({col}, {pos}, 2)), 16, 10) as int), 16), 16)"


def _i32(col: str, pos: str) -> str:
    return (
        f"cast(shiftright(shiftleft(cast(conv(hex(substring({col}, {pos}, 4)), 16, 10) as bigint), 32), 32)"
        " as int)"
    )


def _i64(col: str, pos: str) -> str:
    return f"cast(conv(hex(substring({col}, {pos}, 8)), 16, -10) as bigint)"


def _utf8_ok(col: str, pos: str, length: str) -> str:
    return f"({length} = 0 or is_valid_utf8(cast(substring({col}, {pos}, {length}) as string)))"


def _value_stages(value: str) -> list[dict[str, Column]]:
    """Small steps, each reading only the previous step's named columns, so that no expression is
    repeated in the generated code.

    Cost is what decides the shape (10M-record log, docs/benchmarks.md): every integer is read
    straight from the value's bytes (`conv(hex(substring(value, p, n)))`, one short hex string per
    field: 0.87 CPU-s per million records for three fields) rather than from one hex string of the
    whole value (`conv(substring(hex(value), ...))`: 1.85 CPU-s for the same three, because each
    substring of the hex copies it), and a field is read only for the versions that have it, with
    the common values (version 3/4, metadata length 0) recognised by comparing bytes, not by `conv`.
    """
    v = value
    version = (
        f"case when _vn < 2 then -1 when substring({v}, 1, 2) = X'0003' then 3"
        f" when substring({v}, 1, 2) = X'0004' then 4 else {_i16(v, '1')} end"
    )
    v4_len = (
        "case when _vb0 is null then null when _vb0 < 128 then _vb0 - 1"
        " when _vb1 is not null and _vb1 < 128 then ((_vb0 & 127) | (_vb1 << 7)) - 1 end"
    )
    need = "case _vver when 1 then _vms + _vml + 15 when 4 then _vms + _vml + 8 else _vms + _vml + 7 end"
    tags = (
        "case when _vver <> 4 then 0 when _vtc = 0 then 0"
        " when _vtc = 1 and _vtg = 0 and _vts = 16 and _vn >= _vt + 18 then 1 else -1 end"
    )
    has_tid = "(_vver = 4 and _vtags = 1 and not (_vtid_hi = 0 and _vtid_lo = 0))"
    status = (
        f"case when {v} is null then {TOMBSTONE}"
        f" when _vshape and _vver between 0 and 4 and _vtags >= 0 and _vutf8 then {OK} else {PYTHON} end"
    )
    v4_tag = "_vshape and _vver = 4"
    return [
        {"_vn": _sql(f"coalesce(length({v}), -1)")},
        {"_vver": _sql(version)},
        {
            "_voff": _sql(f"case when _vn >= 10 then {_i64(v, '3')} end"),
            "_vepoch": _sql(f"case when _vver in (3, 4) and _vn >= 14 then {_i32(v, '11')} end"),
            # metadata length: int16 at 11 (v0-v2) or 15 (v3); v4: a uvarint at 15 (length + 1)
            "_vm16": _sql(f"case when _vver in (0, 1, 2) and _vn >= 12 then {_i16(v, '11')} end"),
            "_vm16v3": _sql(
                f"case when _vver <> 3 or _vn < 16 then null when substring({v}, 15, 2) = X'0000' then 0"
                f" else {_i16(v, '15')} end"
            ),
            "_vb0": _sql(
                f"case when _vver <> 4 or _vn < 15 then null when substring({v}, 15, 1) = X'01' then 1"
                f" else {_u8(v, '15')} end"
            ),
        },
        {"_vb1": _sql(f"case when _vb0 >= 128 and _vn >= 16 then {_u8(v, '16')} end")},
        {
            "_vms": _sql(
                "case _vver when 3 then 17 when 4 then (case when _vb0 < 128 then 16 else 17 end) else 13 end"
            ),
            "_vml": _sql(
                "case when _vver in (0, 1, 2) then _vm16 when _vver = 3 then _vm16v3"
                f" when _vver = 4 then {v4_len} end"
            ),
        },
        {"_vt": _sql("_vms + _vml + 8"), "_vshape": _sql(f"coalesce(_vml >= 0 and _vn >= {need}, false)")},
        {
            "_vcommit": _sql(f"case when _vshape then {_i64(v, '_vms + _vml')} end"),
            "_vexpire": _sql(
                f"case when _vshape and _vver = 1 then {_i64(v, '_vms + _vml + 8')} else -1 end"
            ),
            "_vtc": _sql(f"case when {v4_tag} then {_u8(v, '_vt')} end"),
            "_vtg": _sql(f"case when {v4_tag} and _vn >= _vt + 1 then {_u8(v, '_vt + 1')} end"),
            "_vts": _sql(f"case when {v4_tag} and _vn >= _vt + 2 then {_u8(v, '_vt + 2')} end"),
            "_vutf8": _sql(f"_vshape and {_utf8_ok(v, '_vms', '_vml')}"),
        },
        {
            # the TopicId only when the tag section starts with tag 0 of 16 bytes (one tag)
            "_vtid_hi": _sql(f"case when _vtc = 1 and _vn >= _vt + 18 then {_i64(v, '_vt + 3')} end"),
            "_vtid_lo": _sql(f"case when _vtc = 1 and _vn >= _vt + 18 then {_i64(v, '_vt + 11')} end"),
        },
        {"_vtags": _sql(tags)},
        {
            "v_status": _sql(status),
            "v_offset": _sql("_voff"),
            "v_epoch": _sql("case when _vver in (3, 4) then _vepoch else -1 end"),
            "v_commit": _sql("_vcommit"),
            "v_expire": _sql("_vexpire"),
            "v_meta_len": _sql("_vml"),
            "v_meta_start": _sql("_vms"),
            "v_tid_hi": _sql(f"case when {has_tid} then _vtid_hi end"),
            "v_tid_lo": _sql(f"case when {has_tid} then _vtid_lo end"),
        },
    ]


def metadata(value: str, start: str, length: str, status: str = "v_status") -> Column:
    """The metadata string of a decoded value (start/length/status from `value_fields`); null
    unless the value was decoded here."""
    return _sql(
        f"case when {status} <> {OK} then null when {length} > 0"
        f" then cast(substring({value}, {start}, {length}) as string) else '' end"
    )


def topic_id(hi: str, lo: str) -> Column:
    """Two int64 halves as the canonical UUID text (`str(uuid.UUID(bytes=...))`), or null."""
    h = f"lpad(lower(hex({hi})), 16, '0')"
    lo_hex = f"lpad(lower(hex({lo})), 16, '0')"
    return _sql(
        f"case when {hi} is null then null else concat_ws('-', substr({h}, 1, 8), substr({h}, 9, 4),"
        f" substr({h}, 13, 4), substr({lo_hex}, 1, 4), substr({lo_hex}, 5, 12)) end"
    )


def decode_values(frame: DataFrame, value: str = "value") -> DataFrame:
    """`frame` with the decoded value columns (`v_*`) added; the helper columns are dropped."""
    out = frame
    for stage in _value_stages(value):
        out = out.withColumns(stage)
    return out.drop(*[c for c in out.columns if c.startswith("_v")])


def key_stage(slot: str = "slot") -> dict[str, Column]:
    """Group/topic/partition lengths of an OffsetCommit key without its 2-byte type (`slot`)."""
    n = f"length({slot})"
    return {
        "_kn": _sql(n),
        "_kg": _sql(f"case when {n} >= 2 then {_i16(slot, '1')} end"),
    }


def key_stage2(slot: str = "slot") -> dict[str, Column]:
    return {"_kt": _sql(f"case when _kg >= 0 and _kn >= _kg + 4 then {_i16(slot, '_kg + 3')} end")}


def key_fields(slot: str = "slot") -> dict[str, Column]:
    """k_ok (decodable here), group, topic, partition."""
    shape = "(_kg >= 0 and _kt is not null and _kt >= 0 and _kn >= _kg + _kt + 8)"
    ok = f"({shape} and {_utf8_ok(slot, '3', '_kg')} and {_utf8_ok(slot, '_kg + 5', '_kt')})"
    return {"_kok": _sql(f"coalesce({ok}, false)")}


def key_fields2(slot: str = "slot") -> dict[str, Column]:
    """k_ok (decodable here), group, topic, partition (null unless k_ok)."""
    return {
        "k_ok": _sql("_kok"),
        "group": _sql(f"case when _kok then cast(substring({slot}, 3, _kg) as string) end"),
        "topic": _sql(f"case when _kok then cast(substring({slot}, _kg + 5, _kt) as string) end"),
        "tp": _sql(f"case when _kok then {_i32(slot, '_kg + _kt + 5')} end"),
    }


def decode_keys(frame: DataFrame, slot: str = "slot") -> DataFrame:
    out = frame.withColumns(key_stage(slot)).withColumns(key_stage2(slot)).withColumns(key_fields(slot))
    return out.withColumns(key_fields2(slot)).drop("_kn", "_kg", "_kt", "_kok")


def is_commit_key(key: str = "key") -> Column:
    """Types 0 and 1 (OffsetCommit): the key's first two bytes."""
    return _sql(f"coalesce(length({key}) >= 2 and substring({key}, 1, 2) in (X'0000', X'0001'), false)")
