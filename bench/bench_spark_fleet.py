"""Benchmark: the real-shaped fleet end to end, as a user runs it (docs/benchmarks.md,
"Fleet audit on Spark").

1. A broker with `--groups` standalone groups (`bench/fleet_fill.py`: admin OffsetCommits on 6
   partitions each, then once more with `--recommit`, as a live cluster's log grows). Use a
   PRIVATE broker (devstack/kafka.sh with DEVSTACK_DIR and ports of your own), never a shared one.
2. `groupwarden export-offsets-log` of its `__consumer_offsets` (timed: records/s), next to the
   core's live reader over the same log (`OffsetsLogReader.read`, records only).
3. The export copied as `--clusters` clusters (the same records under other `cluster` names).
4. `groupwarden audit --input ... (x clusters) --master local[2]` with default settings, a policy
   selecting `--include`, `--what-if 1d,7d`: wall time, peak RSS of the audit process (the driver)
   and of its JVM, and no traceback in its output (the bench fails otherwise).

    .venv/bin/python -m bench.bench_spark_fleet --bootstrap 127.0.0.1:39592 [--fill] [--groups 100000]

Without a broker, `--synthetic` writes the export step 1-2 would make (the same shape: `--groups`
standalone groups, 6 partitions of one of 8 topics each, committed twice, in the partition of
`__consumer_offsets` Kafka hashes each group to, `--offsets-partitions` of them), dated
`--age-days` ago (old enough for the policy's 7d: every group is eligible, so a whole-fleet
policy plans its limit and defers the rest, one skip per group):

    .venv/bin/python -m bench.bench_spark_fleet --synthetic [--groups 100000] [--include '*']

`--live` (with `--bootstrap`, a private broker, filled with `--fill` or before): the same records
audited live (`audit --bootstrap-servers`: Spark's Kafka source on `__consumer_offsets`) and from
the Parquet path (`export-offsets-log --cluster fleet`, then `audit --input` of that one export),
`--pairs` times, alternating which goes first, as of one `--now` (default: now + `--age-days`, so
every group is eligible). Each audit is a process measured for wall time, CPU seconds of its whole
tree (`run_measured`), peak RSS of the driver, of its descendants and of the JVM, and the engine's
steps; every run's summary.json and plan.json must equal the first live run's except the fields
naming the source or the time (`SOURCE_FIELDS`). Before the pairs, a session start with and without
the Kafka source (`--ivy-cold`: also one into an empty Ivy cache, downloading the package);
`--event-log`: Spark's event log per audit, summarised (time to the application's start, each stage's
tasks and times):

    .venv/bin/python -m bench.bench_spark_fleet --bootstrap 127.0.0.1:39592 --live [--fill] \
        [--groups 100000] [--include '*'] [--pairs 2] [--event-log] [--ivy-cold]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from groupwarden.fleet.schema import EXPORT_METADATA
from groupwarden.fleet.session import IVY_CACHE_ENV

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "groupwarden" / "bench-fleet"
CLI = [sys.executable, "-m", "groupwarden.cli"]

POLICY = """\
apiVersion: groupwarden.io/v1beta1
kind: ConsumerGroupPolicy
metadata: {name: fleet, namespace: bench}
spec:
  kafka: {bootstrapServers: "127.0.0.1:9"}
  selector: {include: %s, groupTypes: [classic, consumer, simple]}
  rules: {emptyGroupRetention: 7d, simpleGroupOffsetRetention: 7d}
  limits: {maxDeletionRatio: 1.0}
"""


class TreeSampler:
    """Samples a process tree from /proc every 0.2 s: the peak resident memory of the process (the
    audit's driver) and, apart, of its descendants (the JVM and the Python workers of a local-mode
    audit), and the CPU seconds each process last showed (utime + stime of its own, by role), noting
    the processes whose parent ignores SIGCHLD (their CPU never reaches anyone's RUSAGE_CHILDREN).

    Descendants are followed through their parents; a process once seen stays followed after its
    parent exits (the JVM outlives the driver by a moment and is then a child of this process, see
    `become_subreaper`)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.own_kib = 0
        self.children_kib = 0
        self.jvm_hwm_kib = 0
        # pid -> (role, own utime + stime, reaped by the kernel: its parent ignores SIGCHLD)
        self.cpu_ticks: dict[int, tuple[str, int, bool]] = {}
        self._known: dict[int, int] = {}  # pid -> start time (a reused pid is another process)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _status_kib(pid: int, field: str) -> int:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith(field):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    @staticmethod
    def _ignores_sigchld(pid: int) -> bool:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) >> (signal.SIGCHLD - 1) & 1)
        except OSError:
            pass
        return False

    def _tree(self) -> dict[int, tuple[str, int, int, int]]:
        """pid -> (command name, own CPU ticks, start time, parent) of the root and every descendant
        alive now."""
        stats: dict[int, tuple[int, str, int, int]] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                text = (proc / "stat").read_text()
            except OSError:
                continue
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            ticks = int(fields[11]) + int(fields[12])  # utime, stime
            stats[int(proc.name)] = (int(fields[1]), name, ticks, int(fields[19]))
        children: dict[int, list[int]] = {}
        for pid, (ppid, *_) in stats.items():
            children.setdefault(ppid, []).append(pid)
        found: dict[int, tuple[str, int, int, int]] = {}
        if self._known:
            frontier = [pid for pid, at in self._known.items() if pid in stats and stats[pid][3] == at]
        else:
            frontier = [self.pid] if self.pid in stats else []
        while frontier:
            current = frontier.pop()
            if current in found:
                continue
            ppid, name, ticks, at = stats[current]
            found[current] = (name, ticks, at, ppid)
            frontier.extend(children.get(current, []))
        return found

    def _role(self, pid: int, name: str) -> str:
        return "driver" if pid == self.pid else "jvm" if name == "java" else "workers"

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            tree = self._tree()
            self._known.update((pid, at) for pid, (_, _, at, _) in tree.items())
            self.own_kib = max(self.own_kib, self._status_kib(self.pid, "VmRSS:"))
            total = sum(self._status_kib(pid, "VmRSS:") for pid in tree if pid != self.pid)
            self.children_kib = max(self.children_kib, total)
            ignoring = {pid for pid in tree if self._ignores_sigchld(pid)}
            for pid, (name, ticks, _, ppid) in tree.items():
                role = self._role(pid, name)
                self.cpu_ticks[pid] = (role, ticks, ppid in ignoring)
                if role == "jvm":  # VmHWM: the JVM's own peak, exact whenever it was sampled
                    self.jvm_hwm_kib = max(self.jvm_hwm_kib, self._status_kib(pid, "VmHWM:"))

    def cpu_by_role(self) -> dict[str, float]:
        ticks = os.sysconf("SC_CLK_TCK")
        roles = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
        for role, used, _ in self.cpu_ticks.values():
            roles[role] += used / ticks
        return {role: round(seconds, 2) for role, seconds in roles.items()}

    def processes_by_role(self) -> dict[str, int]:
        """How many processes of each role were seen (a Python worker per task means no reuse)."""
        counts = {"driver": 0, "jvm": 0, "workers": 0}
        for role, _, _ in self.cpu_ticks.values():
            counts[role] += 1
        return counts

    def kernel_reaped_cpu(self) -> float:
        """CPU seconds of the processes whose parent ignores SIGCHLD, as last sampled."""
        return sum(used for _, used, reaped in self.cpu_ticks.values() if reaped) / os.sysconf("SC_CLK_TCK")


PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Makes this process the reaper of its orphaned descendants (Linux prctl), so that every
    process of a measured tree is waited for by someone in the tree or, at the end, by us."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_descendants(timeout: float) -> float:
    """Waits for every remaining child (orphans handed to us as subreaper); returns the seconds
    the tree took to end after the measured process exited."""
    started = time.perf_counter()
    deadline = started + timeout
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return time.perf_counter() - started
        if pid == 0:
            if time.perf_counter() > deadline:
                raise SystemExit(f"descendants of a measured process still run after {timeout} s")
            time.sleep(0.05)


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def run_measured(command: list[str], log: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Runs `command` as a process; its wall time to exit, peak RSS, and the CPU seconds of its
    whole tree.

    CPU (`cpu_s`) = what the kernel counted for waited-for processes + what the samples saw of the
    processes it did not count:
    - this process is a child subreaper (`become_subreaper`). A process's CPU reaches its parent's
      RUSAGE_CHILDREN when the parent waits for it, with what its own waited-for children used: the
      launcher JVM is waited for by spark-submit's shell, PySpark's daemon by the JVM, the JVM
      (which outlives the driver for a moment) by us. After the driver and every orphan are waited
      for, the growth of our RUSAGE_CHILDREN is exact for all of them, sampled or not;
    - except PySpark's Python workers: the daemon that forks them sets SIGCHLD to SIG_IGN, so the
      kernel reaps them and discards their CPU. Theirs is taken from the samples (`TreeSampler`:
      each one's own utime + stime when last seen; reused workers live to the end of the session,
      so at most the last 0.2 s of each is missed).
    Checked: a child burning 1 s and a grandchild orphaned while burning 2 s: 3.02 CPU-s counted
    (samples 2.90); a local[2] session whose 4 tasks each burn 1 CPU-s in the workers: RUSAGE_CHILDREN
    alone 16.3 CPU-s, the kernel-reaped workers 4.6 (4 of them the burn), together 20.8 (samples 20.5).
    `cpu_s_sampled` splits the samples by role (driver, JVMs, Python processes under the JVM)."""
    become_subreaper()
    log.parent.mkdir(parents=True, exist_ok=True)  # a first run into an empty cache
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    with log.open("w") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, env=env)
        sampler = TreeSampler(process.pid)
        code = process.wait()
        seconds = time.perf_counter() - started
        tree_exit = reap_descendants(timeout=120)
        sampler.stop()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = log.read_text()
    waited_for = cpu_seconds(after) - cpu_seconds(before)
    return {
        "exit_code": code,
        "seconds": round(seconds, 2),
        "tree_exit_after_s": round(tree_exit, 2),
        "cpu_s": round(waited_for + sampler.kernel_reaped_cpu(), 2),
        "cpu_s_waited_for": round(waited_for, 2),
        "cpu_s_sampled": sampler.cpu_by_role(),
        "processes_seen": sampler.processes_by_role(),
        "peak_rss_mib": round(sampler.own_kib / 1024),
        "children_peak_rss_mib": round(sampler.children_kib / 1024),
        "jvm_peak_rss_mib": round(sampler.jvm_hwm_kib / 1024),
        "traceback": "Traceback" in text or "Exception in thread" in text,
        "log": str(log),
    }


def live_read(bootstrap: str) -> dict[str, Any]:
    from groupwarden.adapters.offsets_log_reader import OffsetsLogReader
    from groupwarden.connectivity.settings import settings_from_file

    reader = OffsetsLogReader(settings_from_file(bootstrap, None))
    started = time.perf_counter()
    records = sum(1 for _ in reader.read({}))
    seconds = time.perf_counter() - started
    return {"records": records, "seconds": round(seconds, 2), "records_per_s": round(records / seconds)}


def copy_as_clusters(export: Path, clusters: int, into: Path) -> list[Path]:
    """The export under `clusters` names (`fleet-00`, ...): same records, own `cluster` column."""
    meta = json.loads((export / EXPORT_METADATA).read_text())
    copies = []
    for n in range(clusters):
        name = f"fleet-{n:02d}"
        target = into / name
        target.mkdir(parents=True, exist_ok=True)
        for path in sorted(export.glob("partition-*.parquet")):
            table = pq.read_table(path)
            column = pa.array([name] * table.num_rows, pa.string())
            table = table.set_column(table.schema.get_field_index("cluster"), "cluster", column)
            pq.write_table(table, target / path.name)
        (target / EXPORT_METADATA).write_text(json.dumps({**meta, "cluster": name, "clusterId": name}))
        copies.append(target)
    return copies


def java_partition(group_id: str, partitions: int) -> int:
    """`__consumer_offsets` partition of a group: Java `Utils.abs(groupId.hashCode()) % n`."""
    h = 0
    for unit in group_id.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    return (h & 0x7FFFFFFF) % partitions


def synthetic_export(export: Path, groups: int, partitions: int, age_days: float) -> dict[str, Any]:
    """What `fleet_fill.py` (with and without `--recommit`) and `export-offsets-log` leave, written
    with the core's encoder: each group's 6 commits, then 6 more one offset further."""
    from bench.fleet_fill import TOPIC_COUNT, topics
    from groupwarden.fleet.export import write_export
    from groupwarden.offsets_log.ledger import OffsetsLogRecord
    from groupwarden.offsets_log.records import OffsetCommitKey, OffsetCommitValue
    from groupwarden.testing.offsets_log_encoder import encode_key, encode_value

    started = time.perf_counter()
    names = topics("fleet-")
    base_ms = int((time.time() - age_days * 86400) * 1000)
    next_offset = [0] * partitions
    records: list[OffsetsLogRecord] = []
    for round_ in (0, 1):
        for i in range(groups):
            group = f"fleet-{i:06d}"
            partition = java_partition(group, partitions)
            at = base_ms + round_ * 60_000 + i // 1000
            for p in range(6):
                key = encode_key(OffsetCommitKey(group, names[i % TOPIC_COUNT], p))
                value = encode_value(OffsetCommitValue(i + round_, -1, "", at))
                records.append(OffsetsLogRecord(key, value, at, partition, next_offset[partition]))
                next_offset[partition] += 1
    records.sort(key=lambda r: (r.partition, r.offset))
    write_export(export, "fleet", "fleet", names, records)
    return {"records": len(records), "seconds": round(time.perf_counter() - started, 1)}


# What names the source or the time of an audit: left out when the live and the Parquet audit of
# the same records are compared (the live audit names its cluster by the broker's cluster id, the
# export by `--cluster`; only the live one reads `__share_group_state` beside the records).
SOURCE_FIELDS = frozenset({"cluster", "clusterId", "shareGroupStateRead", "generatedAt", "engine"})


def without_source(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: without_source(v) for k, v in document.items() if k not in SOURCE_FIELDS}
    if isinstance(document, list):
        return [without_source(v) for v in document]
    return document


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def audit_command(
    policy: Path, out: Path, args: argparse.Namespace, now: str, source: list[str]
) -> list[str]:
    command = [*CLI, "audit", "-f", str(policy), "--out", str(out), "--master", args.master]
    command += ["--what-if", "1d,7d", "--now", now, *source]
    for pair in args.conf:
        command += ["--conf", pair]
    return command


def event_log_conf(directory: Path) -> list[str]:
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    pairs = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
    }
    return [arg for key, value in pairs.items() for arg in ("--conf", f"{key}={value}")]


def event_log_summary(directory: Path, process_started_ms: int) -> dict[str, Any]:
    """Where a run's wall time went, from Spark's event log: from the process start to the Spark
    application's start (imports, the live audit's admin requests, JVM start, resolution of
    spark.jars.packages), then each stage (tasks, wall, the tasks' summed run and CPU time, records
    read) and the time outside stages."""
    # Spark 4 writes a directory per application (`eventlog_v2_*`: rolled `events_<n>_*` files).
    files = sorted(
        (p for p in directory.rglob("*") if p.is_file() and not p.name.startswith(("appstatus", "."))),
        key=lambda p: int(p.name.split("_")[1]) if p.name.startswith("events_") else 0,
    )
    events = [json.loads(line) for path in files for line in path.read_text().splitlines() if line.strip()]
    app_start = next(e["Timestamp"] for e in events if e["Event"] == "SparkListenerApplicationStart")
    app_end = next((e["Timestamp"] for e in events if e["Event"] == "SparkListenerApplicationEnd"), None)
    stages = []
    for event in events:
        if event["Event"] != "SparkListenerStageCompleted":
            continue
        info = event["Stage Info"]
        metrics = {a["Name"]: a.get("Value") for a in info.get("Accumulables", []) if "Name" in a}

        def metric(name: str, metrics: dict[str, Any] = metrics) -> int:
            return int(metrics.get(f"internal.metrics.{name}") or 0)

        stages.append(
            {
                "stage": info["Stage ID"],
                "name": info["Stage Name"],
                "tasks": info["Number of Tasks"],
                "submitted_after_app_start_s": round((info["Submission Time"] - app_start) / 1000, 2),
                "wall_s": round((info["Completion Time"] - info["Submission Time"]) / 1000, 2),
                "task_run_s": round(metric("executorRunTime") / 1000, 2),
                "task_cpu_s": round(metric("executorCpuTime") / 1e9, 2),
                "task_deserialize_s": round(metric("executorDeserializeTime") / 1000, 2),
                "records_read": metric("input.recordsRead"),
                "result_mib": round(metric("resultSize") / 2**20, 1),
            }
        )
    return {
        "to_app_start_s": round((app_start - process_started_ms) / 1000, 2),
        "app_start_to_first_stage_s": round(
            (min((s["submitted_after_app_start_s"] for s in stages), default=0.0)), 2
        ),
        "stages_wall_s": round(sum(s["wall_s"] for s in stages), 2),
        "app_s": None if app_end is None else round((app_end - app_start) / 1000, 2),
        "stages": stages,
    }


def audit_outcome(out: Path) -> dict[str, Any]:
    summary = json.loads((out / "summary.json").read_text())
    clusters = summary["clusters"]
    plans = json.loads((out / "plan.json").read_text())
    documents = plans.get("plans", [plans])
    return {
        "records": sum(c["log"]["records"] for c in clusters),
        "partitions": sum(c["log"]["partitions"] for c in clusters),
        "groups": sum(c["groups"] for c in clusters),
        "groups_selected": sum(c["groupsSelected"] for c in clusters),
        "offsets": sum(c["offsets"] for c in clusters),
        "actions": sum(len(d["actions"]) for d in documents),
        "skipped": sum(len(d["skipped"]) for d in documents),
        "engine_steps": summary["engine"]["steps"],
    }


def measured_audit(command: list[str], out: Path, log: Path, events: Path | None) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    if events is not None:
        command = [*command, *event_log_conf(events)]
    started_ms = int(time.time() * 1000)
    run: dict[str, Any] = {"utc_start": utc_now(), "load_average_before": load_average()}
    run.update(run_measured(command, log))
    run.update(utc_end=utc_now(), load_average_after=load_average())
    if run["exit_code"] != 0 or run["traceback"]:
        raise SystemExit(f"the audit failed (exit {run['exit_code']}); see {log}")
    run.update(audit_outcome(out))
    run["records_per_s"] = round(run["records"] / run["seconds"])
    if events is not None:
        run["event_log"] = event_log_summary(events, started_ms)
    return run


def session_start(
    kafka_source: bool, master: str, log: Path, ivy_cache: Path | None = None
) -> dict[str, Any]:
    """A SparkSession started and stopped as the audit starts it (a process of its own): with the
    Kafka source, spark-submit first resolves its package through Ivy (downloads on first use;
    `ivy_cache`: into that directory instead of the user's cache)."""
    code = (
        "from groupwarden.fleet.session import start_session\n"
        f"spark, _ = start_session({master!r}, kafka_source={kafka_source})\n"
        "spark.stop()\n"
    )
    env = None if ivy_cache is None else {**os.environ, IVY_CACHE_ENV: str(ivy_cache)}
    run = run_measured([sys.executable, "-c", code], log, env)
    if run["exit_code"] != 0:
        raise SystemExit(f"the session did not start; see {log}")
    return {key: run[key] for key in ("seconds", "cpu_s", "peak_rss_mib", "jvm_peak_rss_mib")}


def live_vs_parquet(args: argparse.Namespace) -> dict[str, Any]:
    """The same records audited live (Spark's Kafka source on `__consumer_offsets`) and from the
    Parquet path (`export-offsets-log`, then `audit --input`: one cluster, no copies), alternating
    which goes first; every run's summary.json and plan.json must equal the first live run's,
    except the fields that name the source or the time."""
    from groupwarden.fleet.session import kafka_package

    now = args.now or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + args.age_days * 86400))
    CACHE.mkdir(parents=True, exist_ok=True)
    policy = CACHE / "policy.yaml"
    policy.write_text(POLICY % json.dumps(args.include or ["fleet-00*"]))
    logs = CACHE.parent
    result: dict[str, Any] = {"now": now, "package": kafka_package()}
    starts = result["session_start"] = {}
    if args.ivy_cold:  # the first use: the Kafka source and its dependencies from Maven Central
        cold = CACHE / "ivy-cold"
        shutil.rmtree(cold, ignore_errors=True)
        log = logs / "bench-fleet-session-ivy-cold.log"
        starts["kafka_source_ivy_cold"] = session_start(True, args.master, log, cold)
        shutil.rmtree(cold, ignore_errors=True)
    starts["kafka_source"] = session_start(True, args.master, logs / "bench-fleet-session-kafka.log")
    starts["no_kafka_source"] = session_start(False, args.master, logs / "bench-fleet-session.log")
    export = CACHE / "live-export"
    reference: tuple[Any, Any] | None = None
    runs = []
    for pair in range(args.pairs):
        for mode in ("live", "parquet") if pair % 2 == 0 else ("parquet", "live"):
            out = CACHE / f"audit-{mode}"
            log = logs / f"bench-fleet-{mode}-{pair}.log"
            events = CACHE / "events" / f"{mode}-{pair}" if args.event_log else None
            run: dict[str, Any] = {"pair": pair, "mode": mode}
            if mode == "live":
                source = ["--bootstrap-servers", args.bootstrap]
            else:
                shutil.rmtree(export, ignore_errors=True)
                command = [*CLI, "export-offsets-log", "--bootstrap-servers", args.bootstrap]
                command += ["--cluster", "fleet", "--out", str(export)]
                exported: dict[str, Any] = {"utc_start": utc_now(), "load_average_before": load_average()}
                exported.update(run_measured(command, logs / f"bench-fleet-live-export-{pair}.log"))
                if exported["exit_code"] != 0:
                    raise SystemExit(f"the export failed; see {exported['log']}")
                exported["records"] = json.loads((export / EXPORT_METADATA).read_text())["records"]
                run["export"] = exported
                source = ["--input", str(export)]
            run.update(measured_audit(audit_command(policy, out, args, now, source), out, log, events))
            print(json.dumps(run), file=sys.stderr)
            compared = (
                without_source(json.loads((out / "summary.json").read_text())),
                without_source(json.loads((out / "plan.json").read_text())),
            )
            if reference is None:
                reference = compared
            run["equal_to_first"] = {
                "summary": compared[0] == reference[0],
                "plan": compared[1] == reference[1],
            }
            runs.append(run)
    result["runs"] = runs
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", help="a PRIVATE broker (it is filled)")
    parser.add_argument("--synthetic", action="store_true", help="no broker: write the export's shape")
    parser.add_argument("--offsets-partitions", type=int, default=3)
    parser.add_argument("--age-days", type=float, default=30.0)
    parser.add_argument("--fill", action="store_true", help="fill the broker first (fleet_fill.py)")
    parser.add_argument("--groups", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--include",
        action="append",
        help="the policy's include globs (default fleet-00*: 10%% of the groups)",
    )
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark settings")
    parser.add_argument("--skip-export", action="store_true", help="audit the last export again")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    parser.add_argument(
        "--live",
        action="store_true",
        help="the same records audited live and from an export, alternating (needs --bootstrap)",
    )
    parser.add_argument("--pairs", type=int, default=2, help="--live: live/Parquet pairs")
    parser.add_argument("--now", help="--live: the audits' --now (default: now + --age-days)")
    parser.add_argument(
        "--event-log", action="store_true", help="--live: Spark's event log per run, summarised"
    )
    parser.add_argument(
        "--ivy-cold",
        action="store_true",
        help="--live: also time a session start that downloads the Kafka source into an empty Ivy cache",
    )
    args = parser.parse_args()
    if args.live and not args.bootstrap:
        parser.error("--live needs --bootstrap (a private broker)")

    result: dict[str, Any] = {"bootstrap": args.bootstrap, "clusters": args.clusters}
    if args.fill:
        from bench.fleet_fill import fill

        created, seconds = fill(args.bootstrap, "fleet-", args.groups, 6)
        _, seconds_again = fill(args.bootstrap, "fleet-", args.groups, 6, recommit=True)
        result["fill"] = {"groups": created, "seconds": round(seconds + seconds_again, 1)}
        print(json.dumps(result["fill"]), file=sys.stderr)
    if args.live:
        result.pop("clusters")
        result.update(live_vs_parquet(args))
        print(json.dumps(result, indent=2))
        if args.out:
            with args.out.open("a") as sink:
                sink.write(json.dumps(result) + "\n")
        unequal = [r for r in result["runs"] if not all(r["equal_to_first"].values())]
        if unequal:
            raise SystemExit(
                f"runs differ from the first live run: {[(r['pair'], r['mode']) for r in unequal]}"
            )
        return
    export = CACHE / ("synthetic-export" if args.synthetic else "export")
    if args.synthetic and not args.skip_export:
        result["synthetic_export"] = synthetic_export(
            export, args.groups, args.offsets_partitions, args.age_days
        )
        copy_as_clusters(export, args.clusters, CACHE / "clusters")
    elif not args.skip_export:
        if not args.bootstrap:
            parser.error("--bootstrap (a private broker) or --synthetic")
        result["live_reader"] = live_read(args.bootstrap)
        run = run_measured(
            [
                *CLI,
                "export-offsets-log",
                "--bootstrap-servers",
                args.bootstrap,
                "--cluster",
                "fleet",
                "--out",
                str(export),
            ],
            CACHE.parent / "bench-fleet-export.log",
        )
        records = json.loads((export / EXPORT_METADATA).read_text())["records"]
        run.update(records=records, records_per_s=round(records / run["seconds"]))
        result["export"] = run
        copy_as_clusters(export, args.clusters, CACHE / "clusters")
    inputs = sorted((CACHE / "clusters").iterdir())[: args.clusters]
    policy = CACHE / "policy.yaml"
    policy.write_text(POLICY % json.dumps(args.include or ["fleet-00*"]))
    out = CACHE / "audit"
    command = [
        *CLI,
        "audit",
        "-f",
        str(policy),
        "--out",
        str(out),
        "--master",
        args.master,
        "--what-if",
        "1d,7d",
    ]
    for directory in inputs:
        command += ["--input", str(directory)]
    for pair in args.conf:
        command += ["--conf", pair]
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    audit = run_measured(command, CACHE.parent / "bench-fleet-audit.log")
    audit["load_average_before"] = load
    audit["load_average_after"] = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    if audit["exit_code"] == 0:
        summary = json.loads((out / "summary.json").read_text())
        clusters = summary["clusters"]
        audit.update(
            records=sum(c["log"]["records"] for c in clusters),
            groups=sum(c["groups"] for c in clusters),
            groups_selected=sum(c["groupsSelected"] for c in clusters),
            offsets=sum(c["offsets"] for c in clusters),
            engine=summary["engine"],
        )
        audit["records_per_s"] = round(audit["records"] / audit["seconds"])
    result["audit"] = audit
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")
    if audit["exit_code"] != 0 or audit["traceback"]:
        raise SystemExit(f"the audit failed (exit {audit['exit_code']}); see {audit['log']}")


if __name__ == "__main__":
    main()
