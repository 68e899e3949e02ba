"""The audit's driver JVM maps Spark's classes from a JDK AppCDS archive instead of loading them.

Loading and verifying Spark's ~13,000 classes is most of the driver JVM's start (~3 s and ~4 CPU-s
here, docs/spark-audit.md). A static archive (`-Xshare:dump`) holds them loaded, verified and laid
out, and later JVMs map it. It is made once per Java build and Spark class path (the cache key):

1. The first audit (no archive under the key yet) runs its JVM with `-XX:DumpLoadedClassList`:
   the JVM writes the name of every class it loads. A detached dumper (`python -m
   groupwarden.fleet.jvm_class_data`, its own session, niced) waits for that JVM to exit, then runs
   `java -Xshare:dump` on the list with the class path the driver had, one dumper per cache at a
   time (flock), into a temporary file renamed into place only when the dump exited 0.
2. Later audits add `-XX:SharedArchiveFile=<archive> -Xshare:auto`: a JVM that cannot use the
   archive (truncated, other JDK build, other class path) ignores it and loads classes as before.

Not the JDK's dynamic archive (`-XX:ArchiveClassesAtExit`): it is written while the JVM exits, and
a truncated copy of one made the next JVM abort with a fatal error (tried before; a static archive
that does not validate is only ignored under -Xshare:auto, tests/integration checks it).

Anything that goes wrong (a cache that cannot be written, no `java`, a dumper that cannot start)
means no archive, never a failed audit. `GROUPWARDEN_SPARK_CDS=0` turns it all off.

Linux only in effect: the dumper recognises the JVM by its pid and start time in /proc.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ENABLE_ENV = "GROUPWARDEN_SPARK_CDS"
_OFF_VALUES = frozenset({"0", "false", "no", "off"})
DUMPER_MODULE = "groupwarden.fleet.jvm_class_data"
LOCK_NAME = "dump.lock"
DUMPER_LOG_NAME = "dumper.log"
# A cache's archives of earlier Spark or JDK builds (~150 MiB each) go when a new one is made and
# they have not been used for this long (each use refreshes an archive's mtime).
UNUSED_ARCHIVE_SECONDS = 30 * 24 * 3600
# Driver options that already decide about class data sharing: ours would override them.
_SHARING_OPTIONS = ("-Xshare", "SharedArchiveFile", "DumpLoadedClassList", "ArchiveClassesAtExit")


@dataclass(frozen=True)
class ClassData:
    """What the driver JVM about to start does about class data: `java_options` to add to its
    `spark.driver.extraJavaOptions`; `class_list` is set when it writes the class list that a
    dumper turns into `archive` after it exits."""

    java_options: str
    archive: Path
    class_list: Path | None


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(ENABLE_ENV, "1").strip().lower() not in _OFF_VALUES


def cache_dir(environ: Mapping[str, str]) -> Path:
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "groupwarden" / "spark-cds"


def java_executable(environ: Mapping[str, str]) -> str | None:
    """The `java` spark-submit's launcher runs the driver with: JAVA_HOME's, else the PATH's."""
    java_home = environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        return str(candidate) if os.access(candidate, os.X_OK) else None
    return shutil.which("java", path=environ.get("PATH"))


def java_version(java: str) -> str | None:
    """`java -version`'s text: names the JDK build, whose archives no other build can map."""
    try:
        done = subprocess.run(
            [java, "-version"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stderr.strip() if done.returncode == 0 and done.stderr.strip() else None


def driver_jars(spark_home: Path, config: Mapping[str, str], environ: Mapping[str, str]) -> list[Path]:
    """The jars on the class path spark-submit's launcher gives the driver JVM (its own, the
    configured extra ones, a Hadoop-free build's SPARK_DIST_CLASSPATH), in a stable order."""
    entries = [
        *config.get("spark.driver.extraClassPath", "").split(os.pathsep),
        *environ.get("SPARK_DIST_CLASSPATH", "").split(os.pathsep),
        str(spark_home / "jars" / "*"),
    ]
    jars: list[Path] = []
    for entry in filter(None, entries):
        if entry.endswith("*"):
            directory = Path(entry[:-1] or ".")
            if directory.is_dir():
                jars.extend(sorted(p for p in directory.iterdir() if p.suffix.lower() == ".jar"))
        else:
            jars.append(Path(entry))
    return jars


def cache_key(version: str, jars: Sequence[Path]) -> str:
    """Changes with the JDK build and with any jar's path, size or mtime: a new Spark (or an
    added jar) is a new archive; an archive of the old ones would not validate anyway."""
    digest = hashlib.sha256(version.encode())
    for jar in jars:
        try:
            stat = jar.stat()
            digest.update(f"\n{jar}\0{stat.st_size}\0{stat.st_mtime_ns}".encode())
        except OSError:
            digest.update(f"\n{jar}\0missing".encode())
    return digest.hexdigest()[:32]


def archive_options(archive: Path) -> str:
    """-Xshare:auto: an archive that does not validate is ignored; -Xlog:cds=off: and silently
    (the JVM would print why on the audit's stdout)."""
    return f"-XX:SharedArchiveFile={archive} -Xlog:cds=off -Xshare:auto"


def for_driver(
    config: Mapping[str, str], *, spark_home: Path, environ: Mapping[str, str] = os.environ
) -> ClassData | None:
    """The class data of a driver JVM about to start with `config`, or None (off, unusable)."""
    if not enabled(environ):
        return None
    given = config.get("spark.driver.extraJavaOptions", "")
    if any(option in given for option in _SHARING_OPTIONS):
        return None  # the user's own choice
    java = java_executable(environ)
    version = java_version(java) if java else None
    if version is None:
        return None
    key = cache_key(version, driver_jars(spark_home, config, environ))
    directory = cache_dir(environ)
    if any(c.isspace() or c in "'\"\\" for c in str(directory)):
        return None  # Spark splits extraJavaOptions at whitespace; no quoting to get wrong
    archive = directory / f"{key}.jsa"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if archive.is_file():
            with suppress(OSError):  # a read-only cache still maps its archive
                os.utime(archive)  # marks it used (see UNUSED_ARCHIVE_SECONDS)
            return ClassData(archive_options(archive), archive, None)
        if failed_marker(archive).exists():
            return None  # its dump failed (the log says why): no class list per audit for nothing
        # One list per audit: two first audits at once must not write one file.
        class_list = directory / f"{key}.{os.getpid()}.classlist"
        class_list.touch()  # the cache is writable (a read-only home in a container is not)
    except OSError:
        return None
    return ClassData(f"-XX:DumpLoadedClassList={class_list}", archive, class_list)


def with_driver_options(config: Mapping[str, str], class_data: ClassData) -> dict[str, str]:
    """`config` with the class data options after the driver's own (spark-submit passes them to
    the driver JVM's command line when it starts it)."""
    given = config.get("spark.driver.extraJavaOptions", "")
    return {**config, "spark.driver.extraJavaOptions": f"{given} {class_data.java_options}".strip()}


def failed_marker(archive: Path) -> Path:
    return archive.with_suffix(".failed")


def dump_log(archive: Path) -> Path:
    return archive.with_suffix(".dump.log")


def process_start_ticks(pid: int) -> int | None:
    """The start time of a live process (clock ticks since boot): with the pid it names one
    process, also after the pid is reused. None when it is gone (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold anything
    return None if fields[0] in ("Z", "X") else int(fields[19])


def start_dumper(
    class_data: ClassData, *, jvm_pid: int, java: str, class_path: str, python: str = sys.executable
) -> int | None:
    """Starts the detached dumper of the JVM `jvm_pid` (running with `class_data`'s class list);
    its pid, or None when it could not start (the class list is then removed)."""
    if class_data.class_list is None:
        return None
    start_ticks = process_start_ticks(jvm_pid)
    if start_ticks is None:
        abandon(class_data)
        return None
    argv = [
        python, "-m", DUMPER_MODULE,
        "--jvm-pid", str(jvm_pid), "--jvm-start-ticks", str(start_ticks),
        "--java", java, "--class-path", class_path,
        "--class-list", str(class_data.class_list), "--archive", str(class_data.archive),
    ]  # fmt: skip
    log = class_data.archive.parent / DUMPER_LOG_NAME
    try:
        # posix_spawn, not Popen: nothing here waits for the dumper (it outlives the audit), and a
        # Popen collected while its child runs warns. setsid: Ctrl-C on the audit does not reach it.
        return os.posix_spawn(
            python,
            argv,
            dict(os.environ),
            setsid=True,
            file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644),
                (os.POSIX_SPAWN_DUP2, 1, 2),
            ],
        )
    except OSError:
        abandon(class_data)
        return None


def abandon(class_data: ClassData) -> None:
    """No dumper for this class list: it goes (the next audit writes one again)."""
    if class_data.class_list is not None:
        with suppress(OSError):
            class_data.class_list.unlink(missing_ok=True)


def wait_for_exit(pid: int, start_ticks: int, poll_seconds: float) -> None:
    while process_start_ticks(pid) == start_ticks:
        time.sleep(poll_seconds)


@contextmanager
def cache_lock(directory: Path) -> Iterator[int]:
    """One dumper per cache at a time (a dump takes ~40 CPU-s and ~850 MiB). The descriptor is
    also the dumping JVM's, so a dump that outlives a killed dumper still holds the lock."""
    fd = os.open(directory / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def complete_lines(class_list: Path) -> None:
    """A JVM killed while it wrote its class list may leave half a line: the dump would choke on it."""
    data = class_list.read_bytes()
    if data and not data.endswith(b"\n"):
        class_list.write_bytes(data[: data.rfind(b"\n") + 1])


def dump(*, java: str, class_path: str, class_list: Path, archive: Path) -> int:
    """Runs the dump under the cache's lock; the archive appears only from a dump that exited 0."""
    directory = archive.parent
    temporary = archive.with_name(f"{archive.name}.tmp-{os.getpid()}")
    try:
        with cache_lock(directory) as lock_fd:
            if archive.is_file():
                _say(f"{archive.name} is there already (another audit's dumper)")
                return 0
            for leftover in directory.glob("*.jsa.tmp-*"):  # of a killed dumper (we hold the lock)
                leftover.unlink(missing_ok=True)
            complete_lines(class_list)
            command = [
                java, "-Xshare:dump",
                f"-XX:SharedClassListFile={class_list}", f"-XX:SharedArchiveFile={temporary}",
                "-cp", class_path,
            ]  # fmt: skip
            _say(f"dumping {archive.name} from {class_list.name}")
            with dump_log(archive).open("w") as log:
                returncode = _run_to_end(command, log.fileno(), lock_fd)
            if returncode == 0 and temporary.is_file() and temporary.stat().st_size > 0:
                os.replace(temporary, archive)
                _say(f"{archive.name} written")
                remove_unused_archives(directory, keep=archive)
                return 0
            if returncode > 0:  # not killed: the same dump would fail again (the log says why)
                failed_marker(archive).write_text(f"java -Xshare:dump exited {returncode}\n")
            _say(f"dump failed ({returncode}): see {dump_log(archive).name}")
            return 1
    finally:
        temporary.unlink(missing_ok=True)
        class_list.unlink(missing_ok=True)


def _run_to_end(command: list[str], log_fd: int, lock_fd: int) -> int:
    """The dump's exit code; a dumper told to stop (SIGTERM) stops its dump first."""
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT, pass_fds=(lock_fd,)
    )
    try:
        return process.wait()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def remove_unused_archives(directory: Path, *, keep: Path) -> None:
    cutoff = time.time() - UNUSED_ARCHIVE_SECONDS
    for archive in directory.glob("*.jsa"):
        with suppress(OSError):
            if archive != keep and archive.stat().st_mtime < cutoff:
                archive.unlink()
                dump_log(archive).unlink(missing_ok=True)


def _say(message: str) -> None:
    print(
        f"{time.strftime('%Y-%m-%dT%H:%M:%S')} dumper {os.getpid()}: {message}", file=sys.stderr, flush=True
    )


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # runs the dump's cleanup (kill, temporary file, class list)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {DUMPER_MODULE}", description=__doc__)
    parser.add_argument("--jvm-pid", type=int, required=True)
    parser.add_argument("--jvm-start-ticks", type=int, required=True)
    parser.add_argument("--java", required=True)
    parser.add_argument("--class-path", required=True)
    parser.add_argument("--class-list", type=Path, required=True)
    parser.add_argument("--archive", type=Path, required=True)
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _stop)
    with suppress(OSError):
        os.nice(19)  # inherited by the dump: the machine's other work first
    wait_for_exit(args.jvm_pid, args.jvm_start_ticks, args.poll_seconds)
    return dump(java=args.java, class_path=args.class_path, class_list=args.class_list, archive=args.archive)


if __name__ == "__main__":
    sys.exit(main())
