"""Benchmark: the fleet audit on Spark, end to end, vs the core's single-process ledger.

Generates a synthetic `__consumer_offsets` log in the exact wire format
(`groupwarden.testing.synthetic_offsets_log`: commits, classic group metadata, KIP-848 records,
tombstones, undecoded types) as Parquet (cached under ~/.cache/groupwarden/bench-spark), then:
1. core: pyarrow batches -> `OffsetsLedger.apply` in this process (one core);
2. Spark local[N]: the whole audit (`groupwarden.fleet.job.run_audit`, as `groupwarden audit
   --input DIR --what-if 1h,1d,7d` runs it: one stage of tasks over (cluster, partition) units,
   decision on the selected groups, plan.json + summary + Parquet tables + report.html);
3. optionally a standalone master (`--master spark://...`, devstack/spark.sh with 1 or 2 workers).
Reports records/s (wall clock, session start excluded), CPU seconds of every process (driver, JVM,
Python workers) and peak RSS of driver, JVM and workers.

    .venv/bin/python -m bench.bench_spark [--records 10000000] [--groups 200000] [--master local[2]]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from groupwarden.fleet.schema import EXPORT_METADATA
from groupwarden.offsets_log import OffsetsLedger
from groupwarden.testing.synthetic_offsets_log import synthetic_log

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "groupwarden" / "bench-spark"
BATCH = 200_000


def generate(directory: Path, records: int, groups: int, seed: int) -> float:
    """Writes the log as `export-offsets-log` does (one file per partition); returns seconds spent."""
    from groupwarden.fleet.export import write_export

    started = time.perf_counter()
    write_export(directory, "bench", "bench", [], synthetic_log(records, groups, seed=seed))
    return time.perf_counter() - started


def core_ledger(directory: Path, include: list[str]) -> dict[str, Any]:
    """The core's single-process ledger over the same Parquet (one file per partition, in log
    order), and `decide_many` over its snapshot with the bench policy and the same include globs
    as the Spark runs (`decide_seconds`)."""
    from groupwarden.core.decide_many import decide_many
    from groupwarden.offsets_log.snapshot import snapshot_from_ledger

    ledger = OffsetsLedger()
    started, cpu = time.perf_counter(), time.process_time()
    apply = ledger.apply
    for key, value, ts, partition, offset in export_records(directory):
        apply(key, value, ts, partition, offset)
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu
    decide_started = time.perf_counter()
    policies = bench_policies(include)
    decide_many(policies, snapshot_from_ledger(ledger, bench_now(), cluster_id="bench"), bench_now())
    decide_seconds = time.perf_counter() - decide_started
    return {
        "records": ledger.records,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),
        "decide_seconds": round(decide_seconds, 2),
        "records_per_s": round(ledger.records / seconds),
        "groups": ledger.group_count,
        "offsets": ledger.offset_count,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def tree_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds of a process and all its descendants (live ones, plus what the reaped ones
    spent), by role: this process (the driver), the JVM, PySpark's Python workers (local mode)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, tuple[str, list[str]]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            text = (proc / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        stats[int(proc.name)] = (name, fields)
        children.setdefault(int(fields[1]), []).append(int(proc.name))
    totals = {"driver": 0.0, "jvm": 0.0, "workers": 0.0}
    todo = [pid]
    while todo:
        current = todo.pop()
        found = stats.get(current)
        if found is None:
            continue
        name, fields = found
        role = "driver" if current == pid else "jvm" if name == "java" else "workers"
        totals[role] += sum(int(v) for v in fields[11:15]) / ticks  # utime, stime, cutime, cstime
        todo.extend(children.get(current, []))
    totals["total"] = sum(totals.values())
    return totals


def jvm_peak_mib(spark: Any) -> float | None:
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024)
    return None


class PythonWorkerPeak:
    """Samples the resident memory of PySpark's Python workers (children of the JVM, so getrusage
    in this process cannot see them) every 0.5 s while the replay runs."""

    def __init__(self) -> None:
        self.peak_kib = 0
        self.most_workers = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> PythonWorkerPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.5):
            total, workers = 0, 0
            for proc in Path("/proc").iterdir():
                if not proc.name.isdigit():
                    continue
                try:
                    cmdline = (proc / "cmdline").read_bytes()
                    if b"pyspark.daemon" not in cmdline and b"pyspark.worker" not in cmdline:
                        continue
                    for line in (proc / "status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
                            workers += 1
                except OSError:
                    continue
            self.peak_kib = max(self.peak_kib, total)
            self.most_workers = max(self.most_workers, workers)


BENCH_POLICY = """\
apiVersion: groupwarden.io/v1beta1
kind: ConsumerGroupPolicy
metadata: {name: bench, namespace: bench}
spec:
  kafka: {bootstrapServers: "127.0.0.1:9"}
  selector: {include: %s, groupTypes: [classic, consumer, simple]}
  rules: {emptyGroupRetention: 1h, simpleGroupOffsetRetention: 1d}
  limits: {maxDeletionRatio: 1.0}
"""


WHAT_IF = (timedelta(hours=1), timedelta(days=1), timedelta(days=7))


def bench_policies(include: list[str]) -> list[Any]:
    from groupwarden.core.policy import load_policy_file

    policy_path = CACHE / "bench-policy.yaml"
    policy_path.parent.mkdir(parents=True, exist_ok=True)
    policy_path.write_text(BENCH_POLICY % json.dumps(include))
    return list(load_policy_file(policy_path))


def bench_now() -> datetime:
    from groupwarden.testing.synthetic_offsets_log import T0

    return datetime.fromtimestamp(T0 / 1000, tz=UTC) + timedelta(days=2)


def spark_audit(
    directories: list[Path], master: str, runs: int, include: list[str], conf: dict[str, str]
) -> dict[str, Any]:
    """The whole audit as `groupwarden audit --input ... --what-if 1h,1d,7d` runs it: read ->
    plan.json + summary + Parquet tables + report.html (SparkSession start timed apart)."""
    from groupwarden.fleet.job import run_audit
    from groupwarden.fleet.session import start_session
    from groupwarden.fleet.sources import read_exports

    policies = bench_policies(include)
    now = bench_now()
    out = CACHE / "bench-out"
    started, cpu_before = time.perf_counter(), tree_cpu_seconds(os.getpid())
    spark, _ = start_session(master, kafka_source=False, extra=conf)
    startup = time.perf_counter() - started
    # (with the Python workers it starts: fleet/session.py `start_python_workers`)
    startup_cpu = tree_cpu_seconds(os.getpid())["total"] - cpu_before["total"]
    timings: list[float] = []
    cpu_runs: list[dict[str, float]] = []
    result = None
    workers = PythonWorkerPeak()
    try:
        with workers:
            for _ in range(runs):
                t, cpu = time.perf_counter(), tree_cpu_seconds(os.getpid())
                raw, sources = read_exports(spark, directories)
                result = run_audit(spark, raw, sources, policies, now, out, WHAT_IF)
                timings.append(time.perf_counter() - t)
                after = tree_cpu_seconds(os.getpid())
                cpu_runs.append({role: round(after[role] - cpu[role], 2) for role in after})
        jvm = jvm_peak_mib(spark)
        parallelism = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    assert result is not None
    clusters = result.summary["clusters"]
    records = sum(c["log"]["records"] for c in clusters)
    best = min(timings)
    return {
        "master": master,
        "parallelism": parallelism,
        "session_start_s": round(startup, 1),
        "session_start_cpu_s": round(startup_cpu, 2),
        "runs_s": [round(t, 2) for t in timings],
        # driver + JVM + Python workers (local mode: all descendants of this process)
        "cpu_s": cpu_runs,
        "cpu_s_per_1m_records": round(min(c["total"] for c in cpu_runs) / (records / 1e6), 2),
        "engine_last_run": result.summary["engine"],
        "records": records,
        "records_per_s": round(records / best),
        "groups": sum(c["groups"] for c in clusters),
        "groups_selected": sum(c["groupsSelected"] for c in clusters),
        "offsets": sum(c["offsets"] for c in clusters),
        "planned_actions": sum(len(p.actions) for a in result.audits for p in a.plans),
        "driver_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "jvm_peak_rss_mib": jvm,
        # Sum over the Python workers alive at one moment (0.5 s samples; on this machine only).
        "python_workers_peak_rss_mib": round(workers.peak_kib / 1024),
        "python_workers_seen_at_once": workers.most_workers,
    }


def export_records(directory: Path) -> Iterator[tuple[Any, Any, Any, Any, Any]]:
    """Every record of an `export-offsets-log` export, partition by partition in log order:
    (key, value, timestamp, partition, offset), the core ledger's `apply` arguments."""
    from groupwarden.fleet.sources import export_files

    for names in export_files(directory).values():
        for name in names:
            for batch in pq.ParquetFile(directory / name).iter_batches(batch_size=BATCH):
                yield from zip(
                    batch.column("key").to_pylist(),
                    batch.column("value").to_pylist(),
                    batch.column("timestamp").to_pylist(),
                    batch.column("partition").to_pylist(),
                    batch.column("offset").to_pylist(),
                    strict=True,
                )


def input_parser(description: str | None) -> argparse.ArgumentParser:
    """The arguments every Spark bench shares: which synthetic log, which master, how many runs."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--groups", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=2, help="runs per session (the best counts)")
    parser.add_argument(
        "--include", action="append", help="the bench policy's include globs (default app-1*)"
    )
    parser.add_argument("--input", action="append", type=Path, help="audit these exports instead")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark settings")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line")
    return parser


def input_directory(args: argparse.Namespace) -> Path:
    return CACHE / f"r{args.records}-g{args.groups}-s{args.seed}"


def main() -> None:
    parser = input_parser(__doc__)
    parser.add_argument("--skip-core", action="store_true")
    args = parser.parse_args()

    directories = args.input or [input_directory(args)]
    if not args.input and (directories[0] / EXPORT_METADATA).exists():
        from groupwarden.fleet.export import convert_export

        convert_export(directories[0])  # a cache written by an older bench (interleaved files)
    if not args.input and not (directories[0] / EXPORT_METADATA).exists():
        seconds = generate(directories[0], args.records, args.groups, args.seed)
        print(f"generated {args.records:,} records in {seconds:.0f}s -> {directories[0]}", file=sys.stderr)
    size = sum(p.stat().st_size for d in directories for p in d.glob("*.parquet")) / 2**20
    result: dict[str, Any] = {
        "input": [str(d) for d in directories],
        "parquet_mib": round(size),
        "cpus": os.cpu_count(),
    }
    conf = dict(pair.split("=", 1) for pair in args.conf)
    result["spark"] = spark_audit(directories, args.master, args.runs, args.include or ["app-1*"], conf)
    if not args.skip_core:
        # One input: the core ledger over the same records in this process (after the Spark run,
        # so the driver's peak above is the audit's alone).
        result["core"] = core_ledger(directories[0], args.include or ["app-1*"])
        assert result["core"]["groups"] == result["spark"]["groups"], "Spark and core disagree"
        assert result["core"]["offsets"] == result["spark"]["offsets"], "Spark and core disagree"
        result["speedup_vs_core"] = round(result["core"]["seconds"] / min(result["spark"]["runs_s"]), 2)
        core_and_decide = result["core"]["seconds"] + result["core"]["decide_seconds"]
        result["speedup_vs_core_and_decide"] = round(core_and_decide / min(result["spark"]["runs_s"]), 2)
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
