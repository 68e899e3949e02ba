"""A live audit's session resolves Spark's Kafka source with Ivy once; later sessions pass the jars
that resolution gave as `spark.jars` (fleet/session.py). The real resolution and a live audit on
the noted jars: tests/integration/test_fleet_audit.py."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from groupwarden.fleet.session import (
    kafka_package,
    names_jars,
    remember_resolved_jars,
    resolved_jars_note,
    resolved_kafka_jars,
    session_config,
)


def kafka_jars(directory: Path) -> list[Path]:
    group, artifact, version = kafka_package().split(":")
    names = [f"{group}_{artifact}-{version}.jar", "org.apache.kafka_kafka-clients-3.9.0.jar"]
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"PK")
    return [directory / name for name in names]


def test_the_jars_of_a_resolution_are_noted_and_found_again(tmp_path: Path) -> None:
    jars = kafka_jars(tmp_path / "jars")
    value = ",".join(f"file://{jar}" for jar in jars)
    assert resolved_kafka_jars(str(tmp_path)) is None  # never resolved here
    remember_resolved_jars(value, str(tmp_path))
    assert resolved_kafka_jars(str(tmp_path)) == [str(jar) for jar in jars]
    assert resolved_jars_note(kafka_package(), str(tmp_path)).is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(tuple("0123456789"))] == []


def test_a_jar_gone_means_resolving_again(tmp_path: Path) -> None:
    jars = kafka_jars(tmp_path / "jars")
    remember_resolved_jars(",".join(str(jar) for jar in jars), str(tmp_path))
    jars[1].unlink()
    assert resolved_kafka_jars(str(tmp_path)) is None


@pytest.mark.parametrize(
    "value",
    [
        "",
        "file:///ivy/jars/org.apache.kafka_kafka-clients-3.9.0.jar",  # not the source's own jar
        "hdfs://nn/jars/x.jar,file:///ivy/jars/{own}",  # not local: not passed on as it is
        "file:///ivy/jars/{own},/ivy/jars/notes.txt",
    ],
)
def test_only_a_local_resolution_of_the_kafka_source_is_noted(tmp_path: Path, value: str) -> None:
    group, artifact, version = kafka_package().split(":")
    value = value.format(own=f"{group}_{artifact}-{version}.jar")
    assert names_jars(value, kafka_package()) is None
    remember_resolved_jars(value, str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_noted_resolution_replaces_ivy_unless_the_caller_sets_jars() -> None:
    jars = ["/ivy/jars/a.jar", "/ivy/jars/b.jar"]
    noted = session_config("local[2]", kafka_source=True, resolved_jars=jars)
    assert noted["spark.jars"] == "/ivy/jars/a.jar,/ivy/jars/b.jar"
    assert not {"spark.jars.packages", "spark.jars.ivy", "spark.jars.ivySettings"} & noted.keys()
    # the source's own setting stays, whichever way the jars come
    assert noted["spark.sql.streaming.kafka.useDeprecatedOffsetFetching"] == "true"

    resolving = session_config("local[2]", kafka_source=True)
    assert resolving["spark.jars.packages"] == kafka_package() and "spark.jars" not in resolving

    own = {"spark.jars.packages": f"{kafka_package()},org.example:extra:1"}
    theirs = session_config("local[2]", kafka_source=True, extra=own, resolved_jars=jars)
    assert theirs["spark.jars.packages"] == own["spark.jars.packages"] and "spark.jars" not in theirs

    exports = session_config("local[2]", kafka_source=False, resolved_jars=jars)
    assert not any(key.startswith("spark.jars") for key in exports)
