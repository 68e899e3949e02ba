"""Benchmark: issue 12's feasibility measurement, reproduced, next to the audit's own compaction.

The issue measured, before it was filed: 10M OffsetCommit v3 records in one Parquet file (2M
distinct keys, 200k groups) decoded in Spark SQL (`conv(hex(substring(...)))` reads of the value's
offset, metadata length and commit time), compacted with `groupBy(key)` + `max_by(..., offset)`
and rolled up per group: 8.3 s cold, 5.9 s warm on local[2]. This bench builds that input
(vectorised, seconds), runs that query, and runs `pipeline.compacted_commits` on the same input,
so the two costs are compared on the same data, machine and load. `--order` says how the keys are
spread over the file: `random` (each key recurs anywhere) or `log` (like bench_spark.py's
synthetic log: a key's commits are far apart, so an input split holds few repeats).

    .venv/bin/python bench/bench_spark_feasibility.py [--records 10000000] [--keys 2000000]
        [--groups 200000] [--order random|log] [--runs 2] [--conf k=v ...]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from bench_spark_stages import task_cpu_seconds  # the same JVM CPU reading as the stage bench

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "groupwarden" / "bench-feasibility"


def _be(values: np.ndarray, dtype: str) -> np.ndarray:
    return values.astype(dtype).byteswap().view(np.uint8).reshape(len(values), -1)


def generate(path: Path, records: int, keys: int, groups: int, order: str, seed: int = 12) -> None:
    rng = np.random.default_rng(seed)
    per_group = keys // groups
    # key -> (group, topic, partition): each group commits `per_group` partitions of one topic
    group_of_key = np.arange(keys) // per_group
    tp_of_key = (np.arange(keys) % per_group).astype(np.int32)
    if order == "random":
        key_ids = rng.integers(0, keys, records)
    else:  # log order: every key once per round, rounds in sequence (a key's records far apart)
        rounds = -(-records // keys)
        key_ids = np.concatenate([rng.permutation(keys) for _ in range(rounds)])[:records]
    group_names = [f"app-{g % 311}-consumer-group-{g}".encode() for g in range(groups)]
    topic_names = [f"team-{g % 97}.service-{g}.events".encode() for g in range(groups)]
    key_bytes = []
    for k in range(keys):
        g = int(group_of_key[k])
        group, topic = group_names[g], topic_names[g]
        key_bytes.append(
            b"\x00\x01" + len(group).to_bytes(2, "big") + group + len(topic).to_bytes(2, "big") + topic
            + int(tp_of_key[k]).to_bytes(4, "big")
        )  # fmt: skip
    key_table = pa.array(key_bytes, pa.binary())
    key_column = key_table.take(pa.array(key_ids))
    offsets = np.arange(records, dtype=np.int64)
    committed = rng.integers(0, 1 << 40, records, dtype=np.int64)
    commit_ms = 1_700_000_000_000 + offsets * 3
    value = np.concatenate(
        [
            np.tile(np.array([0, 3], np.uint8), (records, 1)),
            _be(committed, ">i8").view(np.uint8),
            _be(np.full(records, -1, np.int32), ">i4").view(np.uint8),
            np.zeros((records, 2), np.uint8),  # metadata: empty
            _be(commit_ms, ">i8").view(np.uint8),
        ],
        axis=1,
    )
    buffers = [None, pa.py_buffer(value.tobytes())]
    values = pa.FixedSizeBinaryArray.from_buffers(pa.binary(24), records, buffers)
    table = pa.table(
        {
            "cluster": pa.array(["bench"] * records, pa.string()),
            "partition": pa.array(np.zeros(records, np.int32)),
            "offset": pa.array(offsets),
            "timestamp": pa.array(commit_ms),
            "key": key_column,
            "value": values.cast(pa.binary()),
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def main() -> None:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--groups", type=int, default=200_000)
    parser.add_argument("--order", choices=("random", "log"), default="random")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--query", action="append", help="feasibility, audit (default: both)")
    parser.add_argument("--conf", action="append", default=[], help="extra Spark setting k=v")
    args = parser.parse_args()
    path = CACHE / f"v3-{args.records}-{args.keys}-{args.groups}-{args.order}.parquet"
    if not path.exists():
        started = time.perf_counter()
        generate(path, args.records, args.keys, args.groups, args.order)
        print(f"generated {path} in {time.perf_counter() - started:.1f} s ({path.stat().st_size >> 20} MiB)")

    from pyspark.sql import functions as F

    from groupwarden.fleet.pipeline import compacted_commits
    from groupwarden.fleet.session import start_session

    conf = dict(pair.split("=", 1) for pair in args.conf)
    spark, _ = start_session(args.master, kafka_source=False, extra=conf)
    raw = spark.read.parquet(str(path))

    def feasibility() -> Any:
        decoded = raw.select(
            F.expr("substring(key, 3)").alias("k"),
            F.expr("cast(conv(hex(substring(value, 3, 8)), 16, -10) as bigint)").alias("v_offset"),
            F.expr("cast(conv(hex(substring(value, 15, 2)), 16, 10) as int)").alias("meta_len"),
            F.expr("cast(conv(hex(substring(value, 17, 8)), 16, -10) as bigint)").alias("commit"),
            "offset",
        )
        latest = decoded.groupBy("k").agg(
            F.max_by("v_offset", "offset").alias("v_offset"),
            F.max_by("meta_len", "offset").alias("meta_len"),
            F.max_by("commit", "offset").alias("commit"),
        )
        group = F.expr("substring(k, 3, cast(conv(hex(substring(k, 1, 2)), 16, 10) as int))")
        return latest.groupBy(group.alias("g")).agg(F.count(F.lit(1)), F.max("commit"))

    def audit() -> Any:
        return compacted_commits(raw)

    queries = {"feasibility": feasibility, "audit": audit}
    for name in args.query or list(queries):
        for run in range(args.runs):
            cpu0, started = task_cpu_seconds(spark), time.perf_counter()
            queries[name]().write.format("noop").mode("overwrite").save()
            wall, cpu = time.perf_counter() - started, task_cpu_seconds(spark) - cpu0
            load = os.getloadavg()[0]
            print(f"{name} run {run + 1}: {wall:.1f} s wall, {cpu:.1f} JVM CPU-s, load {load:.1f}")
    spark.stop()


if __name__ == "__main__":
    main()
