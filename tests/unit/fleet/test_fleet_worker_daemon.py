"""The audit's worker daemon (fleet/worker_daemon.py) and the session settings that start it."""

from __future__ import annotations

import zipfile
from pathlib import Path

from groupwarden.fleet.session import DAEMON_MODULE, session_config
from groupwarden.fleet.worker_daemon import without_spark_archives


def archive(path: Path, *names: str) -> str:
    with zipfile.ZipFile(path, "w") as out:
        for name in names:
            out.writestr(name, "x = 1\n")
    return str(path)


def package(root: Path, name: str) -> str:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    return str(root)


def test_a_jar_without_python_goes_and_one_with_python_stays(tmp_path: Path) -> None:
    classes = archive(tmp_path / "spark-core.jar", "org/apache/spark/SparkContext.class")
    python = archive(tmp_path / "mixed.jar", "org/A.class", "helper/__init__.py")
    missing = str(tmp_path / "not-there.jar")
    path = [str(tmp_path), classes, python, missing]
    assert without_spark_archives(path) == [str(tmp_path), python]


def test_the_pyspark_and_py4j_zips_go_only_when_both_packages_are_installed_elsewhere(tmp_path: Path) -> None:
    zips = [
        archive(tmp_path / "pyspark.zip", "pyspark/__init__.py"),
        archive(tmp_path / "py4j-0.10.9.9-src.zip", "py4j/__init__.py"),
    ]
    both = package(tmp_path / "site", "pyspark")
    package(tmp_path / "site", "py4j")
    assert without_spark_archives([*zips, both]) == [both]
    # a Spark distribution's Python without its own pyspark (or py4j): the zips are its only copy
    only_pyspark = package(tmp_path / "other", "pyspark")
    assert without_spark_archives([*zips, only_pyspark]) == [*zips, only_pyspark]
    assert without_spark_archives(zips) == zips


def test_a_local_session_starts_the_workers_from_the_audits_daemon() -> None:
    for kafka_source in (False, True):
        config = session_config("local[2]", kafka_source=kafka_source)
        assert config["spark.python.daemon.module"] == "groupwarden.fleet.worker_daemon"
    # a cluster's executors may get groupwarden only with the tasks (--py-files): PySpark's daemon
    remote = session_config("spark://127.0.0.1:7077", kafka_source=False)
    assert "spark.python.daemon.module" not in remote
    opted_in = session_config(
        "spark://127.0.0.1:7077", kafka_source=False, extra={"spark.python.daemon.module": DAEMON_MODULE}
    )
    assert opted_in["spark.python.daemon.module"] == DAEMON_MODULE


def test_the_jvm_compiles_with_c1_only_when_it_reads_no_records() -> None:
    exports = session_config("local[2]", kafka_source=False)
    assert exports["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    assert exports["spark.executor.extraJavaOptions"] == "-XX:TieredStopAtLevel=1"
    live = session_config("local[2]", kafka_source=True)
    assert "spark.driver.extraJavaOptions" not in live
    # a user's own setting wins
    mine = session_config("local[2]", kafka_source=False, extra={"spark.driver.extraJavaOptions": "-Xss4m"})
    assert mine["spark.driver.extraJavaOptions"] == "-Xss4m"
