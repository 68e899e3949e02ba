"""Benchmark: where the fleet audit's time goes on Spark, stage by stage (issue 12's pipeline).

Uses the Parquet log `bench/bench_spark.py` generates (run it first). Each stage runs to a `noop`
sink (no collect) `--runs` times; the best time counts, with the CPU time
the JVM spent (local mode; on a loaded machine wall time says little, CPU time more):
1. read: Parquet -> JVM rows, nothing else (what any route pays once per scan);
2. decode: OffsetCommit values decoded by the Spark SQL expressions (`jvm_codec.decode_values`);
3. compaction: decode + latest record per key (`pipeline.compacted_commits`, hash aggregation);
   floor: the latest offset per key only (no decode, no value carried): what any exact
   compaction in the JVM pays at least;
4. others: the second scan, records that are not plain commits (what goes to Python or is joined);
5. ledgers: the whole distributed part (`pipeline.build_ledgers`: compaction, Python ledger for
   the rest, offsets and groups), its groups to the noop sink;
6. audit: `job.collect_audits` (ledgers + what the driver takes: aggregates, selected groups);
7. profile: the whole audit as bench/bench_spark.py runs it (bench policy, what-if), once, each
   persisted part of the ledgers materialised in turn, then the driver's steps
   (`summary.json`'s `engine.steps`): where the end-to-end time goes.

    .venv/bin/python bench/bench_spark_stages.py [--records 10000000] [--groups 200000] [--master local[2]]
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_spark import (  # the same inputs as bench/bench_spark.py
    CACHE,
    WHAT_IF,
    bench_now,
    bench_policies,
    input_directory,
    input_parser,
)
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def best_of(runs: int, action: Callable[[], Any]) -> float:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return min(timings)


def noop(frame: DataFrame) -> Callable[[], None]:
    return lambda: frame.write.format("noop").mode("overwrite").save()


def task_cpu_seconds(spark: Any) -> float:
    """CPU seconds the JVM has used so far (user + system, from /proc: in local mode every task
    runs in it; includes its GC and JIT threads, which a stage also costs)."""
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = input_parser(__doc__)
    parser.add_argument("--stage", action="append", help="run only these stages (default: all)")
    args = parser.parse_args()
    directory = input_directory(args)
    if not directory.exists():
        raise SystemExit(f"{directory} missing: run bench/bench_spark.py --records {args.records} first")

    from groupwarden.fleet.job import _select_all, collect_audits
    from groupwarden.fleet.jvm_codec import decode_values, is_commit_key
    from groupwarden.fleet.pipeline import build_ledgers, compacted_commits, not_plain
    from groupwarden.fleet.session import start_session
    from groupwarden.fleet.sources import read_exports

    conf = dict(pair.split("=", 1) for pair in args.conf)
    spark, _ = start_session(args.master, kafka_source=False, extra=conf)
    try:
        raw, sources = read_exports(spark, [directory])
        records = raw.count()

        def ledgers() -> None:
            built = build_ledgers(raw, keep_history=True)
            built.groups.write.format("noop").mode("overwrite").save()
            built.release()

        def audit() -> None:
            collected = collect_audits(spark, raw, sources, _select_all)
            collected.groups.unpersist()
            collected.ledgers.release()

        profiled: dict[str, dict[str, float]] = {}

        def profile() -> None:
            import groupwarden.fleet.job as job

            build = job.build_ledgers

            def timed(name: str, action: Callable[[], Any]) -> None:
                cpu, started = task_cpu_seconds(spark), time.perf_counter()
                action()
                profiled[name] = {
                    "seconds": round(time.perf_counter() - started, 2),
                    "jvm_cpu_seconds": round(task_cpu_seconds(spark) - cpu, 2),
                }
                print(f"  {name:56s} {profiled[name]}", flush=True)

            def materialised(raw: DataFrame, *, keep_history: bool = True) -> Any:
                built = build(raw, keep_history=keep_history)
                for name, frame in built.parts().items():
                    timed(name, frame.count)
                return built

            job.build_ledgers = materialised  # type: ignore[assignment]
            started = time.perf_counter()
            try:
                result = job.run_audit(
                    spark,
                    raw,
                    sources,
                    bench_policies(args.include or ["app-1*"]),
                    bench_now(),
                    CACHE / "bench-out",
                    WHAT_IF,
                )
            finally:
                job.build_ledgers = build  # type: ignore[assignment]
            total = time.perf_counter() - started
            for name, seconds in result.summary["engine"]["steps"].items():
                profiled[f"driver step: {name}"] = {"seconds": seconds}
            profiled["total"] = {"seconds": round(total, 2)}

        stages: dict[str, Callable[[], Any]] = {
            "read": noop(raw),
            "decode": noop(decode_values(raw.where(is_commit_key()))),
            "compaction": noop(compacted_commits(raw)),
            # The floor of any exact compaction: the latest offset per key, nothing decoded or carried.
            "floor": noop(
                raw.where(is_commit_key())
                .groupBy("cluster", "partition", F.expr("substring(key, 3)").alias("slot"))
                .agg(F.max("offset").alias("pos"))
            ),
            "others": noop(not_plain(raw)),
            "ledgers": ledgers,
            "audit": audit,
            "profile": profile,
        }
        result: dict[str, Any] = {
            "records": records,
            "master": args.master,
            "parallelism": spark.sparkContext.defaultParallelism,
            "input_partitions": raw.rdd.getNumPartitions(),
            "stages": {},
        }
        for name, action in stages.items():
            if args.stage and name not in args.stage:
                continue
            cpu = task_cpu_seconds(spark)
            seconds = best_of(args.runs, action)
            cpu = (task_cpu_seconds(spark) - cpu) / args.runs
            load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
            result["stages"][name] = {
                "seconds": round(seconds, 2),
                "jvm_cpu_seconds": round(cpu, 2),
                "records_per_s": round(records / seconds),
                "load_average": load,
            }
            print(
                f"{name:12s} {seconds:7.2f} s  JVM CPU {cpu:6.2f} s  {records / seconds:12,.0f} records/s"
                f"  (load {load})",
                flush=True,
            )
    finally:
        spark.stop()
    if profiled:
        result["profile"] = profiled
        for name, step in profiled.items():
            print(f"  {name:56s} {step['seconds']:7.2f} s  JVM CPU {step.get('jvm_cpu_seconds', '-')}")
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
