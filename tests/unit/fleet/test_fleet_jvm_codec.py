"""The JVM decode (Spark SQL expressions, `groupwarden.fleet.jvm_codec`) equals the core codec,
record by record, for every OffsetCommit key/value version the codec knows, plus unknown versions
and corrupt bytes. The core codec is the oracle: whatever the JVM decodes must be exactly what
`read_offset_commit_key` / `read_offset_commit_value` return, whatever the codec rejects the JVM
must hand to Python, and it may hand over a decodable value only for the rare forms it does not
handle (v4 metadata longer than a 2-byte varint, tagged fields other than "none" / "TopicId")."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from groupwarden.offsets_log._wire import I16, I32, I64, uvarint, w_string, w_tagged
from groupwarden.offsets_log.codec import read_offset_commit_key, read_offset_commit_value
from groupwarden.offsets_log.records import CorruptRecordError

pyspark = pytest.importorskip("pyspark")

Record = tuple[bytes, bytes | None]


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from groupwarden.fleet.session import start_session

    session, owned = start_session("local[2]", kafka_source=False)
    yield session
    if owned:
        session.stop()


# ---------------------------------------------------------------------------------------------
# Records of every version, honest and broken
# ---------------------------------------------------------------------------------------------

int16 = st.integers(-(2**15), 2**15 - 1)
int32 = st.one_of(st.just(-1), st.integers(-(2**31), 2**31 - 1))
int64 = st.one_of(st.sampled_from([-1, 0, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))
names = st.one_of(st.text(max_size=12), st.sampled_from(["", "app-1", "topic.ü.€", "😀"]))
metadata = st.one_of(st.just(""), st.text(max_size=20), st.text(min_size=70, max_size=200))
topic_ids = st.one_of(st.none(), st.just(bytes(16)), st.binary(min_size=16, max_size=16))


@st.composite
def keys(draw: st.DrawFn) -> bytes:
    key = I16.pack(draw(st.sampled_from([0, 1]))) + w_string(draw(names)) + w_string(draw(names))
    key += I32.pack(draw(int32))
    return draw(mutated(key))


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """Mostly intact; sometimes truncated, extended, a byte replaced, or bad UTF-8 spliced in."""
    how = draw(st.sampled_from(["same"] * 6 + ["cut", "extend", "flip", "utf8"]))
    if how == "cut" and len(data) > 2:
        return data[: draw(st.integers(2, len(data) - 1))]
    if how == "extend":
        return data + draw(st.binary(min_size=1, max_size=5))
    if how == "flip" and len(data) > 2:
        at = draw(st.integers(2, len(data) - 1))
        return data[:at] + bytes([draw(st.integers(0, 255))]) + data[at + 1 :]
    if how == "utf8" and len(data) > 6:
        at = draw(st.integers(4, len(data) - 2))
        bad = draw(st.sampled_from([b"\xff", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf4\x90\x80\x80"]))
        return data[:at] + bad[: len(data) - at] + data[at + len(bad) :]
    return data


@st.composite
def values(draw: st.DrawFn) -> bytes | None:
    version = draw(st.sampled_from([0, 1, 2, 3, 4, 4, 4, 3, -1, 5, 7, 300]))
    offset, epoch, commit, expire = draw(int64), draw(int32), draw(int64), draw(int64)
    meta = draw(metadata).encode()
    if draw(st.integers(0, 9)) == 0:
        return None  # tombstone
    if version in (0, 1, 2, 3) or version not in (4,):
        head = I16.pack(version) + I64.pack(offset)
        if version == 3:
            head += I32.pack(epoch)
        meta_len = draw(st.one_of(st.just(len(meta)), st.sampled_from([-1, len(meta) + 3])))
        body = head + I16.pack(meta_len) + meta + I64.pack(commit)
        if version == 1:
            body += I64.pack(expire)
        return draw(mutated(body))
    # v4: compact string (1, 2 or 3-byte varint), tagged fields in several shapes
    length = uvarint(len(meta) + 1)
    if draw(st.integers(0, 7)) == 0:
        length = draw(st.sampled_from([b"\x00", b"\x80\x00", b"\x81\x80\x00", b"\xff\xff\xff\xff\xff\x01"]))
    big = draw(st.integers(0, 15)) == 0
    if big:
        meta = b"m" * draw(st.sampled_from([127, 128, 16383, 16384, 20000]))
        length = uvarint(len(meta) + 1)
    tid = draw(topic_ids)
    shape = draw(st.sampled_from(["none", "tid", "tid", "other", "tid+other", "short-tid", "raw"]))
    if shape == "none" or (shape in ("tid", "tid+other") and tid is None):
        tags = w_tagged([])
    elif shape == "tid":
        assert tid is not None
        tags = w_tagged([(0, tid)])
    elif shape == "other":
        tags = w_tagged([(3, draw(st.binary(max_size=4)))])
    elif shape == "tid+other":
        assert tid is not None
        tags = w_tagged([(0, tid), (9, b"zz")])
    elif shape == "short-tid":
        tags = w_tagged([(0, bytes(15))])
    else:
        tags = draw(st.binary(max_size=4))
    body = I16.pack(4) + I64.pack(offset) + I32.pack(epoch) + length + meta + I64.pack(commit) + tags
    return draw(mutated(body))


def raw_binary(draw_bytes: bytes) -> bytes:
    return draw_bytes


records = st.one_of(
    st.tuples(keys(), values()),
    st.tuples(st.binary(min_size=2, max_size=30).map(lambda b: b"\x00\x01" + b), st.binary(max_size=40)),
)

# ---------------------------------------------------------------------------------------------
# Oracle and comparison
# ---------------------------------------------------------------------------------------------


def codec_key(key: bytes) -> tuple[str, str, int] | None:
    try:
        return read_offset_commit_key(key)
    except CorruptRecordError:
        return None


def codec_value(value: bytes) -> tuple[Any, ...] | str:
    try:
        fields = read_offset_commit_value(value)
    except CorruptRecordError:
        return "corrupt"
    if fields is None:
        return "unknown"
    offset, epoch, meta, commit, expire, tid = fields
    return (offset, epoch, meta, commit, expire, None if tid is None else str(uuid.UUID(bytes=tid)))


def rare_form(value: bytes) -> bool:
    """A v4 value the JVM may leave to Python although it is valid: a metadata length varint of
    3+ bytes, or tagged fields other than none / exactly the 16-byte TopicId with 1-byte varints."""
    if len(value) < 15 or struct.unpack_from(">h", value, 0)[0] != 4:
        return False
    b0 = value[14]
    if b0 < 0x80:
        start, length = 15, b0 - 1
    elif len(value) > 15 and value[15] < 0x80:
        start, length = 16, ((b0 & 0x7F) | (value[15] << 7)) - 1
    else:
        return True
    tags = start + length + 8
    if tags >= len(value):
        return False
    if value[tags] == 0:
        return False
    return not (value[tags] == 1 and value[tags + 1 : tags + 3] == b"\x00\x10" and len(value) >= tags + 19)


def jvm_decode(spark: Any, batch: list[Record]) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    from groupwarden.fleet.jvm_codec import decode_keys, decode_values, metadata, topic_id

    frame = spark.createDataFrame(
        [(i, k, v) for i, (k, v) in enumerate(batch)], "i int, key binary, value binary"
    ).withColumn("slot", F.expr("substring(key, 3)"))
    frame = decode_keys(decode_values(frame))
    frame = frame.select(
        "i",
        "k_ok",
        "group",
        "topic",
        "tp",
        "v_status",
        "v_offset",
        "v_epoch",
        metadata("value", "v_meta_start", "v_meta_len").alias("meta"),
        "v_commit",
        "v_expire",
        topic_id("v_tid_hi", "v_tid_lo").alias("tid"),
    )
    from groupwarden.fleet.job import collect_arrow

    return sorted(collect_arrow(frame).to_pylist(), key=lambda r: r["i"])


def assert_same(spark: Any, batch: list[Record]) -> dict[str, int]:
    from groupwarden.fleet.jvm_codec import OK, PYTHON, TOMBSTONE

    seen = {"ok": 0, "python": 0, "tombstone": 0, "bad_key": 0}
    for (key, value), row in zip(batch, jvm_decode(spark, batch), strict=True):
        expected_key = codec_key(key)
        if expected_key is None:
            assert row["k_ok"] is False, (key, row)
            seen["bad_key"] += 1
        else:
            assert row["k_ok"] is True, (key, row)
            assert (row["group"], row["topic"], row["tp"]) == expected_key, key
        if value is None:
            assert row["v_status"] == TOMBSTONE
            seen["tombstone"] += 1
            continue
        expected = codec_value(value)
        if row["v_status"] == OK:
            got = (row["v_offset"], row["v_epoch"], row["meta"], row["v_commit"], row["v_expire"], row["tid"])
            assert got == expected, (value.hex(), got, expected)
            seen["ok"] += 1
        else:
            assert row["v_status"] == PYTHON, row
            assert isinstance(expected, str) or rare_form(value), (value.hex(), expected)
            seen["python"] += 1
    return seen


# No shrinking phase: each example is a Spark job; a failure prints the whole batch and its seed.
@settings(
    max_examples=12,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)
@given(batch=st.lists(records, min_size=100, max_size=250))
def test_jvm_decode_equals_the_core_codec_on_generated_records(spark: Any, batch: list[Record]) -> None:
    assert_same(spark, batch)


def test_every_version_and_edge_is_decoded_in_the_jvm(spark: Any) -> None:
    """Explicit cases: each known version is decoded in the JVM (not handed to Python), with
    negative offsets, leader epoch -1, empty/long metadata, v1 expiry, v4 TopicId (and zero)."""
    tid = uuid.UUID("8e4a0b9c-1d2e-4f30-a1b2-c3d4e5f60718").bytes
    key = I16.pack(1) + w_string("grp-ü") + w_string("orders") + I32.pack(-3)
    legacy_key = I16.pack(0) + w_string("") + w_string("t") + I32.pack(2**31 - 1)

    def v012(version: int, meta: bytes, extra: bytes = b"") -> bytes:
        return I16.pack(version) + I64.pack(-5) + I16.pack(len(meta)) + meta + I64.pack(1700) + extra

    def v4(meta: bytes, tags: bytes) -> bytes:
        return (
            I16.pack(4) + I64.pack(2**62) + I32.pack(-1) + uvarint(len(meta) + 1) + meta + I64.pack(-1) + tags
        )

    batch: list[Record] = [
        (key, v012(0, b"")),
        (key, v012(1, b"meta", I64.pack(1_800_000))),
        (legacy_key, v012(2, "ü".encode())),
        (key, I16.pack(3) + I64.pack(0) + I32.pack(-1) + I16.pack(0) + I64.pack(-1)),
        (key, v4(b"", w_tagged([]))),
        (key, v4(b"x" * 200, w_tagged([(0, tid)]))),
        (key, v4(b"", w_tagged([(0, bytes(16))]))),
        (key, None),
    ]
    seen = assert_same(spark, batch)
    assert seen["ok"] == 7 and seen["python"] == 0 and seen["tombstone"] == 1 and seen["bad_key"] == 0
    # unknown versions and corrupt values go to Python, never decoded in the JVM
    broken: list[Record] = [
        (key, I16.pack(5) + b"\x00" * 30),
        (key, b"\x00"),
        (key, v012(3, b"")[:10]),
        (key, v4(b"", w_tagged([(0, bytes(15))]))),
        (key, v012(0, b"\xff")),
    ]
    seen = assert_same(spark, broken)
    assert seen["python"] == 5
