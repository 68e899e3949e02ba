"""The Spark pipeline (one stage of tasks over (cluster, partition) units: vectorised compaction and
decode of plain commits, the core ledger for the rest) ends in exactly the core ledger's state:
every group (`LedgerGroup`) with every offset (`LedgerOffset`), positions, record counts and
come-backs, over a synthetic log mixed with every rare shape the fast reader leaves to the core
codec (unknown versions, corrupt values and keys, v4 rare tags, metadata strings, v0-v2 values) and
groups that come back across a GroupMetadata tombstone while their offsets live on, on local Spark;
and the stage's physical plan has no shuffle."""

from __future__ import annotations

import functools
import gc
import json
import random
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from groupwarden.offsets_log import LogRecord, OffsetsLedger
from groupwarden.offsets_log._wire import I16, I32, I64, uvarint, w_string, w_tagged
from groupwarden.offsets_log.history import ReplayWithHistory
from groupwarden.offsets_log.records import (
    ClassicMember,
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
    # Empty, then the group's metadata deleted while its (plain) offsets live on, then back: the
    # core keeps the group (its offsets) and so its Empty-since: a come-back (issue 20).
    for i in range(5):
        group = f"tombstoned-{i}"
        key = encode_key(OffsetCommitKey(group, "t0", 0, 1))
        add(group, key, encode_value(OffsetCommitValue(i, 3, "", 5, -1, None, 3)))
        empty = GroupMetadataValue("consumer", 1, None, None, 1_700_000_000_000 + len(out), (), 3)
        add(group, encode_key(GroupMetadataKey(group)), encode_value(empty))
        add(group, encode_key(GroupMetadataKey(group)), None)
        add(group, key, encode_value(OffsetCommitValue(i + 1, 3, "", 6, -1, None, 3)))
        member = ClassicMember("m", None, "c", "/h", 1, 1, b"", b"")
        back = GroupMetadataValue("consumer", 2, "range", "m", 1_700_000_000_000 + len(out), (member,), 3)
        add(group, encode_key(GroupMetadataKey(group)), encode_value(back))
    return out


def test_pipeline_equals_the_core_ledger(spark: Any, tmp_path: Path) -> None:
    from groupwarden.fleet.export import write_export
    from groupwarden.fleet.sources import read_exports
    from gwtest.fleet_records import replay_clusters

    partitions = 7
    log = list(synthetic_log(8_000, 300, partitions=partitions, seed=3))
    start = [0] * partitions
    for _, _, _, p, offset in log:
        start[p] = max(start[p], offset + 1)
    log += rare_records(random.Random(5), partitions, start)
    logs = {"a": log, "b": log[: len(log) // 2]}
    for name, records in logs.items():
        write_export(tmp_path / name, name, name.upper(), [], records)

    records_input, sources = read_exports(spark, [tmp_path / "a", tmp_path / "b"])
    for keep_history in (True, False):
        audits = {
            a.source.name: a for a in replay_clusters(records_input, sources, keep_history=keep_history)
        }
        for name, records in logs.items():
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
                if name == "a":
                    assert {c.group for c in replay.comebacks} >= {f"tombstoned-{i}" for i in range(5)}


def test_the_workers_come_from_the_audits_daemon_with_its_imports_and_no_spark_archives(spark: Any) -> None:
    """fleet/worker_daemon.py: a task finds groupwarden's fleet modules already imported, pyspark
    from site-packages (bytecode cached), and no archive for `invalidate_caches()` to reread."""

    def facts(_rows: Iterator[int]) -> Iterator[tuple[str, bool, list[str], list[str]]]:
        import sys

        archives = [p for p in sys.path if p.endswith((".zip", ".jar")) and ("spark" in p or "py4j" in p)]
        cached = [k for k, v in sys.path_importer_cache.items() if type(v).__name__ == "zipimporter"]
        preloaded = all(m in sys.modules for m in ("groupwarden.fleet.decide", "pyarrow.dataset"))
        yield sys.argv[0], preloaded, archives, cached

    with warnings.catch_warnings():
        # PySpark leaves the result's local socket to the garbage collector (pipeline.collect_arrow)
        warnings.simplefilter("ignore", ResourceWarning)
        (daemon, preloaded, archives, cached), *_ = (
            spark.sparkContext.parallelize([0], 1).mapPartitions(facts).collect()
        )
        gc.collect()
    assert daemon.endswith("groupwarden/fleet/worker_daemon.py")
    assert preloaded
    assert archives == [] and cached == []


def test_a_task_writes_the_selected_rows_lean_columns_of_the_judged_groups(tmp_path: Path) -> None:
    """The task function without a JVM: what it writes for the decision's later steps (an LZ4
    Arrow IPC file per task) is its units' selected group and offset rows of the groups COUNT
    judged, in the decision's columns (the member lists left out before the filter); what it
    returns is every other row."""
    from datetime import timedelta

    import pyarrow as pa
    import pyarrow.compute as pc
    from test_fleet_driver_side import NOW, policy
    from test_fleet_partition_audit import raw_table

    from groupwarden.fleet.columnar_claims import CLAIM_COLUMN
    from groupwarden.fleet.decide import decide_settings
    from groupwarden.fleet.job import _selector
    from groupwarden.fleet.partition_audit import audit_partitions
    from groupwarden.fleet.pipeline import (
        DECISION_ROWS_SUFFIX,
        TaskSettings,
        _audit_tables,
        counted_rows,
        read_decision_rows,
    )
    from groupwarden.fleet.sources import ClusterSource
    from groupwarden.fleet.task_decide import (
        DECIDE_COLUMNS,
        DECISION_ROW_KINDS,
        DECISION_SCHEMA,
        Facts,
        judged_rows,
        later_rows,
        selects_id,
    )

    log = list(synthetic_log(6_000, 200, partitions=2, seed=4))
    table = raw_table("east", log)
    policies = [policy()]
    decide = decide_settings([ClusterSource("east", "E")], policies, NOW, [timedelta(hours=1)])
    now_ms = int(NOW.timestamp() * 1000)
    settings = TaskSettings(True, _selector(policies), now_ms, None, decide, str(tmp_path))
    returned = pa.Table.from_batches(list(_audit_tables([table], settings, 3)))
    written = read_decision_rows(str(tmp_path / f"part-00003{DECISION_ROWS_SUFFIX}"))

    audited = audit_partitions(table, keep_history=True, selects=settings.selects, now_ms=now_ms)
    facts = Facts(selects_id(decide))
    rows = pa.concat_tables([audited, counted_rows(audited, decide, 3, facts)])
    later = pc.is_in(rows.column("row_kind"), value_set=pa.array(DECISION_ROW_KINDS))
    expected = judged_rows(rows.filter(later).select(list(DECIDE_COLUMNS)), facts)
    assert written.schema.names == DECISION_SCHEMA.names == [*DECIDE_COLUMNS, CLAIM_COLUMN]
    assert 0 < written.num_rows < rows.num_rows
    assert written.drop_columns([CLAIM_COLUMN]).to_pylist() == expected.to_pylist()
    # with COUNT's claims, each offset's pointing at its group's row among the written groups
    assert written.equals(later_rows(audited, facts))
    assert written.column(CLAIM_COLUMN).null_count == 0
    listed = written.to_pylist()
    groups = [r for r in listed if r["row_kind"] == "group"]
    for row in listed:
        if row["row_kind"] == "offset" and row[CLAIM_COLUMN] >= 0:
            assert groups[row[CLAIM_COLUMN]]["group"] == row["group"]
    assert returned.to_pylist() == rows.filter(pc.invert(later)).to_pylist()


def test_the_stage_has_no_shuffle(spark: Any, tmp_path: Path) -> None:
    from groupwarden.fleet.decide import files_step_frame
    from groupwarden.fleet.export import write_export
    from groupwarden.fleet.job import _select_all
    from groupwarden.fleet.pipeline import FrameRecords, TaskSettings
    from groupwarden.fleet.sources import read_exports
    from groupwarden.fleet.task_decide import Step

    write_export(tmp_path / "a", "a", "A", [], list(synthetic_log(2_000, 50, partitions=3, seed=1)))
    records_input, _ = read_exports(spark, [tmp_path / "a"])
    settings = TaskSettings(True, _select_all, 0)
    exported = records_input.task_rows(settings)
    # the live source's frame is clustered by Kafka partition: the same task function, no shuffle
    frame = spark.read.parquet(str(tmp_path / "a"))
    live = FrameRecords(frame, clustered=True).task_rows(settings)
    # and the decision's steps: a task per file the stage's tasks wrote (fleet/decide.py)
    decision = files_step_frame(spark, ["part-00000.arrow", "part-00001.arrow"], Step.DECIDE, None, None)
    for rows in (exported, live, decision):
        plan = rows._jdf.queryExecution().executedPlan().toString()
        assert "Exchange" not in plan and "MapInArrow" in plan, plan
    assert exported.count() == live.count() > 0


def test_live_records_merge_whole_kafka_partitions_into_fewer_tasks_without_a_shuffle(
    spark: Any, tmp_path: Path
) -> None:
    """Kafka's default 50 partitions would make 50 tasks: `live_records` coalesces whole ones."""
    from groupwarden.fleet.export import write_export
    from groupwarden.fleet.job import _select_all
    from groupwarden.fleet.pipeline import TaskSettings
    from groupwarden.fleet.session import collect_arrow
    from groupwarden.fleet.sources import live_records

    write_export(tmp_path / "a", "a", "A", [], list(synthetic_log(3_000, 60, partitions=6, seed=2)))
    # one Spark partition per file (per Kafka partition), as Spark's Kafka source reads them
    files = sorted((tmp_path / "a").glob("*.parquet"))
    frame = functools.reduce(lambda a, b: a.unionAll(b), (spark.read.parquet(str(f)) for f in files))
    settings = TaskSettings(True, _select_all, 0)
    merged = live_records(frame, tasks=4).task_rows(settings)
    plan = merged._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan and "Coalesce" in plan, plan
    with warnings.catch_warnings():
        # PySpark leaves the local sockets of an RDD's results to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        assert frame.rdd.getNumPartitions() == 6
        assert merged.rdd.getNumPartitions() == 4
        gc.collect()
    apart = live_records(frame, tasks=6).task_rows(settings)
    key = ["cluster", "partition", "row_kind", "group", "topic", "tp", "count"]

    def rows(frame: Any) -> list[tuple[Any, ...]]:
        return sorted((tuple(r.values()) for r in collect_arrow(frame.select(*key)).to_pylist()), key=repr)

    assert rows(merged) == rows(apart) and len(rows(merged)) > 60


def test_the_tasks_write_every_group_and_offset_and_decide_like_the_core(spark: Any, tmp_path: Path) -> None:
    """The decision in the tasks (fleet/decide.py) equals `decide_many` and `what_if` over the core
    ledger's groups and come-backs: plan.json byte for byte (its skips merged from the tasks'
    `skips` table), the skips table itself, skip counts by reason and what-if rows; with
    overlapping policies, limits, a breaker that trips and refuses for the other policy."""
    from datetime import UTC, datetime, timedelta

    import pyarrow.parquet as pq
    from test_fleet_driver_side import NOW, policy

    from groupwarden.core.decide_many import decide_many
    from groupwarden.core.policy import parse_policy
    from groupwarden.core.render import skip_to_json
    from groupwarden.core.whatif import PausedGroup, what_if
    from groupwarden.fleet.export import write_export
    from groupwarden.fleet.job import run_audit
    from groupwarden.fleet.outputs import plans_document
    from groupwarden.fleet.sources import read_exports
    from groupwarden.fleet.task_decide import skip_from_row
    from groupwarden.offsets_log.history import ReplayWithHistory
    from groupwarden.offsets_log.snapshot import snapshot_from_answers

    def second(name: str, include: str, ratio: float, groups: int) -> Any:
        document = policy().model_dump(by_alias=True, mode="json")
        document["metadata"]["name"] = name
        document["spec"]["mode"] = "Enforce"
        document["spec"]["selector"]["include"] = [include]
        document["spec"]["rules"] = {"emptyGroupRetention": "30m", "simpleGroupOffsetRetention": "2h"}
        document["spec"]["limits"] = {"maxDeletionRatio": ratio, "maxGroupDeletionsPerRun": groups}
        return parse_policy(document)

    policies = [policy(), second("wide", "app-*", 1.0, 7), second("tripping", "app-10*", 0.01, 100)]
    log = list(synthetic_log(6_000, 200, partitions=4, seed=4))
    write_export(tmp_path / "east", "east", "cluster-east", [], log)
    records, sources = read_exports(spark, [tmp_path / "east"])
    out = tmp_path / "audit"
    retentions = [timedelta(minutes=10), timedelta(hours=1)]
    result = run_audit(spark, records, sources, policies, NOW, out, retentions)

    replay = ReplayWithHistory(OffsetsLedger())
    replay.apply_many(sorted(log, key=lambda r: (r[3], r[4])))
    ledger = replay.ledger
    snapshot = snapshot_from_answers(
        ledger_answers(ledger), NOW, cluster_id="cluster-east", selects_id=lambda g: g.startswith("app-")
    )
    expected = decide_many(policies, snapshot, NOW)
    assert (out / "plan.json").read_text() == json.dumps(plans_document(expected), indent=2) + "\n"
    assert {p.summary.skipped for p in expected} != {0}
    assert any(p.summary.blast_radius_exceeded for p in expected)
    skips = pq.read_table(out / "skips").to_pylist()
    assert sorted(json.dumps(skip_to_json(skip_from_row(r)), sort_keys=True) for r in skips) == sorted(
        json.dumps(skip_to_json(s), sort_keys=True) for p in expected for s in p.skipped
    )
    assert all(r["plan_json"] == json.dumps(skip_to_json(skip_from_row(r)), indent=2) for r in skips)
    by_reason = [p["skippedByReason"] for p in result.summary["clusters"][0]["policies"]]
    counted = [Counter(s.reason_code.value for s in p.skipped) for p in expected]
    assert by_reason == [dict(sorted(c.items())) for c in counted]
    paused = [PausedGroup(c.group, c.pause) for c in replay.comebacks]
    assert result.audits[0].what_if == what_if(policies, snapshot, NOW, retentions, paused)
    assert result.summary["clusters"][0]["groupsSelected"] == len(snapshot.groups)
    offsets = pq.read_table(out / "offsets")
    groups = pq.read_table(out / "groups")
    assert offsets.num_rows == ledger.offset_count and groups.num_rows == ledger.group_count
    assert sorted(groups.column("group").to_pylist()) == sorted(ledger.groups())
    selected = {
        g
        for g, s in zip(
            groups.column("group").to_pylist(), groups.column("selected").to_pylist(), strict=True
        )
        if s
    }
    assert selected == {g for g in ledger.groups() if g.startswith("app-")}
    assert groups.schema.field("empty_since").type == offsets.schema.field("commit_time").type
    assert datetime.fromtimestamp(0, UTC) < max(offsets.column("commit_time").to_pylist())
    summary = result.summary["clusters"][0]
    assert summary["offsets"] == ledger.offset_count and summary["groups"] == ledger.group_count
