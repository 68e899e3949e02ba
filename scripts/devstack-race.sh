#!/usr/bin/env bash
# The startup failure's real cause, as a test: two devstacks (different DEVSTACK_DIRs, e.g. two
# checkouts) with the SAME ports started at the same time. Before the machine-wide claims, the loser's
# server lost the bind and `up` said "<server> exited during startup" while the winner's server was
# alive and listening on that port. Now exactly one `up` succeeds and the other fails at once naming
# the devstack that holds the port. Results: docs/devstack-k8s.md, "Startup reliability".
#
#   scripts/devstack-race.sh [-n TRIALS]       (k8s component only; ports 44379/48443 by default)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
trials=5
while getopts "n:" o; do case $o in n) trials=$OPTARG ;; *) exit 2 ;; esac; done
export ETCD_PORT=${ETCD_PORT:-44379} KUBE_APISERVER_PORT=${KUBE_APISERVER_PORT:-48443}
base=${RACE_DIR:-$repo/.devstack/race}
mkdir -p "$base"
stop_all() { # [--purge]
  local i
  for i in a b; do DEVSTACK_DIR=$base/$i "$repo/devstack/k8s.sh" down "$@" >/dev/null 2>&1 || true; done
}
purge_all() { stop_all --purge; }
trap purge_all EXIT
bad=0
for ((t = 1; t <= trials; t++)); do
  stop_all
  for i in a b; do
    (DEVSTACK_DIR=$base/$i "$repo/devstack/k8s.sh" up >"$base/$i.out" 2>&1; echo "rc=$?" >>"$base/$i.out") &
  done
  wait
  ok=$(grep -l '^rc=0' "$base"/a.out "$base"/b.out | wc -l || true)
  held=$(grep -l 'is held by a running server of the devstack in' "$base"/a.out "$base"/b.out | wc -l || true)
  misleading=$(grep -l 'exited during startup' "$base"/a.out "$base"/b.out | wc -l || true)
  if ((ok == 1 && held == 1 && misleading == 0)); then
    echo "trial $t: ok (one up succeeded; the other: $(grep -h 'is held by' "$base"/a.out "$base"/b.out | head -1))"
  else
    bad=$((bad + 1))
    echo "trial $t: FAILED (succeeded: $ok, clear refusal: $held, 'exited during startup': $misleading)"
    tail -n 3 "$base"/a.out "$base"/b.out | sed 's/^/    /'
  fi
done
echo "devstack-race: $trials trials, $bad failures"
((bad == 0))
