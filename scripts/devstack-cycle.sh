#!/usr/bin/env bash
# Startup-reliability proof: N cycles of `devstack/down.sh` + `devstack/up.sh` on a PRIVATE devstack
# instance (own DEVSTACK_DIR and ports, so the shared one keeps running), under CPU load.
# Every `up` must succeed and the stack must then report healthy; any failure is counted, its
# output kept, and the script exits 1. Results: docs/devstack-k8s.md, "Startup reliability".
#
#   flock /tmp/groupwarden-bench.lock scripts/devstack-cycle.sh [-n CYCLES] [-l LOAD_PROCS] [COMPONENT...]
#
# COMPONENT: what up.sh starts (default: its own default set). LOAD_PROCS busy loops (default: 2,
# one per core here) run during the whole loop. The instance is stopped (and its data purged) at the end.
# Env: CYCLE_DIR [<repo>/.devstack/cycle], ports ETCD_PORT [43379], KUBE_APISERVER_PORT [47443],
# KAFKA_PORT [39592] (+1 controller, +2 SASL, +3 pods), node: NODE_PORT_BASE [46250], NODE_BRIDGE [gwcyc0],
# NODE_POD_CIDR [10.244.2.0/24], NODE_NAME [gw-node-cycle], REGISTRY_PORT [35100].
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cycles=10 load=2
while getopts "n:l:" o; do
  case $o in
    n) cycles=$OPTARG ;;
    l) load=$OPTARG ;;
    *) echo "usage: $0 [-n CYCLES] [-l LOAD_PROCS] [COMPONENT...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

export DEVSTACK_DIR=${CYCLE_DIR:-$repo/.devstack/cycle}
export ETCD_PORT=${ETCD_PORT:-43379}
export KUBE_APISERVER_PORT=${KUBE_APISERVER_PORT:-47443}
export KAFKA_PORT=${KAFKA_PORT:-39592}
export KAFKA_CONTROLLER_PORT=${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}
export KAFKA_SASL_PORT=${KAFKA_SASL_PORT:-$((KAFKA_PORT + 2))}
export NODE_PORT_BASE=${NODE_PORT_BASE:-46250} NODE_BRIDGE=${NODE_BRIDGE:-gwcyc0}
export NODE_POD_CIDR=${NODE_POD_CIDR:-10.244.2.0/24} NODE_NAME=${NODE_NAME:-gw-node-cycle} REGISTRY_PORT=${REGISTRY_PORT:-35100}
mkdir -p "$DEVSTACK_DIR"
out=$DEVSTACK_DIR/cycle-logs
rm -rf "$out"; mkdir -p "$out"

load_pids=()
cleanup() {
  local p
  for p in "${load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  "$repo/devstack/down.sh" --purge >"$out/final-down.log" 2>&1 || echo "final down failed; see $out/final-down.log" >&2
}
trap cleanup EXIT
for ((i = 0; i < load; i++)); do
  bash -c 'while :; do :; done' &
  load_pids+=("$!")
done

fail=0 t0=0 t1=0
up_ms=()
echo "devstack-cycle: $cycles cycles, $load busy loops, DEVSTACK_DIR=$DEVSTACK_DIR, components: ${*:-default}"
for ((c = 1; c <= cycles; c++)); do
  "$repo/devstack/down.sh" >"$out/down-$c.log" 2>&1 || { echo "cycle $c: down FAILED (see $out/down-$c.log)"; fail=$((fail + 1)); continue; }
  t0=$(date +%s%3N)
  if "$repo/devstack/up.sh" "$@" >"$out/up-$c.log" 2>&1; then
    t1=$(date +%s%3N)
    up_ms+=($((t1 - t0)))
    if ! "$repo/devstack/status.sh" "$@" >"$out/status-$c.log" 2>&1; then
      echo "cycle $c: up succeeded but status FAILED (see $out/status-$c.log)"; fail=$((fail + 1))
    else
      echo "cycle $c: ok (up $((t1 - t0)) ms)"
    fi
  else
    echo "cycle $c: up FAILED (see $out/up-$c.log):"; tail -n 5 "$out/up-$c.log" | sed 's/^/    /'
    fail=$((fail + 1))
  fi
done
sorted=$(printf '%s\n' "${up_ms[@]}" | sort -n)
n=${#up_ms[@]}
if ((n)); then
  echo "devstack-cycle: $cycles cycles, $fail failures; up time min $(head -1 <<<"$sorted") ms," \
    "median $(sed -n "$(((n + 1) / 2))p" <<<"$sorted") ms, max $(tail -1 <<<"$sorted") ms (load: $load busy loops)"
else
  echo "devstack-cycle: $cycles cycles, $fail failures"
fi
((fail == 0))
