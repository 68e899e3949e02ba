"""The Spark fleet audit on the real broker: every record arrives, the Spark ledger is the core's
ledger and the broker's OffsetFetch answers, and the audit's plan is `groupwarden plan`'s.

One SparkSession (local[2], with Spark's Kafka source) serves the whole module; groups are made
by real confluent-kafka consumers (classic, KIP-848, a standalone commit, one that comes back).
The module's broker is its own (a throwaway single node): its tests read every record of
`__consumer_offsets` and hold every group on the driver, which must not depend on how many groups
the shared broker holds (after the 100k-group benchmarks, 1.4M records: the driver's JVM ran out
of heap). The audit's own scale is bench/'s (docs/benchmarks.md, "Live mode").
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from groupwarden import cli
from groupwarden.adapters.kafka_gateway import KafkaAdminGateway
from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
from groupwarden.adapters.spark_kafka import offsets_log_bounds, spark_kafka_options
from groupwarden.connectivity.settings import settings_from_properties
from groupwarden.core.timestamps import to_rfc3339
from groupwarden.fleet.session import (
    collect_arrow,
    ivy_cache_dir,
    kafka_package,
    names_jars,
    resolved_jars_note,
    resolved_kafka_jars,
    start_session,
)
from groupwarden.fleet.sources import ClusterSource, live_records, read_live
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.offsets_log.snapshot import ledger_answers
from gwtest.cli import plan_json, run_cli, write_policy
from gwtest.fleet_records import replay_clusters
from gwtest.kafka import commit_offsets, consumer_in_group, create_topics, produce
from gwtest.proxied_kafka import ThrowawayBroker, throwaway_broker


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThrowawayBroker]:
    with throwaway_broker(tmp_path_factory.mktemp("fleet-broker")) as broker:
        yield broker


@pytest.fixture(scope="module")
def kafka_bootstrap(module_broker: ThrowawayBroker) -> str:
    """This module's tests, and the `groupwarden` commands they run, talk to the module's broker."""
    return module_broker.bootstrap


@pytest.fixture(scope="module")
def spark_ivy_cache() -> str:
    """The Ivy cache of the module's session (the per-test one is not set up for a module's)."""
    return ivy_cache_dir()


@pytest.fixture(scope="module")
def spark(spark_ivy_cache: str) -> Iterator[Any]:
    from pyspark import SparkContext

    # spark.jars.packages (the Kafka source) is read only when the JVM is launched: a JVM that an
    # earlier module of this worker launched without it would answer "Failed to find data source:
    # kafka". No session is active here (every module stops its own), so start a new JVM.
    gateway = SparkContext._gateway
    if gateway is not None and SparkContext._active_spark_context is None:
        jvm = gateway.proc  # the JVM pyspark launched; it exits when its stdin closes
        gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
        jvm.stdin.close()
        jvm.wait(60)
    # Always through Ivy here (the noted jars are used by the CLI's live audit below): a note of
    # an earlier run is removed first, so both ways of getting the Kafka source run every time.
    resolved_jars_note(kafka_package(), spark_ivy_cache).unlink(missing_ok=True)
    session, owned = start_session("local[2]", kafka_source=True)
    yield session
    if owned:
        session.stop()


@dataclass(frozen=True)
class Fleet:
    prefix: str
    topic: str
    groups: dict[str, str]  # role -> group id


def join_commit_leave(
    bootstrap: str, group: str, topic: str, protocol: str = "classic", expected: int = 6
) -> None:
    with consumer_in_group(bootstrap, group, [topic], protocol=protocol, expected_messages=expected):
        pass


@pytest.fixture(scope="module")
def fleet(kafka_bootstrap: str) -> Iterator[Fleet]:
    prefix = f"fleet-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}-orders"
    create_topics(kafka_bootstrap, [topic])
    produce(kafka_bootstrap, topic, 6)
    groups = {role: f"{prefix}-{role}" for role in ("classic", "kip848", "simple", "active", "comeback")}
    join_commit_leave(kafka_bootstrap, groups["classic"], topic)
    join_commit_leave(kafka_bootstrap, groups["kip848"], topic, protocol="consumer")
    commit_offsets(kafka_bootstrap, groups["simple"], {(topic, 0): 2, (topic, 1): 1})
    join_commit_leave(kafka_bootstrap, groups["comeback"], topic)
    time.sleep(1.5)  # Empty for 1.5 s, then back: a come-back longer than a 1s retention
    join_commit_leave(kafka_bootstrap, groups["comeback"], topic, expected=0)  # all read already
    with consumer_in_group(kafka_bootstrap, groups["active"], [topic], expected_messages=6):
        yield Fleet(prefix, topic, groups)


def settings_for(bootstrap: str) -> Any:
    return settings_from_properties({"bootstrap.servers": bootstrap})


def core_records(bootstrap: str, bounds: dict[int, tuple[int, int]]) -> list[tuple[Any, ...]]:
    """What the core's confluent-kafka reader delivers inside `bounds` (it reads on to the end)."""
    reader = OffsetsLogReader(settings_for(bootstrap))
    return [
        (r.partition, r.offset, r.timestamp_ms, r.key, r.value)
        for r in reader.read({})
        if r.offset < bounds[r.partition][1]
    ]


def test_spark_kafka_source_delivers_every_record(spark: Any, kafka_bootstrap: str, fleet: Fleet) -> None:
    settings = settings_for(kafka_bootstrap)
    bounds = offsets_log_bounds(settings)
    source = ClusterSource("live", "live", bounds=bounds)
    frame = read_live(spark, spark_kafka_options(settings), source)
    via_spark = [
        (r["partition"], r["offset"], r["timestamp"], r["key"], r["value"])
        for r in collect_arrow(frame.select("partition", "offset", "timestamp", "key", "value")).to_pylist()
    ]
    via_core = core_records(kafka_bootstrap, bounds)
    assert len(via_spark) == len(via_core) > 0
    assert sorted(via_spark) == sorted(via_core)
    per_partition = {p: 0 for p in bounds}
    for partition, *_ in via_spark:
        per_partition[partition] += 1
    for partition, (low, high) in bounds.items():
        # gaps below the end are compaction and transaction markers; the core reader skips the same
        assert per_partition[partition] <= high - low
    assert any(key is not None and fleet.prefix.encode() in key for _, _, _, key, _ in via_spark)


def test_the_kafka_sources_jars_stay_off_the_workers_python_path(spark: Any) -> None:
    """fleet/session.py: spark-submit hands the package's jars to Python as includes; a task would
    put them on its sys.path and reread their directories at every task. The JVM keeps them."""
    import gc
    import warnings

    assert any("kafka" in jar for jar in spark.sparkContext.getConf().get("spark.jars", "").split(","))
    assert not [name for name in spark.sparkContext._python_includes if name.endswith(".jar")]

    def archives(_rows: Iterator[int]) -> Iterator[list[str]]:
        import sys

        yield [p for p in sys.path if p.endswith(".jar")]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # PySpark leaves the result's socket to gc
        seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(archives).collect()
        gc.collect()
    assert seen == [[], []]


def test_a_session_that_resolved_the_kafka_source_notes_its_jars(spark: Any, spark_ivy_cache: str) -> None:
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.jars.packages") == kafka_package()  # resolved by Ivy
    jars = names_jars(conf.get("spark.jars", ""), kafka_package())
    assert jars is not None and len(jars) > 1  # the source and its dependencies
    assert resolved_kafka_jars(spark_ivy_cache) == jars


def test_spark_ledger_equals_the_core_ledger_and_offset_fetch(
    spark: Any, kafka_bootstrap: str, fleet: Fleet
) -> None:
    settings = settings_for(kafka_bootstrap)
    bounds = offsets_log_bounds(settings)
    source = ClusterSource("live", "live", bounds=bounds)
    [audit] = replay_clusters(live_records(read_live(spark, spark_kafka_options(settings), source)), [source])

    ledger = OffsetsLedger()
    for partition, offset, timestamp, key, value in core_records(kafka_bootstrap, bounds):
        ledger.apply(key, value, timestamp, partition, offset)
    spark_state = {view.group_id: (view, offsets) for view, offsets in audit.answers}
    core_state = {view.group_id: (view, offsets) for view, offsets in ledger_answers(ledger)}
    assert spark_state == core_state
    assert audit.positions == ledger.positions
    assert audit.reach.records == ledger.records
    assert set(fleet.groups.values()) <= set(spark_state)

    # The broker's OffsetFetch, for every group: groups that wrote records after the bounds
    # (the active group's consumer commits on) are the only ones allowed to differ.
    with KafkaAdminGateway(settings) as gateway:
        fetched = gateway.fetch_offsets(sorted(spark_state))
    changed: set[str] = set()
    reader = OffsetsLogReader(settings)
    for record in reader.read({p: high for p, (_, high) in bounds.items()}):
        ledger.apply(record.key, record.value, record.timestamp_ms, record.partition, record.offset)
        changed.update(g for g in spark_state if record.key is not None and g.encode() in record.key)
    compared = 0
    for group, (_, offsets) in spark_state.items():
        if group in changed or fetched[group].error is not None:
            continue
        assert {tp: o.offset for tp, o in offsets.items()} == {
            tp: o.offset for tp, o in fetched[group].offsets.items()
        }, group
        compared += 1
    assert compared >= len(spark_state) - len(changed) and not changed & set(fleet.groups.values())


def policy_file(tmp_path: Path, bootstrap: str, fleet: Fleet) -> Path:
    return write_policy(
        tmp_path / "policy.yaml",
        "fleet",
        bootstrap,
        [f"{fleet.prefix}-*"],
        rules={
            "emptyGroupRetention": "1s",
            "simpleGroupOffsetRetention": "1s",
            "unsubscribedOffsetRetention": "1s",
        },
    )


def test_live_audit_plan_is_exactly_groupwarden_plan(
    spark: Any, spark_ivy_cache: str, kafka_bootstrap: str, fleet: Fleet, tmp_path: Path, monkeypatch: Any
) -> None:
    policy = policy_file(tmp_path, kafka_bootstrap, fleet)
    now = to_rfc3339(datetime.now(UTC) + timedelta(hours=1))
    out = tmp_path / "audit"
    # The Ivy cache where the module's session noted the Kafka source's jars: this audit's session
    # passes them as they are, without an Ivy resolution.
    assert resolved_kafka_jars(spark_ivy_cache) is not None
    monkeypatch.setenv("GROUPWARDEN_SPARK_IVY_CACHE", spark_ivy_cache)
    # A process of its own (its own local[*] session), exactly as a user runs it.
    result = run_cli(
        "audit", "-f", str(policy), "--bootstrap-servers", kafka_bootstrap, "--out", str(out), "--now", now,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Ivy Default Cache set to" not in result.stderr  # no resolution: the noted jars
    expected = plan_json(policy, "--now", now)
    assert json.loads((out / "plan.json").read_text()) == expected
    planned = {(a["action"], a["group"]) for a in expected["actions"]}
    assert {("DeleteGroup", fleet.groups[r]) for r in ("classic", "kip848", "simple", "comeback")} <= planned
    assert not any(group == fleet.groups["active"] for _, group in planned)


def test_exports_of_several_clusters_are_audited_together(
    spark: Any, kafka_bootstrap: str, fleet: Fleet, tmp_path: Path
) -> None:
    exports = []
    # one reading process, and one per partition of the broker's __consumer_offsets
    for name, parallel in (("east", "1"), ("west", "3")):
        export = tmp_path / name
        result = run_cli(
            "export-offsets-log",
            "--bootstrap-servers",
            kafka_bootstrap,
            "--cluster",
            name,
            "--out",
            str(export),
            "--parallel",
            parallel,
        )
        assert result.returncode == 0, result.stderr
        exports.append(export)
    # the same records of this module's finished groups (other modules, and the active group's
    # consumer, may write between the two exports)
    ours = [group.encode() for role, group in fleet.groups.items() if role != "active"]

    def fleet_records(export: Path) -> list[tuple[Any, ...]]:
        found = []
        for path in sorted(export.glob("partition-*.parquet")):
            table = pq.read_table(path)
            assert set(table.column("partition").to_pylist()) == {int(path.stem.split("-")[1])}
            offsets = table.column("offset").to_pylist()
            assert offsets == sorted(offsets)  # log order
            for row in table.drop_columns(["cluster"]).to_pylist():
                if any(group in row["key"] for group in ours):
                    found.append(tuple(row.values()))
        return found

    east_records = fleet_records(exports[0])
    assert east_records and fleet_records(exports[1]) == east_records
    policy = policy_file(tmp_path, kafka_bootstrap, fleet)
    now = to_rfc3339(datetime.now(UTC) + timedelta(hours=1))
    out = tmp_path / "audit"
    args = ["audit", "-f", str(policy), "--out", str(out), "--now", now, "--what-if", "1s,1h"]
    for export in exports:
        args += ["--input", str(export)]
    assert cli.main(args) == 0  # in-process: uses the module's SparkSession

    expected = plan_json(policy, "--now", now)
    document = json.loads((out / "plan.json").read_text())
    assert document == {"plans": [expected, expected]}  # same cluster exported twice: same plan
    groups = pq.read_table(out / "groups").to_pylist()
    assert {g["cluster"] for g in groups} == {"east", "west"}
    comeback = [g for g in groups if g["group"] == fleet.groups["comeback"]]
    assert len(comeback) == 2 and all(g["comebacks"] >= 1 for g in comeback)
    offsets = pq.read_table(out / "offsets").to_pylist()
    simple = {
        (o["topic"], o["partition"]): o["offset"]
        for o in offsets
        if o["group"] == fleet.groups["simple"] and o["cluster"] == "east"
    }
    assert simple == {(fleet.topic, 0): 2, (fleet.topic, 1): 1}
    assert {a["group"] for a in pq.read_table(out / "plan").to_pylist()} >= {fleet.groups["classic"]}

    summary = json.loads((out / "summary.json").read_text())
    east = summary["clusters"][0]
    risk = {(w["rule"], w["retention"]): w["comebackGroups"] for w in east["whatIf"]}
    assert risk[("emptyGroupRetention", "1s")] >= 1  # the group that was Empty for 1.5 s
    assert risk[("emptyGroupRetention", "1h")] == 0
    assert east["log"]["earliestRecord"] is not None
    report = (out / "report.html").read_text()
    assert "<svg" in report and fleet.groups["classic"] in report
    assert "src=" not in report and "href=" not in report  # self-contained: nothing is fetched


def sasl_properties(exported: dict[str, str]) -> dict[str, str]:
    """Java-style client properties for a devstack broker's SASL_SSL/SCRAM listener (CA file)."""
    password = Path(exported["GROUPWARDEN_KAFKA_SASL_PASSWORD_FILE"]).read_text().strip()
    return {
        "bootstrap.servers": exported["GROUPWARDEN_KAFKA_SASL_BOOTSTRAP"],
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": exported["GROUPWARDEN_KAFKA_SASL_MECHANISM"],
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{exported["GROUPWARDEN_KAFKA_SASL_USERNAME"]}" password="{password}";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": exported["GROUPWARDEN_KAFKA_CA_FILE"],
    }


def test_spark_reads_the_log_over_sasl_ssl_and_the_password_never_shows(
    spark: Any, module_broker: ThrowawayBroker, kafka_bootstrap: str, fleet: Fleet, tmp_path: Path
) -> None:
    properties = sasl_properties(module_broker.exported)
    password = properties["sasl.jaas.config"].split('password="')[1].split('"')[0]
    settings = settings_from_properties(properties)
    bounds = offsets_log_bounds(settings)
    frame = read_live(spark, spark_kafka_options(settings), ClusterSource("live", "live", bounds=bounds))
    via_sasl = sorted(
        (r["partition"], r["offset"], r["key"], r["value"])
        for r in collect_arrow(frame.select("partition", "offset", "key", "value")).to_pylist()
    )
    via_plaintext = sorted((p, o, k, v) for p, o, _, k, v in core_records(kafka_bootstrap, bounds))
    assert via_sasl == via_plaintext and via_sasl

    # The whole command over SASL_SSL: same plan as over the plaintext listener, no password anywhere.
    config = tmp_path / "client.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in properties.items() if k != "bootstrap.servers"))
    policy = policy_file(tmp_path, kafka_bootstrap, fleet)
    now = to_rfc3339(datetime.now(UTC) + timedelta(hours=1))
    out = tmp_path / "audit"
    result = run_cli(
        "audit", "-f", str(policy), "--bootstrap-servers", properties["bootstrap.servers"],
        "--command-config", str(config), "--out", str(out), "--now", now, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    planned = {(a["action"], a["group"]) for a in json.loads((out / "plan.json").read_text())["actions"]}
    assert {(a["action"], a["group"]) for a in plan_json(policy, "--now", now)["actions"]} == planned
    assert password not in result.stdout + result.stderr
    for path in out.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path
