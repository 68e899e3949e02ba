#!/usr/bin/env bash
# Runs the benchmarks on a dedicated broker (127.0.0.1:39292), never the test devstack's.
# Numbers go to bench/out/ and, by hand with their context, to docs/benchmarks.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" # bench is a package: python -m bench.<module> from the root
export DEVSTACK_DIR=$repo/.devstack/bench KAFKA_PORT=39292 KAFKA_CONTROLLER_PORT=39293 KAFKA_SASL_PORT=39294
"$repo/devstack/kafka.sh" up
.venv/bin/python -m bench.bench_ledger_decode "$@"
.venv/bin/python -m bench.bench_plan --bootstrap 127.0.0.1:$KAFKA_PORT
# The fleet audit on Spark (no broker needed): local[2], then a standalone cluster with 1 and 2 workers.
.venv/bin/python -m bench.bench_spark --out "$repo/bench/out/bench_spark.jsonl"
.venv/bin/python -m bench.bench_spark_equality --out "$repo/bench/out/bench_spark_equality.jsonl"
for workers in 1 2; do
  SPARK_WORKERS=$workers SPARK_MASTER_PORT=37277 DEVSTACK_DIR=$repo/.devstack/bench "$repo/devstack/spark.sh" up
  .venv/bin/python -m bench.bench_spark --skip-core --master spark://127.0.0.1:37277 \
    --out "$repo/bench/out/bench_spark.jsonl"
  DEVSTACK_DIR=$repo/.devstack/bench "$repo/devstack/spark.sh" down
done
