"""The audit's task function without a JVM.

- The vectorised reader of plain commits (`fleet/fast_codec.py`) is a second reader of the bytes the
  core codec defines: for records of every OffsetCommit key/value version the codec knows, honest
  and broken (negative offsets, null and empty metadata, tombstones, leader epoch -1, v4 tagged
  fields, zero TopicId, unknown versions, truncated / extended / flipped bytes, invalid UTF-8), it
  either equals `read_offset_commit_key` / `read_offset_commit_value` record by record or hands the
  record to the core codec; and it takes every plain shape brokers write.
- A (cluster, partition) unit audited by `audit_unit` equals the core `ReplayWithHistory` over the
  same records: groups, offsets, come-backs (also across a GroupMetadata tombstone while the
  group's offsets live on), positions and counts, in log order or shuffled, with and without
  history, several units in one task.
- The compaction's key encoding (`KeyIds`: every record's key encoded in place, no copy of the
  commits' keys) gives each commit the slot and each slot the first-record order the definition
  gives (keys cut by Python, record by record), and the latest record of each metadata key.
- An export of the interleaved layout (format 1) is refused with how to convert it, and the
  conversion gives the same audit.
"""

from __future__ import annotations

import itertools
import json
import random
import struct
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from groupwarden.fleet.fast_codec import decode_commit_keys, decode_plain_values, uuid_strings
from groupwarden.fleet.partition_audit import KeyIds, audit_partitions, audit_unit
from groupwarden.fleet.schema import EXPORT_METADATA, RAW_SCHEMA
from groupwarden.offsets_log import LogRecord, OffsetsLedger
from groupwarden.offsets_log._wire import I16, I32, I64, uvarint, w_string, w_tagged
from groupwarden.offsets_log.codec import read_offset_commit_key, read_offset_commit_value
from groupwarden.offsets_log.history import ReplayWithHistory
from groupwarden.offsets_log.records import (
    ClassicMember,
    CorruptRecordError,
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groupwarden.offsets_log.snapshot import ledger_answers
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytestmark = pytest.mark.unit

# ---------------------------------------------------------------------------------------------
# Records of every version, honest and broken
# ---------------------------------------------------------------------------------------------

int32 = st.one_of(st.just(-1), st.integers(-(2**31), 2**31 - 1))
int64 = st.one_of(st.sampled_from([-1, 0, 2**63 - 1, -(2**63)]), st.integers(-(2**63), 2**63 - 1))
names = st.one_of(st.text(max_size=12), st.sampled_from(["", "app-1", "topic.ü.€", "😀"]))
metadata = st.one_of(st.just(""), st.text(max_size=20), st.text(min_size=70, max_size=200))
topic_ids = st.one_of(st.none(), st.just(bytes(16)), st.binary(min_size=16, max_size=16))


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
def slots(draw: st.DrawFn) -> bytes:
    """An OffsetCommit key without its 2-byte type."""
    return draw(mutated(w_string(draw(names)) + w_string(draw(names)) + I32.pack(draw(int32))))


@st.composite
def values(draw: st.DrawFn) -> bytes | None:
    version = draw(st.sampled_from([0, 1, 2, 3, 3, 4, 4, 4, -1, 5, 300]))
    offset, epoch, commit, expire = draw(int64), draw(int32), draw(int64), draw(int64)
    meta = draw(metadata).encode()
    if draw(st.integers(0, 9)) == 0:
        return None  # tombstone
    if version != 4:
        head = I16.pack(version) + I64.pack(offset)
        if version == 3:
            head += I32.pack(epoch)
        meta_len = draw(st.one_of(st.just(len(meta)), st.sampled_from([-1, len(meta) + 3])))
        body = head + I16.pack(meta_len) + meta + I64.pack(commit)
        if version == 1:
            body += I64.pack(expire)
        return draw(mutated(body))
    length = uvarint(len(meta) + 1)
    if draw(st.integers(0, 7)) == 0:
        length = draw(st.sampled_from([b"\x00", b"\x80\x00", b"\x81\x80\x00"]))
    if draw(st.integers(0, 15)) == 0:
        meta = b"m" * draw(st.sampled_from([127, 128, 16384]))
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


def core_key(slot: bytes) -> tuple[str, str, int] | None:
    try:
        return read_offset_commit_key(b"\x00\x01" + slot)
    except CorruptRecordError:
        return None


def core_value(value: bytes) -> Any:
    try:
        return read_offset_commit_value(value)
    except CorruptRecordError:
        return "corrupt"


def plain_shape(value: bytes | None) -> bool:
    """The shapes a broker writes for a commit without metadata: these must be taken."""
    if value is None or len(value) < 16:
        return False
    version = struct.unpack_from(">h", value, 0)[0]
    if version == 3:
        return len(value) == 24 and value[14:16] == b"\x00\x00"
    if version == 4 and value[14] == 1:
        return (len(value) == 24 and value[23] == 0) or (len(value) == 42 and value[23:26] == b"\x01\x00\x10")
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(slots(), min_size=1, max_size=40))
def test_fast_keys_equal_the_core_codec_record_by_record(batch: list[bytes]) -> None:
    decoded = decode_commit_keys(pa.array(batch, pa.binary()))
    groups, topics = decoded.group.to_pylist(), decoded.topic.to_pylist()
    for i, slot in enumerate(batch):
        expected = core_key(slot)
        if expected is None:
            assert not decoded.ok[i], slot
        else:
            assert decoded.ok[i], slot
            assert (groups[i], topics[i], int(decoded.partition[i])) == expected


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(values(), min_size=1, max_size=40))
def test_fast_values_equal_the_core_codec_or_go_to_it(batch: list[bytes | None]) -> None:
    decoded = decode_plain_values(pa.array(batch, pa.binary()))
    ids = uuid_strings(decoded.topic_id, decoded.has_topic_id).to_pylist()
    for i, value in enumerate(batch):
        if not decoded.plain[i]:
            assert not plain_shape(value), value  # handed to the core codec only if not plain
            continue
        assert value is not None
        expected = core_value(value)
        offset, epoch, meta, commit, expire, tid = expected
        assert (int(decoded.offset[i]), int(decoded.leader_epoch[i]), "", int(decoded.commit_ms[i]), -1) == (
            offset,
            epoch,
            meta,
            commit,
            expire,
        )
        assert ids[i] == (None if tid is None else str(uuid.UUID(bytes=tid)))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([bytes(16), b"\xff" * 16]) | st.binary(min_size=16, max_size=16), st.booleans()
        ),
        max_size=30,
    )
)
def test_topic_ids_are_formatted_as_python_formats_them(rows: list[tuple[bytes, bool]]) -> None:
    """`uuid_strings` formats each distinct id once and takes it per row: the same strings as
    `uuid.UUID`, null where an id is not present, with ids repeated or not."""
    raw = np.frombuffer(b"".join(r for r, _ in rows), dtype=np.uint8).reshape(len(rows), 16)
    present = np.array([p for _, p in rows], dtype=bool)
    expected = [str(uuid.UUID(bytes=r)) if p else None for r, p in rows]
    assert uuid_strings(raw, present).to_pylist() == expected
    assert uuid_strings(raw[::-1], present[::-1]).to_pylist() == expected[::-1]


def test_fast_values_take_what_brokers_write() -> None:
    tid = uuid.uuid4()
    batch = [
        encode_value(OffsetCommitValue(5, -1, "", 7, -1, None, 3)),
        encode_value(OffsetCommitValue(2**40, 12, "", 8, -1, tid, 4)),
        encode_value(OffsetCommitValue(6, 0, "", 9, -1, None, 4)),
        encode_value(OffsetCommitValue(-3, -1, "", 9, -1, uuid.UUID(int=0), 4)),
    ]
    decoded = decode_plain_values(pa.array(batch, pa.binary()))
    assert decoded.plain.all()
    assert uuid_strings(decoded.topic_id, decoded.has_topic_id).to_pylist() == [None, str(tid), None, None]


# ---------------------------------------------------------------------------------------------
# Compaction: slots of the commits' keys, encoded in place
# ---------------------------------------------------------------------------------------------

log_keys = st.one_of(
    st.none(),
    st.binary(max_size=1),
    st.builds(
        lambda rtype, rest: bytes([0, rtype]) + rest,
        st.integers(0, 3),
        st.sampled_from([b"", b"a", b"\x00\x01g\x00\x01t\x00\x00\x00\x00", b"zz"]),
    ),
)


def is_commit_key(key: bytes | None) -> bool:
    return key is not None and len(key) >= 2 and key[0] == 0 and key[1] <= 1


@settings(max_examples=300, deadline=None)
@given(st.lists(log_keys, min_size=1, max_size=60), st.booleans())
def test_commit_slots_equal_keys_cut_record_by_record(keys: list[bytes | None], chunked: bool) -> None:
    array = pa.array(keys, pa.binary())
    if chunked:  # an offset into a bigger buffer, as a chunk of a column is
        array = pa.array([b"pad", *keys], pa.binary()).slice(1)
    commit_rows = np.array([i for i, k in enumerate(keys) if is_commit_key(k)], dtype=np.int64)
    slot_ids, slots = KeyIds.of(array).commit_slots(commit_rows)

    first_seen: dict[bytes, int] = {}  # the definition: slot = key without its type, in first-record order
    expected_ids = []
    for row in commit_rows.tolist():
        key = keys[row]
        assert key is not None
        expected_ids.append(first_seen.setdefault(key[2:], len(first_seen)))
    assert slots.to_pylist() == list(first_seen)
    assert slot_ids.tolist() == expected_ids


@settings(max_examples=200, deadline=None)
@given(st.lists(log_keys, min_size=1, max_size=60), st.data())
def test_latest_rows_are_the_last_record_of_each_key(keys: list[bytes | None], data: st.DataObject) -> None:
    rows = sorted(data.draw(st.sets(st.integers(0, len(keys) - 1))))
    latest = KeyIds.of(pa.array(keys, pa.binary())).latest_rows(np.array(rows, dtype=np.int64))
    last_of_key = {keys[row]: row for row in rows}
    assert latest.tolist() == sorted(last_of_key.values())


# ---------------------------------------------------------------------------------------------
# A unit audited by the task equals the core replay
# ---------------------------------------------------------------------------------------------


def raw_table(cluster: str, records: list[LogRecord]) -> pa.Table:
    return pa.table(
        {
            "cluster": [cluster] * len(records),
            "partition": pa.array([r[3] for r in records], pa.int32()),
            "offset": pa.array([r[4] for r in records], pa.int64()),
            "timestamp": pa.array([r[2] for r in records], pa.int64()),
            "key": pa.array([r[0] for r in records], pa.binary()),
            "value": pa.array([r[1] for r in records], pa.binary()),
        },
        schema=RAW_SCHEMA,
    )


def tombstoned_comebacks(partition: int, start: int, t0: int) -> list[LogRecord]:
    """Groups that go Empty, lose their GroupMetadata (a tombstone) while their offsets live on,
    then come back (issue 20: the core keeps their Empty-since across the tombstone)."""
    out: list[LogRecord] = []

    def add(key: bytes, value: bytes | None) -> None:
        out.append((key, value, t0 + 10 * len(out), partition, start + len(out)))

    member = ClassicMember("m", None, "c", "/h", 1, 1, b"", b"")
    for i in range(6):
        group = f"tombstoned-{i}"
        commit = encode_key(OffsetCommitKey(group, "t", 0, 1))
        meta = encode_key(GroupMetadataKey(group))
        add(commit, encode_value(OffsetCommitValue(i, 1, "", t0, -1, None, 3)))
        add(meta, encode_value(GroupMetadataValue("consumer", 1, None, None, t0 + 10 * len(out), (), 3)))
        if i % 2:
            add(commit, encode_value(OffsetCommitValue(i + 1, 1, "", t0, -1, None, 3)))
        if i == 5:  # offsets gone first: the tombstone ends the group, no come-back in the core either
            add(commit, None)
        add(meta, None)
        back = GroupMetadataValue("consumer", 2, "range", "m", t0 + 10 * len(out), (member,), 3)
        add(meta, encode_value(back))
    return out


def core_rows(records: list[LogRecord]) -> tuple[ReplayWithHistory, dict[str, Any]]:
    replay = ReplayWithHistory(OffsetsLedger())
    for key, value, ts, p, offset in sorted(records, key=lambda r: (r[3], r[4])):
        replay.apply(key, value, ts, p, offset)
    return replay, {v.group_id: (v, o) for v, o in ledger_answers(replay.ledger)}


def task_answers(rows: list[dict[str, Any]]) -> dict[str, Any]:
    from groupwarden.fleet.sources import ClusterSource
    from groupwarden.testing.fleet_oracle import collect_reference

    clusters = sorted({r["cluster"] for r in rows})
    audits = collect_reference(rows, [ClusterSource(c, c) for c in clusters])
    return {a.source.name: a for a in audits}


@pytest.mark.parametrize("keep_history", [True, False])
def test_a_unit_equals_the_core_replay(keep_history: bool) -> None:
    log = list(synthetic_log(30_000, 400, partitions=1, seed=21))
    log += tombstoned_comebacks(0, log[-1][4] + 1, log[-1][2] + 1)
    rng = random.Random(3)
    shuffled = log[:]
    rng.shuffle(shuffled)  # the task restores log order itself
    rows = audit_unit(raw_table("c", shuffled), keep_history=keep_history, now_ms=log[-1][2]).to_pylist()
    [audit] = task_answers(rows).values()
    replay, expected = core_rows(log)
    assert {v.group_id: (v, o) for v, o in audit.answers} == expected
    assert audit.positions == replay.ledger.positions
    assert audit.reach.records == replay.ledger.records == len(log)
    assert audit.reach.tombstones == replay.ledger.tombstones
    kinds = {r["kind"]: r["count"] for r in rows if r["row_kind"] == "kinds"}
    assert sum(kinds.values()) == replay.ledger.group_count
    if keep_history:
        assert sorted(audit.comebacks) == sorted(replay.comebacks)
        back = {c.group for c in replay.comebacks if c.group.startswith("tombstoned-")}
        assert back == {f"tombstoned-{i}" for i in range(5)}


def test_several_units_and_clusters_in_one_task() -> None:
    log = list(synthetic_log(12_000, 200, partitions=3, seed=8))
    table = pa.concat_tables([raw_table("east", log), raw_table("west", log[: len(log) // 2])])
    audits = task_answers(audit_partitions(table).to_pylist())
    for name, records in (("east", log), ("west", log[: len(log) // 2])):
        replay, expected = core_rows(records)
        assert {v.group_id: (v, o) for v, o in audits[name].answers} == expected
        assert sorted(audits[name].comebacks) == sorted(replay.comebacks)
        assert audits[name].positions == replay.ledger.positions


# ---------------------------------------------------------------------------------------------
# Exports: per partition (format 2); the interleaved layout is refused, and converted
# ---------------------------------------------------------------------------------------------


def test_an_interleaved_export_is_refused_with_how_to_convert_it(tmp_path: Path) -> None:
    from groupwarden.fleet.export import EXPORT_FORMAT, convert_export
    from groupwarden.fleet.sources import OldExportLayout, export_files

    log = list(synthetic_log(5_000, 100, partitions=4, seed=2))
    old = tmp_path / "old"
    old.mkdir()
    table = raw_table("east", log)
    pq.write_table(table.slice(0, 3000), old / "records-00000.parquet")
    pq.write_table(table.slice(3000), old / "records-00001.parquet")
    (old / EXPORT_METADATA).write_text(json.dumps({"cluster": "east", "clusterId": "E", "records": len(log)}))

    with pytest.raises(OldExportLayout, match=r"export-offsets-log --convert"):
        export_files(old)
    stats = convert_export(old)
    assert stats.records == len(log)
    files = export_files(old)
    assert sorted(files) == [0, 1, 2, 3] and not list(old.glob("records-*.parquet"))
    assert json.loads((old / EXPORT_METADATA).read_text())["format"] == EXPORT_FORMAT
    for partition, names in files.items():
        mine = pa.concat_tables([pq.read_table(old / n) for n in names])
        assert set(mine.column("partition").to_pylist()) == {partition}
        assert sorted(mine.column("offset").to_pylist()) == sorted(r[4] for r in log if r[3] == partition)
    assert convert_export(old).records == len(log)  # idempotent


def test_partitions_are_shared_out_to_readers_in_equal_numbers_of_offsets() -> None:
    from groupwarden.fleet.export import Piece, share_partitions

    ranges = {0: (0, 900), 1: (0, 100), 2: (50, 950), 3: (0, 300), 4: (10, 310), 5: (0, 5), 6: (7, 7)}
    shares = share_partitions(ranges, 2)  # 2,505 offsets: 1,253 each at most
    assert shares == [
        [Piece(0, 0, 900, True), Piece(1, 0, 100, True), Piece(2, 50, 303, False)],
        [Piece(2, 303, 950, False), Piece(3, 0, 300, True), Piece(4, 10, 310, True), Piece(5, 0, 5, True)],
    ]
    for readers in (1, 2, 3, 4, 7, 50, 3000):
        shares = share_partitions(ranges, readers)
        assert 1 <= len(shares) <= readers and all(shares)
        sizes = [sum(p.end - p.start for p in share) for share in shares]
        quota = -(-2505 // readers)
        assert sum(sizes) == 2505 and all(size == quota for size in sizes[:-1]) and sizes[-1] <= quota
        # every offset of every partition exactly once, in pieces that meet
        for partition, (start, end) in ranges.items():
            pieces = sorted(
                (p for share in shares for p in share if p.partition == partition), key=lambda p: p.start
            )
            if start == end:
                assert not pieces
                continue
            assert pieces[0].start == start and pieces[-1].end == end
            assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
            assert all(p.whole == (len(pieces) == 1) for p in pieces)
            assert len({p.file for p in pieces}) == len(pieces)
        # a reader reads a partition once at most
        assert all(len({p.partition for p in share}) == len(share) for share in shares)
    assert share_partitions(ranges, 1) == [[Piece(p, *ranges[p], True) for p in range(6)]]
    assert share_partitions({}, 4) == [] and share_partitions({3: (5, 5)}, 2) == []
    # the devstack's 3 partitions, 2 readers: one partition is read by both
    assert [len(s) for s in share_partitions({0: (0, 400), 1: (0, 400), 2: (0, 400)}, 2)] == [2, 2]


def test_writers_of_pieces_make_the_same_export_as_one(tmp_path: Path) -> None:
    """`export-offsets-log --parallel`: readers write their pieces' files into one directory;
    their stats, added, describe the same records as one writer's export, and the audit reads a
    partition's pieces as one unit."""
    from groupwarden.fleet.export import (
        ExportStats,
        clear_export,
        share_partitions,
        write_export,
        write_metadata,
        write_partition_files,
    )
    from groupwarden.fleet.pipeline import _read_unit, export_units
    from groupwarden.fleet.sources import export_files

    log = list(synthetic_log(4_000, 80, partitions=5, seed=4))
    one = tmp_path / "one"
    write_export(one, "east", "E", ["t"], log)
    ranges = {}
    for _, _, _, partition, offset in log:
        start, end = ranges.get(partition, (offset, offset + 1))
        ranges[partition] = (min(start, offset), max(end, offset + 1))
    shares = share_partitions(ranges, 3)
    assert any(not piece.whole for share in shares for piece in share)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "partition-00009.parquet").write_bytes(b"an earlier export's file")
    clear_export(shared)
    stats = ExportStats()
    for share in shares:
        mine = [r for r in log if any(p.partition == r[3] and p.start <= r[4] < p.end for p in share)]
        stats.add(write_partition_files(shared, "east", mine, {p.partition: p.file for p in share}))
    write_metadata(shared, "east", "E", ["t"], stats)
    metadata = [json.loads((d / EXPORT_METADATA).read_text()) for d in (shared, one)]
    assert {k: v for k, v in metadata[0].items() if k != "files"} == {
        k: v for k, v in metadata[1].items() if k != "files"
    }
    assert stats.records == len(log) and stats.files == sum(len(s) for s in shares)
    assert not (shared / "partition-00009.parquet").exists()
    files = export_files(shared)
    assert sorted(files) == sorted(export_files(one)) and max(len(n) for n in files.values()) == 2
    for unit, whole in zip(
        export_units(shared, "east", files), export_units(one, "east", export_files(one)), strict=True
    ):
        assert _read_unit(unit).sort_by("offset").equals(_read_unit(whole))


def test_the_ports_exceptions_cross_from_a_reading_process_as_they_are() -> None:
    """`export-offsets-log --parallel`: what a reading process raises is pickled back."""
    import pickle

    from groupwarden.cleanup.gateway import (
        KafkaAuthenticationFailed,
        KafkaTlsHandshakeFailed,
        KafkaUnavailable,
        OffsetsLogGap,
        OffsetsLogUnavailable,
    )

    for raised in (
        KafkaAuthenticationFailed("authentication to k:9093 failed: SASL"),
        KafkaTlsHandshakeFailed("the CA"),
        KafkaUnavailable("reading __consumer_offsets from k:9092 failed"),
        OffsetsLogUnavailable("not authorized to read __consumer_offsets"),
        OffsetsLogGap(7, 120, 4000),
    ):
        back = pickle.loads(pickle.dumps(raised))
        assert type(back) is type(raised) and str(back) == str(raised)
    gap = pickle.loads(pickle.dumps(OffsetsLogGap(7, 120, -1)))
    assert (gap.partition, gap.position, gap.log_start) == (7, 120, -1)


def test_units_are_packed_into_few_tasks_of_about_equal_bytes() -> None:
    pytest.importorskip("pyspark")
    from groupwarden.fleet.pipeline import Unit, pack

    units = [
        Unit(c, p, (f"{c}/{p}",), size) for c in "ab" for p, size in enumerate([900, 10, 500, 400, 300, 50])
    ]
    packed = pack(units, 4)
    assert len(packed) == 4
    assert sorted((u.cluster, u.partition) for task in packed for u in task) == sorted(
        (u.cluster, u.partition) for u in units
    )
    weights = sorted(sum(u.size for u in task) for task in packed)
    assert weights[-1] - weights[0] <= 900  # never more apart than the largest unit
    assert pack(units[:2], 8) == [[units[0]], [units[1]]]
    assert pack([], 4) == []

    # a fleet: each task holds a run of whole clusters' units (few clusters per task), balanced
    rng = random.Random(5)
    fleet = [Unit(f"c{c:02d}", p, (), rng.randint(300, 420)) for c in range(50) for p in range(50)]
    rng.shuffle(fleet)
    packed = pack(fleet, 8)
    assert sorted((u.cluster, u.partition) for task in packed for u in task) == sorted(
        (u.cluster, u.partition) for u in fleet
    )
    assert max(len({u.cluster for u in task}) for task in packed) <= 8
    assert max(sum(u.size for u in task) for task in packed) <= sum(u.size for u in fleet) / 8 + 420
    # sizes too uneven for runs: the largest first
    skewed = [Unit("a", p, (), size) for p, size in enumerate([5, 10, 5])]  # runs: 15 and 5
    assert sorted(sum(u.size for u in task) for task in pack(skewed, 2)) == [10, 10]
    assert pack([Unit("a", 0, (), 0), Unit("a", 1, (), 0)], 4) == [
        [Unit("a", 0, (), 0)],
        [Unit("a", 1, (), 0)],
    ]


@pytest.mark.parametrize(
    "records",
    [
        [
            (
                encode_key(GroupMetadataKey("g")),
                encode_value(GroupMetadataValue("consumer", 1, None, None, 3, (), 3)),
            )
        ],
        [(encode_key(OffsetCommitKey("g", "t", 0, 1)), None)],
        [(None, b"x"), (b"\x00\x01", None), (b"\x00\x01\x00\x05ab", b"\x00\x03")],
    ],
    ids=["metadata only", "a commit tombstone only", "corrupt keys only"],
)
def test_degenerate_units_equal_the_core(records: list[tuple[bytes | None, bytes | None]]) -> None:
    log: list[LogRecord] = [(k, v, 5, 0, i) for i, (k, v) in enumerate(records)]
    for keep_history in (True, False):
        rows = audit_unit(raw_table("c", log), keep_history=keep_history, now_ms=10).to_pylist()
        [audit] = task_answers(rows).values()
        replay, expected = core_rows(log)
        assert {v.group_id: (v, o) for v, o in audit.answers} == expected
        assert audit.positions == replay.ledger.positions and audit.reach.records == len(log)


@st.composite
def group_histories(draw: st.DrawFn) -> list[LogRecord]:
    """A partition's log over a few groups: plain and rare commits and their tombstones, classic
    metadata (Empty, with members, tombstones), KIP-848 members and metadata and their tombstones,
    in any order: every way a group can lose and regain its parts around its offsets."""
    from groupwarden.offsets_log.records import (
        ConsumerGroupMemberMetadataKey,
        ConsumerGroupMemberMetadataValue,
        ConsumerGroupMetadataKey,
        ConsumerGroupMetadataValue,
    )

    member = ClassicMember("m", None, "c", "/h", 1, 1, b"", b"")
    events = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9), st.integers(0, 2)), max_size=60))
    log: list[LogRecord] = []
    for group_index, event, detail in events:
        group = f"g{group_index}"
        ts = 1_000 + 7 * len(log)
        commit = encode_key(OffsetCommitKey(group, "t", detail, 1))
        key: bytes
        value: bytes | None
        if event == 0:
            key, value = commit, encode_value(OffsetCommitValue(len(log), 1, "", ts, -1, None, 3))
        elif event == 1:
            key, value = commit, encode_value(OffsetCommitValue(len(log), 1, "meta", ts, -1, None, 3))
        elif event == 2:
            key, value = commit, None
        elif event in (3, 4):
            members = (member,) if event == 4 else ()
            meta = GroupMetadataValue("consumer", 1, "range" if members else None, None, ts, members, 3)
            key, value = encode_key(GroupMetadataKey(group)), encode_value(meta)
        elif event == 5:
            key, value = encode_key(GroupMetadataKey(group)), None
        elif event == 6:
            key = encode_key(ConsumerGroupMemberMetadataKey(group, f"m{detail}"))
            value = encode_value(ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), None))
        elif event == 7:
            key, value = encode_key(ConsumerGroupMemberMetadataKey(group, f"m{detail}")), None
        elif event == 8:
            key, value = (
                encode_key(ConsumerGroupMetadataKey(group)),
                encode_value(ConsumerGroupMetadataValue(3)),
            )
        else:
            key, value = encode_key(ConsumerGroupMetadataKey(group)), None
        log.append((key, value, ts, 0, len(log)))
    return log


def back_then_tombstoned() -> list[LogRecord]:
    """A classic group that comes back across a GroupMetadata tombstone, then loses its metadata
    again while its offsets live on: a simple group at the end, with one come-back."""
    member = ClassicMember("m", None, "c", "/h", 1, 1, b"", b"")
    commit, meta = encode_key(OffsetCommitKey("g", "t", 0, 1)), encode_key(GroupMetadataKey("g"))
    values = [
        (commit, encode_value(OffsetCommitValue(1, 1, "", 1_000, -1, None, 3))),
        (meta, encode_value(GroupMetadataValue("consumer", 1, None, None, 1_000, (), 3))),
        (meta, None),
        (meta, encode_value(GroupMetadataValue("consumer", 2, "range", "m", 1_100, (member,), 3))),
        (meta, None),
    ]
    return [(key, value, 1_000 + 7 * i, 0, i) for i, (key, value) in enumerate(values)]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(group_histories())
@example(back_then_tombstoned())
def test_any_group_history_gives_the_core_state_and_come_backs(log: list[LogRecord]) -> None:
    if not log:
        return
    rows = audit_unit(raw_table("c", log), now_ms=100_000).to_pylist()
    [audit] = task_answers(rows).values()
    replay, expected = core_rows(log)
    assert {v.group_id: (v, o) for v, o in audit.answers} == expected
    assert sorted(audit.comebacks) == sorted(replay.comebacks)
    # each group row counts its come-backs (a simple group's too: back, then its metadata gone)
    counts = Counter(c.group for c in replay.comebacks)
    group_rows = {r["group"]: r["comeback_count"] for r in rows if r["row_kind"] == "group"}
    assert group_rows == {g: counts[g] for g in group_rows}
