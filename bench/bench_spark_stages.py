"""Benchmark: where the fleet audit's time goes on Spark, stage by stage (the floor of each route).

Uses the Parquet log `bench/bench_spark.py` generates (run it first). Each stage runs to a `noop`
sink (no collect), twice; the best time counts:
1. read: Parquet -> JVM rows, nothing else;
2. arrow-forward: every record sent to a Python worker, nothing returned (the cost any design
   pays that decodes every record with the core codec in Python);
3. arrow-roundtrip: every record to Python and back (an identity mapInArrow);
4. jvm-compaction: latest record per key in the JVM (`max(offset)` per (partition, key)), keys only;
5. map-compaction: the audit's map side (`precompact`, pyarrow);
6. ledger: the audit's whole distributed replay (`ledger_rows`), no history, to the noop sink;
7. ledger+history: the same with come-back history (the `--what-if` path);
8. collect: the ledger rows collected on the driver and turned into the core's views.

    .venv/bin/python bench/bench_spark_stages.py [--records 10000000] [--groups 200000] [--master local[2]]
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from bench_spark import input_directory, input_parser  # the same inputs as bench/bench_spark.py
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def _forward(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    return iter(())


def _identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield from batches


def best_of(runs: int, action: Callable[[], Any]) -> float:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return min(timings)


def noop(frame: DataFrame) -> Callable[[], None]:
    return lambda: frame.write.format("noop").mode("overwrite").save()


def main() -> None:
    args = input_parser(__doc__).parse_args()
    directory = input_directory(args)
    if not directory.exists():
        raise SystemExit(f"{directory} missing: run bench/bench_spark.py --records {args.records} first")

    from groupwarden.fleet.evaluate import collect_clusters
    from groupwarden.fleet.job import collect_arrow
    from groupwarden.fleet.ledger_job import ledger_rows, precompact
    from groupwarden.fleet.schema import LEDGER_INPUT_SCHEMA, spark_schema
    from groupwarden.fleet.session import start_session
    from groupwarden.fleet.sources import read_exports

    spark, _ = start_session(args.master, kafka_source=False, extra={"spark.driver.memory": "4g"})
    try:
        raw, sources = read_exports(spark, [directory])
        records = raw.count()
        head = F.substring("key", 1, 2)
        slot = F.when(head.isin(F.lit(b"\x00\x00"), F.lit(b"\x00\x01")), F.expr("substring(key, 3)"))
        latest = raw.groupBy("cluster", "partition", slot.otherwise(F.col("key")).alias("slot")).agg(
            F.max("offset").alias("offset")
        )
        stages: dict[str, Callable[[], Any]] = {
            "read": noop(raw),
            "arrow-forward": noop(raw.mapInArrow(_forward, raw.schema)),
            "arrow-roundtrip": noop(raw.mapInArrow(_identity, raw.schema)),
            "jvm-compaction": noop(latest),
            "map-compaction": noop(raw.mapInArrow(precompact(False), spark_schema(LEDGER_INPUT_SCHEMA))),
            "ledger": noop(ledger_rows(raw, keep_history=False)),
            "ledger+history": noop(ledger_rows(raw, keep_history=True)),
            "collect": lambda: collect_clusters(
                collect_arrow(ledger_rows(raw, keep_history=False)).to_pylist(), sources
            ),
        }
        result: dict[str, Any] = {
            "records": records,
            "master": args.master,
            "parallelism": spark.sparkContext.defaultParallelism,
            "input_partitions": raw.rdd.getNumPartitions(),
            "stages": {},
        }
        for name, action in stages.items():
            seconds = best_of(args.runs, action)
            result["stages"][name] = {"seconds": round(seconds, 2), "records_per_s": round(records / seconds)}
            print(f"{name:16s} {seconds:7.2f} s  {records / seconds:12,.0f} records/s", flush=True)
    finally:
        spark.stop()
    print(json.dumps(result, indent=2))
    if args.out:
        with args.out.open("a") as sink:
            sink.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
