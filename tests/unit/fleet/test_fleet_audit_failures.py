"""`groupwarden audit` fails with one clear message and an exit code, never a traceback: a failed
Spark job says what happened (without the JVM's stack) and which setting to raise if it ran out of
memory. (No selection is too large: the decision runs in the tasks, `fleet/decide.py`.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from groupwarden.commands import exit_codes

pytest.importorskip("pyspark")


def test_a_failed_job_says_what_happened_without_the_stack_and_names_the_memory_setting(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from groupwarden.commands.fleet_audit import _failed

    jvm = (
        "An error occurred while calling o85.getResult.\n"
        ": org.apache.spark.SparkException: Job aborted: java.lang.OutOfMemoryError: Java heap space secret\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2856)\n"
        "\tat scala.collection.immutable.List.foreach(List.scala:334)\n"
    )

    code = _failed(RuntimeError(jvm), lambda text: text.replace("secret", "[redacted]"))

    assert code == exit_codes.PARTIAL_FAILURE
    err = capsys.readouterr().err
    assert "OutOfMemoryError: Java heap space [redacted]" in err
    assert "spark.driver.memory" in err
    assert "DAGScheduler" not in err and "secret" not in err


def test_an_export_of_the_interleaved_layout_is_refused_before_spark_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from groupwarden import cli
    from groupwarden.fleet.schema import EXPORT_METADATA

    old = tmp_path / "old"
    old.mkdir()
    (old / "records-00000.parquet").write_bytes(b"")
    (old / EXPORT_METADATA).write_text(json.dumps({"cluster": "east", "clusterId": "E"}))
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "apiVersion: groupwarden.io/v1beta1\nkind: ConsumerGroupPolicy\n"
        "metadata: {name: p, namespace: ns}\n"
        "spec: {kafka: {bootstrapServers: 'k:9092'}, selector: {include: ['*']}, "
        "rules: {emptyGroupRetention: 1d}}\n"
    )

    code = cli.main(["audit", "-f", str(policy), "--input", str(old), "--out", str(tmp_path / "out")])

    assert code == exit_codes.BAD_INPUT
    err = capsys.readouterr().err
    assert f"groupwarden export-offsets-log --convert {old}" in err and "Traceback" not in err


def test_an_export_whose_log_start_moves_says_to_export_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Retention removing records while they are exported (`auto.offset.reset=error` in the
    reader): one line, exit 1."""
    from groupwarden import cli
    from groupwarden.cleanup.gateway import OffsetsLogGap
    from groupwarden.commands import export_offsets_log

    def export(*_: object) -> None:
        raise OffsetsLogGap(7, 120, 4000)

    monkeypatch.setattr(export_offsets_log, "_export", export)
    code = cli.main(["export-offsets-log", "--bootstrap-servers", "k:9092", "--out", str(tmp_path)])

    assert code == exit_codes.PARTIAL_FAILURE
    err = capsys.readouterr().err
    assert "partition 7: its log start moved past offset 120 while it was exported" in err
    assert "export again" in err and "Traceback" not in err


def test_an_export_that_cannot_reach_its_cluster_keeps_the_earlier_export(tmp_path: Path) -> None:
    from gwtest.cli import run_cli

    earlier = tmp_path / "east"
    earlier.mkdir()
    (earlier / "partition-00000.parquet").write_bytes(b"the earlier export")
    properties = tmp_path / "client.properties"
    properties.write_text("default.api.timeout.ms=2000\nrequest.timeout.ms=1000\n")

    # a process, as users run it (a failed bootstrap leaves the admin client's sockets to exit)
    result = run_cli(
        "export-offsets-log", "--bootstrap-servers", "127.0.0.1:1", "--command-config", str(properties),
        "--out", str(earlier), timeout=60,
    )  # fmt: skip

    assert result.returncode == exit_codes.PARTIAL_FAILURE, result.stderr
    assert "could not connect to Kafka at 127.0.0.1:1" in result.stderr and "Traceback" not in result.stderr
    assert (earlier / "partition-00000.parquet").read_bytes() == b"the earlier export"


def test_the_default_readers_follow_the_cpus_and_a_containers_cpu_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from groupwarden.commands.export_offsets_log import MAX_DEFAULT_READERS, default_readers

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(16)))
    cpu_max = tmp_path / "cpu.max"
    assert default_readers(cpu_max) == MAX_DEFAULT_READERS == 4  # no cgroup file: 16 CPUs, capped
    limits = (("max 100000", 4), ("150000 100000", 1), ("200000 100000", 2), ("50000 100000", 1))
    for limit, readers in limits:
        cpu_max.write_text(limit + "\n")
        assert default_readers(cpu_max) == readers, limit
    cpu_max.write_text("garbage")
    assert default_readers(cpu_max) == 4
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    cpu_max.write_text("max 100000\n")
    assert default_readers(cpu_max) == 2
