"""The driver JVM's AppCDS archive on the real JDK (fleet/jvm_class_data.py): a first session's JVM
lists its classes, the detached dumper makes the archive after that JVM exits, and the next
session's JVM loads Spark's classes from it. A truncated archive is ignored: the JVM still starts.

Each session is its own Python process (the gateway JVM lives as long as its Python), with its own
cache (XDG_CACHE_HOME) and GROUPWARDEN_SPARK_CDS=1 (tests/conftest.py turns it off for the suite).
No Kafka: the sessions run no job. The audit's whole class list (~9,000 classes) takes ~40 CPU-s
to dump (interpreted: -Xshare:dump turns the JIT off; measured in docs/spark-audit.md), too much for
`make test`: the test holds the cache's lock while the first JVM exits, so the real dumper waits,
and shortens the list the JVM wrote to its first classes up to SparkContext (a few seconds). The
dumper, its lock, the archive's name and the second JVM's options are the product's own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from groupwarden.fleet import jvm_class_data

pytestmark = pytest.mark.integration
pytest.importorskip("pyspark")

# Prints the driver JVM's -X options (what spark-submit really gave it) and stops.
SESSION = """
import sys
from groupwarden.fleet.session import start_session
extra = {"spark.driver.extraJavaOptions": sys.argv[1]} if len(sys.argv) > 1 else None
spark, owned = start_session("local[1]", kafka_source=False, extra=extra)
assert owned
runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
print("\\n".join(str(a) for a in runtime.getInputArguments() if str(a).startswith("-X")))
spark.stop()
"""
# The shortened list's dump (nice 19) on a loaded 2-core machine.
DUMP_SECONDS = 120
SPARK_CONTEXT = "org/apache/spark/SparkContext"


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[Path]:
    """The sessions' cache home; no dumper of it outlives the test."""
    yield tmp_path / "cache"
    for pid in dumpers_of(tmp_path / "cache"):
        os.kill(pid, signal.SIGTERM)  # (stops its dump too)


def dumpers_of(cache: Path) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            command = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if jvm_class_data.DUMPER_MODULE.encode() in command and any(
            str(cache).encode() in a for a in command
        ):
            pids.append(int(proc.name))
    return pids


def run_session(cache: Path, *driver_options: str) -> list[str]:
    environ = {**os.environ, "XDG_CACHE_HOME": str(cache), jvm_class_data.ENABLE_ENV: "1"}
    done = subprocess.run(
        [sys.executable, "-c", SESSION, *driver_options],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split()


def shorten(class_list: Path) -> int:
    """Keeps the classes loaded up to SparkContext (from a jar or the JDK: plain names); the count."""
    kept: list[str] = []
    for line in class_list.read_text().splitlines():
        if not line or line.startswith(("@", "#")) or " " in line:
            continue  # lambda forms, comments, classes of custom loaders
        kept.append(line)
        if line == SPARK_CONTEXT:
            break
    assert kept and kept[-1] == SPARK_CONTEXT, f"{SPARK_CONTEXT} not in {class_list}"
    class_list.write_text("\n".join(kept) + "\n")
    return len(kept)


def test_the_second_driver_maps_the_archive_the_first_one_listed(cache: Path, tmp_path: Path) -> None:
    directory = cache / "groupwarden" / "spark-cds"
    directory.mkdir(parents=True)
    with jvm_class_data.cache_lock(directory):  # the first JVM's dumper waits for it
        first = run_session(cache)
        listing = [option for option in first if option.startswith("-XX:DumpLoadedClassList=")]
        assert len(listing) == 1 and Path(listing[0].split("=", 1)[1]).parent == directory
        assert not any("SharedArchiveFile" in option for option in first)
        assert len(dumpers_of(cache)) == 1
        listed = shorten(Path(listing[0].split("=", 1)[1]))

    deadline = time.monotonic() + DUMP_SECONDS
    while not list(directory.glob("*.jsa")) and time.monotonic() < deadline:
        time.sleep(1)
    logs = "\n".join(p.read_text() for p in directory.glob("*.log"))
    archives = list(directory.glob("*.jsa"))
    assert len(archives) == 1, f"no archive after {DUMP_SECONDS} s:\n{logs[-3000:]}"
    archive = archives[0]
    assert not list(directory.glob("*.classlist"))  # the dumper removed the list it used

    loaded = tmp_path / "class-load.log"
    second = run_session(cache, f"-Xlog:class+load=info:file={loaded}")
    assert f"-XX:SharedArchiveFile={archive}" in second
    assert not any("DumpLoadedClassList" in option for option in second)
    lines = loaded.read_text().splitlines()
    assert any(line.endswith("org.apache.spark.SparkContext source: shared objects file") for line in lines)
    # Every class the shortened list named came from the archive (and their supertypes with them).
    shared = sum(line.endswith(" source: shared objects file") for line in lines)
    assert shared >= 0.9 * listed, f"{shared} classes from the archive of {listed} listed"
    assert dumpers_of(cache) == []


def test_a_truncated_archive_is_ignored_by_the_jvm(tmp_path: Path) -> None:
    """Made from the JDK's own class list (a few seconds): the same kind of file as the audit's."""
    java = jvm_class_data.java_executable(os.environ)
    assert java is not None
    archive = tmp_path / "whole.jsa"
    dump = [java, "-Xshare:dump", f"-XX:SharedArchiveFile={archive}"]
    subprocess.run(dump, capture_output=True, check=True, timeout=300)
    for kept in (archive.stat().st_size // 2, 4096, 0):
        truncated = tmp_path / f"truncated-{kept}.jsa"
        truncated.write_bytes(archive.read_bytes()[:kept])
        options = jvm_class_data.archive_options(truncated).split()
        started = subprocess.run([java, *options, "-version"], capture_output=True, text=True, timeout=120)
        assert started.returncode == 0, started.stderr
        assert "sharing" not in started.stderr  # started, without class data sharing
        # ... which is -Xshare:auto's doing: required, the same archive stops the JVM
        required = [option.replace("-Xshare:auto", "-Xshare:on") for option in options]
        refused = subprocess.run([java, *required, "-version"], capture_output=True, text=True, timeout=120)
        assert refused.returncode != 0
    whole = subprocess.run(
        [java, *jvm_class_data.archive_options(archive).split(), "-version"], capture_output=True, text=True
    )
    assert whole.returncode == 0 and "sharing" in whole.stderr
