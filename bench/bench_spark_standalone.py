"""Benchmark: the fleet audit on a real Spark standalone cluster, N workers of 1 core each.

Starts a private standalone master and `--workers` workers on loopback (devstack/spark.sh, its own
DEVSTACK_DIR under /tmp and free ports), runs the whole audit (`groupwarden.fleet.job.run_audit`
on `--input` exports or bench_spark's cached synthetic log, `--what-if 1h,1d,7d` as bench_spark
runs it) `--runs` times in one session, and stops the cluster at the end, also on failure.

Reports per run: wall, the audit's steps (summary.json's `engine.steps`), the tasks run (per job
and stage, from Spark's status store, and per executor), the CPU seconds of the driver (Python and
its JVM) and of each worker's process tree (the executor JVM and its Python workers), and CPU
seconds per task = the executors' CPU / the tasks run; the machine's busy CPU seconds meanwhile, and
what other processes took of it (the machine is shared). Per session: start-up, CPU until the
stop, peak RSS (VmHWM) of the driver, executor JVMs and Python workers. Then the counts
(records, groups, offsets, planned actions) against a reference audit of the same input in
`--master` (local[2]): run once into `--reference DIR` (default: a new directory under /tmp) and
reused while its summary.json is there; summary.json (but the engine block), plan.json and the
tables' row counts must be equal.

    PYTHONPATH=operator:tests:. nice -n 10 .venv/bin/python -m bench.bench_spark_standalone \\
        --workers 2 --runs 2 --include '*' [--input DIR | --records 1000000 --groups 20000] \\
        [--reference DIR] [--out FILE.jsonl]
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import groupwarden
from bench.bench_spark import BENCH_POLICY, WHAT_IF, bench_now, input_directory, input_parser
from groupwarden.fleet.schema import EXPORT_METADATA

REPO = Path(__file__).resolve().parents[1]
SPARK_SH = REPO / "devstack" / "spark.sh"
TICKS = os.sysconf("SC_CLK_TCK")


def utc_now() -> str:
    return datetime.now(UTC).strftime("%H:%M:%S")


def load() -> str:
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- CPU seconds of process trees, from /proc


@dataclass
class Proc:
    pid: int
    ppid: int
    name: str
    cmdline: str
    cpu: float  # utime + stime + cutime + cstime, seconds


def processes() -> dict[int, Proc]:
    found: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        cpu = sum(int(v) for v in fields[11:15]) / TICKS
        found[int(entry.name)] = Proc(int(entry.name), int(fields[1]), name, cmdline, cpu)
    return found


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (all CPUs, /proc/stat: user, nice, system,
    irq, softirq, steal; guest time is already in user)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / TICKS


def tree(root: int, table: dict[int, Proc]) -> list[Proc]:
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            out.append(table[pid])
            todo.extend(children.get(pid, []))
    return out


def role(proc: Proc, root: int) -> str:
    if proc.pid == root:
        return "root"
    if "CoarseGrainedExecutorBackend" in proc.cmdline:
        return "executor_jvm"
    return "python"  # the executor's Python daemon and the workers it forked (or anything else)


def worker_cpu(root: int, table: dict[int, Proc]) -> dict[str, float]:
    """CPU seconds of one standalone worker's process tree, by role: the Worker JVM itself
    (`root`: registration, heartbeats, and, once an executor is reaped, that executor's whole CPU),
    the executor JVM, the Python processes under it.

    What is counted: each live process's own user+system time and that of its children it has
    reaped (cutime/cstime). PySpark's daemon reaps the workers it forks (SIGCHLD -> waitpid), so a
    Python worker that exits during a run is still counted, under "python". What is not: a process
    that exited and was reaped by a process outside the tree, or one still a zombie (neither
    happens here, as far as /proc shows), and the time of a child that exited but whose parent has
    not reaped it yet, nor, once the application has ended, the Python daemon: the Worker JVM
    reaps its executor (its CPU then shows in the Worker's cutime), but the executor leaves its
    daemon unreaped (measured: the Worker's cutime grew by about the executor JVM's CPU only), so
    readings are taken while the executors are alive (per run, and the session until its stop).
    """
    totals = {"root": 0.0, "executor_jvm": 0.0, "python": 0.0}
    for proc in tree(root, table):
        totals[role(proc, root)] += proc.cpu
    return totals


def driver_cpu(table: dict[int, Proc]) -> dict[str, float]:
    """This process (the driver's Python) and its descendants (the driver's JVM, started by
    PySpark's launcher; in standalone mode no Python worker runs under the driver)."""
    me = os.getpid()
    totals = {"python": 0.0, "jvm": 0.0, "other": 0.0}
    for proc in tree(me, table):
        key = "python" if proc.pid == me else "jvm" if proc.name == "java" else "other"
        totals[key] += proc.cpu
    return totals


def peak_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return 0.0


def peak_rss(roots: dict[str, int], table: dict[int, Proc]) -> dict[str, dict[str, float]]:
    """Peak resident memory (VmHWM) of the processes alive now, by tree and role, MiB: the
    largest one of each role and, for Python, the sum over the processes alive (a lower bound of
    the workers' peak together: a worker that has exited is not seen)."""
    out: dict[str, dict[str, float]] = {}
    for name, root in roots.items():
        peaks: dict[str, float] = {}
        for proc in tree(root, table):
            kind = "python" if proc.name.startswith("python") else "jvm" if proc.name == "java" else "other"
            if proc.pid == root:
                kind = "root"
            value = peak_rss_mib(proc.pid)
            peaks[f"{kind}_max"] = max(peaks.get(f"{kind}_max", 0.0), value)
            if kind == "python":
                peaks["python_sum"] = peaks.get("python_sum", 0.0) + value
        out[name] = peaks
    return out


def minus(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in after}


# ---- the cluster


@dataclass
class Cluster:
    workers: int
    memory: str
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="standalone-bench-")))
    master_port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "DEVSTACK_DIR": str(self.directory),
            "SPARK_MASTER_PORT": str(self.master_port),
            "SPARK_MASTER_UI_PORT": str(self.ui_port),
            "SPARK_WORKERS": str(self.workers),
            "SPARK_WORKER_CORES": "1",
            "SPARK_WORKER_MEMORY": self.memory,
            "SPARK_START_TIMEOUT": "150",
            # spark.sh finds pyspark through the repository's .venv, which a worktree lacks.
            "PYTHON": os.environ.get("PYTHON", sys.executable),
        }

    def script(self, command: str) -> None:
        done = subprocess.run(
            [str(SPARK_SH), command], env=self.env(), timeout=400, capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"devstack/spark.sh {command} failed:\n{done.stdout}\n{done.stderr}")

    def worker_pids(self) -> list[int]:
        pids = []
        for i in range(1, self.workers + 1):
            pid_file = self.directory / "spark" / f"worker-{i}.pid"
            pids.append(int(pid_file.read_text().split()[0]))
        return pids


@contextmanager
def running(cluster: Cluster, keep: bool) -> Iterator[Cluster]:
    cluster.script("up")
    try:
        yield cluster
    finally:
        cluster.script("down")
        if not keep:
            shutil.rmtree(cluster.directory, ignore_errors=True)


# ---- what Spark ran


class TaskCounter:
    """The jobs, stages and tasks of the session, from Spark's status store (fed by its listener
    whether the UI runs or not): what ran since the last `mark()`."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.sc = spark.sparkContext
        self.store = self.sc._jsc.sc().statusStore()
        self.convert = self.sc._jvm.scala.jdk.javaapi.CollectionConverters
        self.seen_jobs: set[int] = set()
        self.executor_tasks: dict[str, tuple[int, int]] = {}
        self.mark()

    def executors(self) -> dict[str, tuple[int, int]]:
        """Executor id -> (completed tasks, task time ms), the driver left out."""
        out = {}
        for summary in self.convert.asJava(self.store.executorList(False)):
            if summary.id() != "driver":
                out[summary.id()] = (int(summary.completedTasks()), int(summary.totalDuration()))
        return out

    def mark(self) -> None:
        self.seen_jobs = set(self.sc.statusTracker().getJobIdsForGroup(None))
        self.executor_tasks = self.executors()

    def since_mark(self) -> dict[str, Any]:
        tracker = self.sc.statusTracker()
        jobs = sorted(set(tracker.getJobIdsForGroup(None)) - self.seen_jobs)
        stages = []
        for job in jobs:
            info = tracker.getJobInfo(job)
            for stage_id in sorted(info.stageIds if info else []):
                stages.append(self.stage(job, stage_id))
        now = self.executors()
        per_executor = {
            executor: {
                "tasks": tasks - self.executor_tasks.get(executor, (0, 0))[0],
                "task_time_s": round((ms - self.executor_tasks.get(executor, (0, 0))[1]) / 1000, 2),
            }
            for executor, (tasks, ms) in sorted(now.items())
        }
        return {
            "jobs": len(jobs),
            "stages": stages,
            "tasks": sum(s["tasks"] for s in stages),
            "per_executor": per_executor,
        }

    def stage(self, job: int, stage_id: int) -> dict[str, Any]:
        """A stage's completed tasks, their wall (submission to completion) and the executors'
        own measure of the tasks' run and CPU time (the JVM task threads only: the Python
        workers' CPU is not in `executorCpuTime`), and tasks per executor."""
        stage = self.store.lastStageAttempt(stage_id)
        submitted, completed = stage.submissionTime(), stage.completionTime()
        wall = None
        if submitted.isDefined() and completed.isDefined():
            wall = round((completed.get().getTime() - submitted.get().getTime()) / 1000, 2)
        spread = {}
        summaries = self.store.executorSummary(stage_id, stage.attemptId())
        for executor, summary in self.convert.asJava(summaries).items():
            spread[executor] = int(summary.succeededTasks())
        return {
            "job": job,
            "stage": stage_id,
            "name": stage.name().split(" at ")[0],
            "status": stage.status().toString(),
            "tasks": int(stage.numCompleteTasks()),
            "failed": int(stage.numFailedTasks()),
            "wall_s": wall,
            "run_time_s": round(stage.executorRunTime() / 1000, 2),
            "jvm_cpu_s": round(stage.executorCpuTime() / 1e9, 2),
            "tasks_per_executor": dict(sorted(spread.items())),
        }


# ---- the audit


def policies_in(directory: Path, include: list[str]) -> list[Any]:
    """The bench policy (bench_spark's), written in this bench's own directory: bench_spark's
    copy in the shared cache may be rewritten by another bench running at the same time."""
    from groupwarden.core.policy import load_policy_file

    path = directory / "bench-policy.yaml"
    path.write_text(BENCH_POLICY % json.dumps(include))
    return list(load_policy_file(path))


def counts(summary: dict[str, Any], out: Path) -> dict[str, int]:
    clusters = summary["clusters"]
    result = {
        "records": sum(c["log"]["records"] for c in clusters),
        "groups": sum(c["groups"] for c in clusters),
        "groups_selected": sum(c["groupsSelected"] for c in clusters),
        "offsets": sum(c["offsets"] for c in clusters),
    }
    plan = json.loads((out / "plan.json").read_text())
    result["planned_actions"] = len(plan["actions"])
    for table in ("groups", "offsets", "plan"):
        files = sorted((out / table).rglob("*.parquet"))
        result[f"{table}_table_rows"] = sum(pq.read_metadata(f).num_rows for f in files)
    return result


def wait_for_executors(spark: Any, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    jvm_tracker = spark.sparkContext._jsc.sc().statusTracker()
    while len(jvm_tracker.getExecutorInfos()) < expected + 1:  # + the driver
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {expected} executors registered after {timeout:.0f}s")
        time.sleep(0.2)


def cluster_audit(
    cluster: Cluster, directories: list[Path], runs: int, include: list[str], conf: dict[str, str]
) -> dict[str, Any]:
    from groupwarden.fleet.job import run_audit
    from groupwarden.fleet.session import DAEMON_MODULE, start_session
    from groupwarden.fleet.sources import read_exports

    policies = policies_in(cluster.directory, include)
    out = cluster.directory / "out"
    workers = cluster.worker_pids()
    session: dict[str, Any] = {"utc_start": utc_now(), "load_start": load()}
    table = processes()
    session_before = {pid: worker_cpu(pid, table) for pid in workers}
    driver_before = driver_cpu(table)
    started = time.perf_counter()
    # The executors run this interpreter (groupwarden installed): the audit's worker daemon, as
    # the measurements in docs/benchmarks.md ("Standalone cluster") ran (a cluster's default is
    # PySpark's own daemon).
    conf = {"spark.python.daemon.module": DAEMON_MODULE, **conf}
    spark, _ = start_session(cluster.url, kafka_source=False, extra=conf)
    session["session_start_s"] = round(time.perf_counter() - started, 1)
    runs_out: list[dict[str, Any]] = []
    result = None
    try:
        wait_for_executors(spark, cluster.workers, 120)
        session["executors_registered_s"] = round(time.perf_counter() - started, 1)
        session["default_parallelism"] = spark.sparkContext.defaultParallelism
        counter = TaskCounter(spark)
        for _ in range(runs):
            run: dict[str, Any] = {"utc_start": utc_now(), "load_start": load()}
            counter.mark()
            table = processes()
            driver0, workers0 = driver_cpu(table), {pid: worker_cpu(pid, table) for pid in workers}
            busy0 = machine_busy()
            t = time.perf_counter()
            raw, sources = read_exports(spark, directories)
            result = run_audit(spark, raw, sources, policies, bench_now(), out, WHAT_IF)
            run["wall_s"] = round(time.perf_counter() - t, 2)
            table, busy = processes(), machine_busy()
            run["utc_end"], run["load_end"] = utc_now(), load()
            run["steps"] = result.summary["engine"]["steps"]
            run["engine"] = {k: v for k, v in result.summary["engine"].items() if k != "steps"}
            run["spark"] = counter.since_mark()
            run["driver_cpu_s"] = minus(driver_cpu(table), driver0)
            run["worker_cpu_s"] = {
                f"worker-{i}": minus(worker_cpu(pid, table), workers0[pid])
                for i, pid in enumerate(workers, 1)
            }
            executors_cpu = sum(w["executor_jvm"] + w["python"] for w in run["worker_cpu_s"].values())
            run["executors_cpu_s"] = round(executors_cpu, 2)
            # What the rest of the machine spent meanwhile (other benches, the devstack): the
            # machine's busy time minus this bench's processes (driver and worker trees).
            ours = sum(run["driver_cpu_s"].values()) + sum(
                sum(w.values()) for w in run["worker_cpu_s"].values()
            )
            run["machine_busy_cpu_s"] = round(busy - busy0, 2)
            run["others_cpu_s"] = round(busy - busy0 - ours, 2)
            run["cpu_s_per_task"] = round(executors_cpu / max(1, run["spark"]["tasks"]), 3)
            main_stage = max(run["spark"]["stages"], key=lambda s: s["run_time_s"])
            run["main_stage"] = {
                "stage": main_stage["stage"],
                "tasks": main_stage["tasks"],
                "wall_s": main_stage["wall_s"],
                "tasks_per_executor": main_stage["tasks_per_executor"],
            }
            run["counts"] = counts(result.summary, out)
            runs_out.append(run)
            print(json.dumps(run), flush=True)
        # The whole session until the stop: the executors' start-up and every run (the executors
        # are alive here; after the stop, the Worker JVM reaps its executor, but the executor
        # does not reap its Python daemon, so the Python CPU would be lost from the tree).
        table = processes()
        roots = {"driver": os.getpid(), **{f"worker-{i}": pid for i, pid in enumerate(workers, 1)}}
        session["peak_rss_mib"] = peak_rss(roots, table)
        session["driver_cpu_s"] = minus(driver_cpu(table), driver_before)
        session["worker_cpu_s"] = {
            f"worker-{i}": minus(worker_cpu(pid, table), session_before[pid])
            for i, pid in enumerate(workers, 1)
        }
    finally:
        spark.stop()
    session["utc_end"], session["load_end"] = utc_now(), load()
    assert result is not None, "no run"
    session["summary"] = result.summary
    return {"session": session, "runs": runs_out}


def reference_audit(
    directory: Path, directories: list[Path], master: str, include: list[str], conf: dict[str, str]
) -> dict[str, Any]:
    """The same audit in `master` (local[2]), once: its summary.json is reused while it exists."""
    from groupwarden.fleet.job import run_audit
    from groupwarden.fleet.session import start_session
    from groupwarden.fleet.sources import read_exports

    if not (directory / "summary.json").exists():
        directory.mkdir(parents=True, exist_ok=True)
        policies = policies_in(directory, include)
        spark, _ = start_session(master, kafka_source=False, extra=conf)
        try:
            raw, sources = read_exports(spark, directories)
            run_audit(spark, raw, sources, policies, bench_now(), directory, WHAT_IF)
        finally:
            spark.stop()
    summary: dict[str, Any] = json.loads((directory / "summary.json").read_text())
    return summary


def main() -> None:
    parser = input_parser(__doc__)
    parser.add_argument("--workers", type=int, default=2, help="standalone workers, 1 core each")
    parser.add_argument("--worker-memory", default="2g", help="each worker's, and its executor's, memory")
    parser.add_argument("--reference", type=Path, help="the reference audit's output directory")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory (logs)")
    parser.set_defaults(runs=1)
    args = parser.parse_args()

    directories = [d.resolve() for d in (args.input or [input_directory(args)])]
    for directory in directories:
        if not (directory / EXPORT_METADATA).exists():
            raise SystemExit(f"{directory}: not an export (bench_spark.py generates the synthetic one)")
    include = args.include or ["app-1*"]
    conf = dict(pair.split("=", 1) for pair in args.conf)
    # The executors import groupwarden from this checkout, as the driver does.
    operator_dir = str(Path(groupwarden.__file__).resolve().parents[1])
    conf.setdefault("spark.executorEnv.PYTHONPATH", operator_dir)
    conf.setdefault("spark.executor.memory", args.worker_memory)
    result: dict[str, Any] = {
        "input": [str(d) for d in directories],
        "parquet_mib": round(sum(p.stat().st_size for d in directories for p in d.glob("*.parquet")) / 2**20),
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "include": include,
    }
    cluster = Cluster(args.workers, args.worker_memory)
    with running(cluster, args.keep):
        result.update(cluster_audit(cluster, directories, args.runs, include, conf))
        cluster_out = cluster.directory / "out"
        cluster_counts = counts(result["session"]["summary"], cluster_out)
        cluster_plan = (cluster_out / "plan.json").read_text()
    if args.keep:
        print(f"cluster directory kept: {cluster.directory}")
    cluster_summary = result["session"].pop("summary")
    reference_dir = args.reference or (cluster.directory.parent / f"standalone-bench-reference-{os.getpid()}")
    reference = reference_audit(reference_dir, directories, args.master, include, {})
    reference_counts = counts(reference, reference_dir)
    result["counts"] = {"cluster": cluster_counts, args.master: reference_counts}
    result["reference"] = str(reference_dir)
    cluster_engine, reference_engine = cluster_summary.pop("engine"), reference.pop("engine")
    result["equal_to_reference"] = {
        "summary_but_engine": cluster_summary == reference,
        "plan_json": cluster_plan == (reference_dir / "plan.json").read_text(),
        "counts": cluster_counts == reference_counts,
    }
    result["engine"] = {"cluster": cluster_engine["master"], "reference": reference_engine["master"]}
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")
    assert all(result["equal_to_reference"].values()), "the cluster's audit differs from the reference"


if __name__ == "__main__":
    main()
