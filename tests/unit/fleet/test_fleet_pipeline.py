"""The Spark pipeline (JVM decode + compaction, Python ledger for the rest) ends in exactly the core
ledger's state: every group (`LedgerGroup`) with every offset (`LedgerOffset`), positions and
record counts, over a synthetic log mixed with every rare shape the JVM leaves to Python (unknown
versions, corrupt values and keys, v4 rare tags, metadata strings, v0-v2 values), on local Spark."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from groupwarden.fleet.schema import RAW_SCHEMA
from groupwarden.fleet.sources import ClusterSource
from groupwarden.offsets_log import LogRecord, OffsetsLedger
from groupwarden.offsets_log._wire import I16, I32, I64, uvarint, w_string, w_tagged
from groupwarden.offsets_log.history import ReplayWithHistory
from groupwarden.offsets_log.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)
from groupwarden.offsets_log.snapshot import ledger_answers
from groupwarden.testing.offsets_log_encoder import encode_key, encode_value
from groupwarden.testing.synthetic_offsets_log import synthetic_log

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from groupwarden.fleet.session import start_session

    session, owned = start_session("local[2]", kafka_source=False)
    yield session
    if owned:
        session.stop()


def rare_records(rng: random.Random, partitions: int, start: list[int]) -> list[LogRecord]:
    """Commits in every shape the JVM does not take the fast path for, interleaved per key with
    plain ones, so the latest record of a key is sometimes rare and sometimes plain."""
    out: list[LogRecord] = []

    def add(group: str, key: bytes | None, value: bytes | None) -> None:
        p = hash(group) % partitions
        out.append((key, value, 1_700_000_000_000 + len(out), p, start[p]))
        start[p] += 1

    tid = uuid.uuid4()
    for i in range(200):
        group = f"rare-{i % 37}"
        key = encode_key(OffsetCommitKey(group, f"t{i % 5}", i % 3, rng.choice((0, 1))))
        shape = rng.randrange(10)
        if shape == 0:
            value = encode_value(OffsetCommitValue(i, -1, "", 5, 99, None, 1))
        elif shape == 1:
            value = encode_value(OffsetCommitValue(-i, -1, "meta-ü", 5, -1, None, rng.choice((0, 2))))
        elif shape == 2:
            value = encode_value(OffsetCommitValue(i, 7, "x" * rng.choice((1, 200)), 5, -1, tid, 4))
        elif shape == 3:
            value = I16.pack(9) + b"\x00" * 30  # unknown version
        elif shape == 4:
            value = b"\x00\x03\x00"  # corrupt
        elif shape == 5:
            body = I16.pack(4) + I64.pack(i) + I32.pack(-1) + uvarint(1) + I64.pack(5)
            value = body + w_tagged([(0, tid.bytes), (4, b"zz")])  # rare tags
        elif shape == 6:
            value = None
        else:
            value = encode_value(OffsetCommitValue(i, 3, "", 5, -1, None, 3))
        add(group, key, value)
        if i % 50 == 0:
            add(group, I16.pack(1) + w_string(group) + b"\x00", b"\x00\x03")  # corrupt key
            add(group, None, b"\x00")  # no key
        if i % 40 == 0:
            meta = GroupMetadataValue("consumer", 1, None, None, 10, (), 3)
            add(group, encode_key(GroupMetadataKey(group)), encode_value(meta))
    return out


def write_log(directory: Path, records: list[LogRecord], cluster: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    table = pa.table(
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
    pq.write_table(table, directory / "records-00000.parquet", row_group_size=4000)


def test_pipeline_equals_the_core_ledger(spark: Any, tmp_path: Path) -> None:
    from groupwarden.fleet.job import replay_clusters

    partitions = 7
    log = list(synthetic_log(8_000, 300, partitions=partitions, seed=3))
    start = [0] * partitions
    for _, _, _, p, offset in log:
        start[p] = max(start[p], offset + 1)
    log += rare_records(random.Random(5), partitions, start)
    write_log(tmp_path / "a", log, "a")
    write_log(tmp_path / "b", log[: len(log) // 2], "b")

    raw = spark.read.parquet(str(tmp_path / "a"), str(tmp_path / "b"))
    sources = [ClusterSource("a", "A"), ClusterSource("b", "B")]
    for keep_history in (True, False):
        audits = {a.source.name: a for a in replay_clusters(raw, sources, keep_history=keep_history)}
        for name, records in (("a", log), ("b", log[: len(log) // 2])):
            replay = ReplayWithHistory(OffsetsLedger())
            for key, value, ts, p, offset in sorted(records, key=lambda r: (r[3], r[4])):
                replay.apply(key, value, ts, p, offset)
            ledger = replay.ledger
            audit = audits[name]
            assert {v.group_id: (v, o) for v, o in audit.answers} == {
                v.group_id: (v, o) for v, o in ledger_answers(ledger)
            }
            assert audit.positions == ledger.positions
            assert audit.reach.records == ledger.records
            assert audit.reach.tombstones == ledger.tombstones
            assert audit.offset_count == ledger.offset_count
            assert sum(audit.groups_by_kind.values()) == ledger.group_count
            if keep_history:
                assert sorted(audit.comebacks) == sorted(replay.comebacks)
                assert audit.comeback_count == len(replay.comebacks)
