"""The SparkSession of an audit: local[*] by default, or any master (`spark://...`, `k8s://...`)."""

from __future__ import annotations

import gc
import os
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import SparkContext
from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import DataFrame, SparkSession

from groupwarden.fleet import jvm_class_data

IVY_SETTINGS_ENV = "GROUPWARDEN_SPARK_IVY_SETTINGS"
IVY_CACHE_ENV = "GROUPWARDEN_SPARK_IVY_CACHE"


def kafka_package() -> str:
    """Spark's Kafka source, at exactly the running Spark's version (a mismatch fails at runtime)."""
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def ivy_cache_dir() -> str:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "groupwarden" / "ivy"
    return os.environ.get(IVY_CACHE_ENV, str(default))


DAEMON_MODULE = "groupwarden.fleet.worker_daemon"


def resolved_jars_note(package: str, ivy_cache: str) -> Path:
    """Where the jars Ivy resolved for `package` are noted, beside the Ivy cache they are in."""
    return Path(ivy_cache) / f"groupwarden-resolved-{package.replace(':', '_')}.txt"


def names_jars(value: str, package: str) -> list[str] | None:
    """The jar paths of a `spark.jars` value that resolved `package` (its own jar among them), or
    None: only local files count (a later session passes them as they are)."""
    group, artifact, version = package.split(":")
    jars = []
    for entry in filter(None, (part.strip() for part in value.split(","))):
        path = entry.removeprefix("file://") if entry.startswith("file://") else entry
        if "://" in path or not path.endswith(".jar"):
            return None
        jars.append(path)
    own = f"{group}_{artifact}-{version}.jar"
    if not any(Path(jar).name in (own, f"{artifact}-{version}.jar") for jar in jars):
        return None
    return jars


def resolved_kafka_jars(ivy_cache: str | None = None) -> list[str] | None:
    """The Kafka source's jars as an earlier session's Ivy resolution left them, or None (never
    resolved here, or a jar is gone): then the session resolves the package again."""
    note = resolved_jars_note(kafka_package(), ivy_cache or ivy_cache_dir())
    try:
        jars = note.read_text().split()
    except OSError:
        return None
    if not jars or not all(Path(jar).is_file() for jar in jars):
        return None
    return jars


def remember_resolved_jars(jars_value: str, ivy_cache: str | None = None) -> None:
    """Notes the jars a session's Ivy resolution of the Kafka source gave it (its `spark.jars`),
    for the next sessions: resolving costs 1-4 s of a live audit's start even with every jar in
    the cache (Ivy reads and checks its metadata). Best effort: a read-only cache just resolves."""
    package = kafka_package()
    jars = names_jars(jars_value, package)
    if jars is None:
        return
    note = resolved_jars_note(package, ivy_cache or ivy_cache_dir())
    partial = note.with_name(f"{note.name}.{os.getpid()}")
    try:
        partial.write_text("".join(f"{jar}\n" for jar in jars))
        partial.replace(note)  # (two sessions at once: either note is whole)
    except OSError:
        with suppress(OSError):
            partial.unlink()


def _own_jars(extra: Mapping[str, str] | None) -> bool:
    """The caller sets jars or packages itself: its choice, never replaced by a noted resolution."""
    return any(key.startswith("spark.jars") for key in extra or {})


def session_config(
    master: str,
    *,
    kafka_source: bool,
    extra: Mapping[str, str] | None = None,
    resolved_jars: Sequence[str] | None = None,
) -> dict[str, str]:
    """The settings of the audit's session (a pure function, so tests can check them).
    `resolved_jars`: the Kafka source's jars as noted from an earlier resolution (passed as
    `spark.jars`, no Ivy resolution); ignored when `extra` sets any `spark.jars*` itself."""
    config = {
        "spark.master": master,
        "spark.app.name": "groupwarden-audit",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.shuffle.partitions": "16",  # (the audit's stage has no shuffle)
        # Records are small (~70 bytes): bigger Arrow batches cut the per-batch cost of moving them
        # between the JVM and the Python workers (Spark's default is 10,000 rows).
        "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
        # Only for a DataFrame of raw records read by Spark's own file scan (`FrameRecords`; exports
        # are read per partition by the tasks): smaller splits keep both cores busy to the end.
        "spark.sql.files.maxPartitionBytes": str(8 * 1024 * 1024),
        "spark.sql.session.timeZone": "UTC",
        # A task's collected rows (the selected groups' offsets) of up to 64 MiB come back with its
        # status, not through the block manager, where a result can be lost under memory pressure
        # (seen at 10M records with the tasks' rows cached: TaskResultLost).
        "spark.task.maxDirectResultSize": str(64 * 1024 * 1024),
    }
    if master.startswith("local"):
        # Python workers forked from a daemon that has the audit's imports done and reads pyspark
        # from site-packages, not from Spark's zips (fleet/worker_daemon.py). Only where the
        # workers surely run an interpreter with groupwarden installed: on a cluster it may come
        # with the tasks (`--py-files`), after the daemon starts; there it is a setting to pass.
        config["spark.python.daemon.module"] = DAEMON_MODULE
    if not kafka_source:
        # Reading exports, the JVM touches no record (the tasks read their files with pyarrow): it
        # schedules, and passes small rows. Its CPU was then mostly the C2 compiler's (2-4 CPU-s
        # an audit); the C1 compiler alone is enough for that. Live reads convert every record in
        # the JVM, where C2's code pays for itself.
        config["spark.driver.extraJavaOptions"] = "-XX:TieredStopAtLevel=1"
        config["spark.executor.extraJavaOptions"] = "-XX:TieredStopAtLevel=1"
    if kafka_source and resolved_jars and not _own_jars(extra):
        config["spark.jars"] = ",".join(resolved_jars)
    elif kafka_source:
        config["spark.jars.packages"] = kafka_package()
        config["spark.jars.ivy"] = ivy_cache_dir()
        config["spark.jars.ivySettings"] = os.environ.get(
            IVY_SETTINGS_ENV, str(Path(__file__).with_name("ivysettings.xml"))
        )
    if kafka_source:
        # The default (AdminClient-based) offset reader lists topics without internal ones, so
        # __consumer_offsets comes back empty even when assigned explicitly (measured on Kafka 4.3,
        # docs/spark-audit.md); the consumer-based reader sees it.
        config["spark.sql.streaming.kafka.useDeprecatedOffsetFetching"] = "true"
    config.update(extra or {})
    return config


def start_session(
    master: str, *, kafka_source: bool, extra: Mapping[str, str] | None = None
) -> tuple[Any, bool]:
    """(session, owned): an already active session (tests, notebooks, spark-submit) is used as is
    and not owned, so the caller must not stop it; otherwise a new one is started."""
    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    # Workers run the same interpreter (and so the same groupwarden) as the driver: PySpark takes
    # the workers' Python from PYSPARK_PYTHON (the spark.pyspark.python setting is for spark-submit).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    resolved = resolved_kafka_jars() if kafka_source and not _own_jars(extra) else None
    config = session_config(master, kafka_source=kafka_source, extra=extra, resolved_jars=resolved)
    # Ivy resolves the package only for a JVM this session launches (a running one keeps its jars)
    resolves = "spark.jars.packages" in config and not _own_jars(extra) and not _jvm_running()
    driver_class_data = class_data_of_new_driver(config)
    if driver_class_data is not None:
        config = jvm_class_data.with_driver_options(config, driver_class_data)
    builder: Any = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except BaseException:  # (no JVM wrote the class list: none to keep)
        if driver_class_data is not None:
            jvm_class_data.abandon(driver_class_data)
        raise
    if driver_class_data is not None and driver_class_data.class_list is not None:
        start_class_data_dumper(spark, driver_class_data)
    spark.sparkContext.setLogLevel("ERROR")
    if resolves:
        remember_resolved_jars(spark.sparkContext.getConf().get("spark.jars", ""))
    # Also without the Kafka source: a JVM that one started keeps the package's jars for the
    # later contexts of the same process (tests, notebooks).
    without_java_archives_on_python_path(spark.sparkContext)
    if master.startswith("local"):
        start_python_workers(spark)
    return spark, True


def _started(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def start_python_workers(spark: Any) -> None:
    """Runs one job of a task per core, so the session returns with its Python worker daemon and
    a worker per core started, and the JVM past its first Python job. Otherwise the audit's stage
    pays that: in Spark's event log of a 10M-record audit its first two tasks took 4.8 s, every
    later one 2.3-2.6 s for as many bytes; a trivial first job takes 1.7 s, later ones 0.13-0.16 s.
    This moves a fixed cost into the session's start; it does not remove it (docs/benchmarks.md,
    "Fleet audit on Spark").
    Local sessions only: a cluster's executors come and go, and its workers' first job is theirs."""
    cores = max(1, int(spark.sparkContext.defaultParallelism))
    collect_arrow(spark.range(0, cores, 1, cores).mapInArrow(_started, "id long"))


def _jvm_running() -> bool:
    """A JVM runs already: an earlier session's gateway (it outlives its stop) or spark-submit's."""
    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def class_data_of_new_driver(config: Mapping[str, str]) -> jvm_class_data.ClassData | None:
    """The driver JVM's class data (fleet/jvm_class_data.py), when this session starts the JVM: not
    when a JVM runs already (an earlier session's gateway outlives its stop; spark-submit's)."""
    if not jvm_class_data.enabled(os.environ):
        return None  # (nothing looked up)
    if _jvm_running():
        return None
    spark_home: str = _find_spark_home()  # type: ignore[no-untyped-call]  # (the JVM's launcher's)
    return jvm_class_data.for_driver(config, spark_home=Path(spark_home))


def start_class_data_dumper(spark: Any, driver_class_data: jvm_class_data.ClassData) -> None:
    """The dumper gets the JVM's own pid, java and class path: the archive must be made by the same
    JDK on the same class path to be mapped."""
    try:
        lang = spark.sparkContext._jvm.java.lang
        jvm_pid = int(lang.ProcessHandle.current().pid())
        java = str(Path(str(lang.System.getProperty("java.home"))) / "bin" / "java")
        class_path = str(lang.System.getProperty("java.class.path"))
    except Exception:  # (py4j's errors): no archive this time is all it may cost the audit
        jvm_class_data.abandon(driver_class_data)
        return
    jvm_class_data.start_dumper(driver_class_data, jvm_pid=jvm_pid, java=java, class_path=class_path)


def without_java_archives_on_python_path(context: Any) -> None:
    """spark-submit hands a Python application the jars of `spark.jars.packages` (the Kafka source
    and its 10 dependencies) as Python includes, so every task puts them on its worker's
    `sys.path` and `importlib.invalidate_caches()` (PySpark's worker calls it at the start of every
    task) rereads their ~34,000 directory entries: ~0.2 CPU-s per task, most of a live audit's
    worker CPU. They hold no Python; the JVM still has them (`spark.jars`). PySpark keeps the
    includes in a private list: a PySpark without it is left as it is."""
    includes = getattr(context, "_python_includes", None)
    if isinstance(includes, list):
        includes[:] = [name for name in includes if not str(name).lower().endswith(".jar")]


def collect_arrow(frame: DataFrame) -> pa.Table:
    """`frame.toArrow()`, without the ResourceWarning PySpark leaves behind: it does not close the
    local socket the result came through and relies on the garbage collector (pyspark/util.py,
    `_load_from_socket`), so the socket is collected here, where the warning is expected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        table = frame.toArrow()
        gc.collect()
    return table
