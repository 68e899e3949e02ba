#!/usr/bin/env bash
# Runs the benchmarks on a dedicated broker (127.0.0.1:39292), never the test devstack's.
# Numbers go to bench/out/ and, by hand with their context, to docs/benchmarks.md.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export DEVSTACK_DIR=$repo/.devstack/bench KAFKA_PORT=39292 KAFKA_CONTROLLER_PORT=39293 KAFKA_SASL_PORT=39294
"$repo/devstack/kafka.sh" up
"$repo/.venv/bin/python" "$repo/bench/bench_ledger_decode.py" "$@"
"$repo/.venv/bin/python" "$repo/bench/bench_plan.py" --bootstrap 127.0.0.1:$KAFKA_PORT
