"""fleet/jvm_class_data.py: which class data options a driver JVM gets, and the dumper's contract
(waits for the JVM, one at a time per cache, an archive only from a dump that exited 0). A fake
`java` (a shell script) stands for the JDK; tests/integration/test_fleet_jvm_class_data_archive.py
runs the real one."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from groupwarden.fleet import jvm_class_data
from groupwarden.fleet.jvm_class_data import ClassData

ARCHIVE_OPTION = "-XX:SharedArchiveFile="


@pytest.fixture
def java_home(tmp_path: Path) -> Path:
    """A JAVA_HOME whose bin/java prints `version` for -version and otherwise plays the dump:
    logs its start and end to `calls` (epoch seconds), waits `dump-seconds`, writes the archive
    and exits with `exit-code` (`killed`: SIGKILLs itself after writing half an archive)."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "version").write_text('openjdk version "17.0.99"\n')
    (home / "dump-seconds").write_text("0\n")
    (home / "exit-code").write_text("0\n")
    java = home / "bin" / "java"
    java.write_text(
        f"""#!/bin/sh
home={home}
if [ "$1" = "-version" ]; then cat "$home/version" >&2; exit 0; fi
for arg in "$@"; do
  case "$arg" in -XX:SharedArchiveFile=*) out="${{arg#-XX:SharedArchiveFile=}}";; esac
done
echo "start $(date +%s.%N) $*" >> "$home/calls"
sleep "$(cat "$home/dump-seconds")"
printf 'half' > "$out"
code="$(cat "$home/exit-code")"
if [ "$code" = killed ]; then kill -9 $$; fi
printf ' an archive' >> "$out"
echo "end $(date +%s.%N)" >> "$home/calls"
exit "$code"
"""
    )
    java.chmod(0o755)
    return home


@pytest.fixture
def spark_home(tmp_path: Path) -> Path:
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("spark-core_2.13-4.0.0.jar", "scala-library-2.13.16.jar"):
        (jars / name).write_bytes(b"PK" + name.encode())
    return tmp_path / "spark"


def environ_of(tmp_path: Path, java_home: Path, **more: str) -> dict[str, str]:
    return {
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
        "JAVA_HOME": str(java_home),
        jvm_class_data.ENABLE_ENV: "1",
        **more,
    }


def calls(java_home: Path) -> list[list[str]]:
    log = java_home / "calls"
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def test_a_first_driver_writes_a_class_list_and_later_ones_map_the_archive(
    tmp_path: Path, java_home: Path, spark_home: Path
) -> None:
    environ = environ_of(tmp_path, java_home)
    first = jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ)
    assert first is not None and first.class_list is not None
    cache = tmp_path / "cache" / "groupwarden" / "spark-cds"
    assert first.archive.parent == cache and first.class_list.parent == cache
    assert first.class_list.name == f"{first.archive.stem}.{os.getpid()}.classlist"
    assert first.class_list.exists()  # created: the cache is writable
    assert first.java_options == f"-XX:DumpLoadedClassList={first.class_list}"

    first.archive.write_bytes(b"an archive")
    os.utime(first.archive, (1, 1))
    later = jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ)
    assert later == ClassData(
        f"{ARCHIVE_OPTION}{first.archive} -Xlog:cds=off -Xshare:auto", first.archive, None
    )
    assert first.archive.stat().st_mtime > time.time() - 60  # marked used

    # the driver's own options first, then ours (the JVM takes the last of a repeated option)
    config = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1", "spark.master": "local[2]"}
    assert jvm_class_data.with_driver_options(config, later) == {
        "spark.driver.extraJavaOptions": f"-XX:TieredStopAtLevel=1 {later.java_options}",
        "spark.master": "local[2]",
    }
    assert (
        jvm_class_data.with_driver_options({}, later)["spark.driver.extraJavaOptions"] == later.java_options
    )


def test_no_class_data_when_turned_off_or_decided_by_the_user(
    tmp_path: Path, java_home: Path, spark_home: Path
) -> None:
    for off in ("0", "false", "OFF", "no"):
        environ = environ_of(tmp_path, java_home, **{jvm_class_data.ENABLE_ENV: off})
        assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ) is None
    assert not (tmp_path / "cache").exists()  # not even the cache directory
    environ = environ_of(tmp_path, java_home)
    for own in ("-Xshare:off", "-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x.jsa"):
        config = {"spark.driver.extraJavaOptions": f"-Xss4m {own}"}
        assert jvm_class_data.for_driver(config, spark_home=spark_home, environ=environ) is None
    # on by default
    default = {k: v for k, v in environ.items() if k != jvm_class_data.ENABLE_ENV}
    assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=default) is not None


def test_a_cache_that_cannot_be_written_or_no_java_means_no_class_data(
    tmp_path: Path, java_home: Path, spark_home: Path
) -> None:
    not_a_directory = tmp_path / "a-file"
    not_a_directory.write_text("")  # (root writes any read-only directory: a file stops it)
    environ = environ_of(tmp_path, java_home, XDG_CACHE_HOME=str(not_a_directory / "cache"))
    assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ) is None
    spaced = environ_of(tmp_path, java_home, XDG_CACHE_HOME=str(tmp_path / "my cache"))
    assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=spaced) is None
    no_java = environ_of(tmp_path, tmp_path / "no-jdk")
    assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=no_java) is None
    (java_home / "bin" / "java").write_text("#!/bin/sh\nexit 1\n")  # a java that does not run
    assert (
        jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ_of(tmp_path, java_home)) is None
    )


def test_the_key_changes_with_the_jdk_and_the_class_path(
    tmp_path: Path, java_home: Path, spark_home: Path
) -> None:
    environ = environ_of(tmp_path, java_home)

    def key(config: dict[str, str] | None = None) -> str:
        found = jvm_class_data.for_driver(config or {}, spark_home=spark_home, environ=environ)
        assert found is not None
        return found.archive.stem

    jar = spark_home / "jars" / "spark-core_2.13-4.0.0.jar"
    keys = [key()]
    assert key() == keys[0]  # stable
    jar.write_bytes(jar.read_bytes() + b"x")  # size
    keys.append(key())
    os.utime(jar, (1, 1))  # mtime
    keys.append(key())
    (spark_home / "jars" / "added.jar").write_bytes(b"PK")
    keys.append(key())
    (spark_home / "jars" / "notes.txt").write_text("not a jar")
    assert key() == keys[-1]
    (java_home / "version").write_text('openjdk version "17.0.100"\n')
    keys.append(key())
    extra = tmp_path / "extra.jar"
    extra.write_bytes(b"PK")
    keys.append(key({"spark.driver.extraClassPath": str(extra)}))
    assert len(set(keys)) == len(keys)


def test_a_dumper_that_cannot_start_leaves_nothing_behind(
    tmp_path: Path, java_home: Path, spark_home: Path
) -> None:
    environ = environ_of(tmp_path, java_home)
    found = jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ)
    assert found is not None and found.class_list is not None
    started = jvm_class_data.start_dumper(
        found, jvm_pid=os.getpid(), java="java", class_path="x.jar", python=str(tmp_path / "no-python")
    )
    assert started is None and not found.class_list.exists()

    found = jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ)
    assert found is not None and found.class_list is not None
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert jvm_class_data.start_dumper(found, jvm_pid=gone.pid, java="java", class_path="x.jar") is None
    assert not found.class_list.exists()


def test_the_dumper_waits_for_the_jvm_to_exit_then_makes_the_archive(
    tmp_path: Path, java_home: Path, spark_home: Path
) -> None:
    found = jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ_of(tmp_path, java_home))
    assert found is not None and found.class_list is not None
    found.class_list.write_text("java/lang/Object\norg/apache/spark/SparkContext\norg/apa")  # killed
    exited = tmp_path / "jvm-exited"
    # Not reaped before the end of the test: the dumper must take a zombie for an exited JVM.
    jvm = subprocess.Popen(["sh", "-c", f"sleep 2; date +%s.%N > {exited}"])
    try:
        dumper = jvm_class_data.start_dumper(
            found, jvm_pid=jvm.pid, java=str(java_home / "bin" / "java"), class_path="a.jar:b.jar"
        )
        assert dumper is not None
        deadline = time.monotonic() + 60
        while not found.archive.exists() and time.monotonic() < deadline:
            assert calls(java_home) == [] or exited.exists()
            time.sleep(0.1)
        _, status = os.waitpid(dumper, 0)
    finally:
        jvm.wait()
    assert os.waitstatus_to_exitcode(status) == 0
    assert found.archive.read_bytes() == b"half an archive"
    (start, started_at, *command), (end, _) = calls(java_home)
    assert (start, end) == ("start", "end")
    assert float(started_at) >= float(exited.read_text())
    assert command == [
        "-Xshare:dump",
        f"-XX:SharedClassListFile={found.class_list}",
        f"{ARCHIVE_OPTION}{command[2].removeprefix(ARCHIVE_OPTION)}",
        "-cp",
        "a.jar:b.jar",
    ]
    assert command[2] != f"{ARCHIVE_OPTION}{found.archive}"  # written beside it, then renamed
    assert not found.class_list.exists()
    assert sorted(p.name for p in found.archive.parent.iterdir()) == sorted(
        [
            found.archive.name,
            jvm_class_data.dump_log(found.archive).name,
            jvm_class_data.DUMPER_LOG_NAME,
            "dump.lock",
        ]
    )
    assert "written" in (found.archive.parent / jvm_class_data.DUMPER_LOG_NAME).read_text()


def test_the_class_list_loses_a_half_written_last_line(tmp_path: Path) -> None:
    listed = tmp_path / "x.classlist"
    listed.write_text("java/lang/Object\njava/lang/Str")
    jvm_class_data.complete_lines(listed)
    assert listed.read_text() == "java/lang/Object\n"
    listed.write_text("java/lang/Object\n")
    jvm_class_data.complete_lines(listed)
    assert listed.read_text() == "java/lang/Object\n"


def dump_in_thread(java_home: Path, cache: Path, key: str, index: int) -> threading.Thread:
    class_list = cache / f"{key}.{index}.classlist"
    class_list.write_text("java/lang/Object\n")

    def run() -> None:
        jvm_class_data.dump(
            java=str(java_home / "bin" / "java"),
            class_path="a.jar",
            class_list=class_list,
            archive=cache / f"{key}.jsa",
        )

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_one_dumper_at_a_time_per_cache(tmp_path: Path, java_home: Path) -> None:
    cache = tmp_path / "cds"
    cache.mkdir()
    (java_home / "dump-seconds").write_text("1\n")
    # two first audits of one key: one dump; the second dumper finds the archive made
    for thread in [dump_in_thread(java_home, cache, "same", index) for index in (1, 2)]:
        thread.join()
    assert [call[0] for call in calls(java_home)] == ["start", "end"]
    assert (cache / "same.jsa").read_bytes() == b"half an archive"
    assert not list(cache.glob("*.classlist"))
    # two keys (two Spark installations): both dumped, one after the other
    (java_home / "calls").unlink()
    for thread in [dump_in_thread(java_home, cache, key, 1) for key in ("one", "two")]:
        thread.join()
    (_, first_start, *_), (_, first_end), (_, second_start, *_), (_, second_end) = calls(java_home)
    assert float(first_start) < float(first_end) <= float(second_start) < float(second_end)
    assert (cache / "one.jsa").exists() and (cache / "two.jsa").exists()


@pytest.mark.parametrize("outcome", ["1", "killed"])
def test_a_failed_or_killed_dump_leaves_no_archive(
    tmp_path: Path, java_home: Path, spark_home: Path, outcome: str
) -> None:
    environ = environ_of(tmp_path, java_home)
    found = jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ)
    assert found is not None and found.class_list is not None
    (java_home / "exit-code").write_text(f"{outcome}\n")
    returned = jvm_class_data.dump(
        java=str(java_home / "bin" / "java"),
        class_path="a.jar",
        class_list=found.class_list,
        archive=found.archive,
    )
    assert returned == 1
    # a dump that exited 1 after writing its file, or one killed halfway through
    assert [call[0] for call in calls(java_home)] == (["start"] if outcome == "killed" else ["start", "end"])
    left = sorted(p.name for p in found.archive.parent.iterdir())
    assert found.archive.name not in left and not any(".tmp-" in name for name in left)
    assert not found.class_list.exists()
    marker = jvm_class_data.failed_marker(found.archive)
    if outcome == "killed":  # may work next time: the next audit writes a class list again
        assert not marker.exists()
        assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ) is not None
    else:  # would fail again: later audits neither list classes nor start a dumper for this key
        assert marker.read_text() == "java -Xshare:dump exited 1\n"
        assert jvm_class_data.for_driver({}, spark_home=spark_home, environ=environ) is None


def test_a_new_archive_removes_the_long_unused_ones(tmp_path: Path, java_home: Path) -> None:
    cache = tmp_path / "cds"
    cache.mkdir()
    old, recent = cache / "old.jsa", cache / "recent.jsa"
    for archive in (old, recent):
        archive.write_bytes(b"an archive")
        jvm_class_data.dump_log(archive).write_text("log")
    unused_since = time.time() - jvm_class_data.UNUSED_ARCHIVE_SECONDS - 60
    os.utime(old, (unused_since, unused_since))
    (cache / "stale.jsa.tmp-1").write_bytes(b"half")  # of a killed dumper
    dump_in_thread(java_home, cache, "new", 1).join()
    assert sorted(p.name for p in cache.glob("*.jsa*")) == ["new.jsa", "recent.jsa"]


def test_the_dumper_module_runs_as_a_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", jvm_class_data.DUMPER_MODULE, "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "--jvm-pid" in done.stdout
