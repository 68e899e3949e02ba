#!/usr/bin/env bash
# A Spark standalone cluster on loopback from pyspark's own distribution (no download):
# one master and SPARK_WORKERS workers (default 2, 1 core each), for `groupwarden audit --master`.
# Usage: devstack/spark.sh up|down|status      (writes $DEVSTACK_DIR/spark.env: SPARK_MASTER_URL)
# Env: SPARK_WORKERS (2), SPARK_WORKER_CORES (1), SPARK_WORKER_MEMORY (2g), SPARK_MASTER_PORT (27077),
# SPARK_MASTER_UI_PORT (master port + 1000; worker i's UI: that + i), SPARK_START_TIMEOUT (60).
# Not started by devstack/up.sh: on demand, in its own DEVSTACK_DIR and ports if need be.
set -euo pipefail
DEVSTACK_NAME=spark
# shellcheck source=lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh" # DEVSTACK_DIR, log/die, servers (pid + start time)
PY=${PYTHON:-$DEVSTACK_REPO/.venv/bin/python}
SDIR=$DEVSTACK_DIR/spark
HOST=127.0.0.1
MASTER_PORT=${SPARK_MASTER_PORT:-27077}
MASTER_UI_PORT=${SPARK_MASTER_UI_PORT:-$((MASTER_PORT + 1000))}
WORKERS=${SPARK_WORKERS:-2}
WORKER_CORES=${SPARK_WORKER_CORES:-1}
WORKER_MEMORY=${SPARK_WORKER_MEMORY:-2g}
START_TIMEOUT=${SPARK_START_TIMEOUT:-60}
MASTER_URL=spark://$HOST:$MASTER_PORT
SPARK_HOME_DIR=$SDIR/home

spark_home() {
    # pyspark's package is a Spark distribution without the RELEASE marker, and without it a
    # worker's launcher looks for a source build ("Cannot find any build directories"). So the
    # cluster gets its own SPARK_HOME: links to pyspark's jars/bin/python plus a RELEASE file.
    local dist part
    dist=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))') || die "no pyspark in $PY (make install)"
    mkdir -p "$SPARK_HOME_DIR"
    for part in jars bin python sbin; do
        [[ -e $dist/$part ]] && ln -sfn "$dist/$part" "$SPARK_HOME_DIR/$part"
    done
    "$PY" -c 'import pyspark; print("Spark", pyspark.__version__, "(linked from pyspark by devstack/spark.sh)")' >"$SPARK_HOME_DIR/RELEASE"
}

# The servers (specs for devstack/lib/common.sh's start_server). Only the master's RPC port is
# claimed: Spark moves a UI (or a worker's RPC port) to the next free port by itself, but a master
# on another port than MASTER_URL would be a cluster nobody finds.
master_cmd() {
    IDENT=org.apache.spark.deploy.master.Master CLAIMS=("port-$MASTER_PORT") KNOBS=SPARK_MASTER_PORT STOP_TIMEOUT=5
    LABEL="spark master"
    CMD=("$JAVA" -Xmx512m -cp "$SPARK_HOME_DIR/jars/*" org.apache.spark.deploy.master.Master
        --host "$HOST" --port "$MASTER_PORT" --webui-port "$MASTER_UI_PORT")
}

worker_cmd() { # worker number
    IDENT=org.apache.spark.deploy.worker.Worker STOP_TIMEOUT=5 LABEL="spark worker-$1"
    CMD=("$JAVA" -Xmx512m -cp "$SPARK_HOME_DIR/jars/*" org.apache.spark.deploy.worker.Worker
        --host "$HOST" --cores "$WORKER_CORES" --memory "$WORKER_MEMORY" --webui-port "$((MASTER_UI_PORT + $1))"
        --work-dir "$SDIR/work-$1" "$MASTER_URL")
}

JAVA=$(command -v java 2>/dev/null || echo java)
# SPARK_HOME: workers launch executors from it (SPARK_SCALA_VERSION: the launcher asks for it even
# for a binary distribution); SPARK_LOCAL_IP keeps everything on loopback.
export SPARK_HOME=$SPARK_HOME_DIR SPARK_SCALA_VERSION=2.13 SPARK_LOCAL_IP=$HOST

logged() { # name pattern: the server runs and its log has the line
    alive_or_die "$SDIR/$1.pid" "spark $1" "$SDIR/$1.log"
    grep -q "$2" "$SDIR/$1.log" 2>/dev/null
}

start() { # name pattern spec [args...]: start, wait until the log says it is ready
    local name=$1 pattern=$2
    shift 2
    [[ -e $SPARK_HOME_DIR/RELEASE ]] || spark_home
    : >"$SDIR/$name.log"
    start_server "$SDIR/$name.pid" "$SDIR/$name.log" "$@"
    wait_until "$START_TIMEOUT" logged "$name" "$pattern" \
        || die "$name not ready after ${START_TIMEOUT}s: $(log_tail "$SDIR/$name.log" 20)"
}

up() {
    need java "run Spark"
    mkdir -p "$SDIR"
    # A failed start leaves nothing running (a half-started cluster would hold its ports).
    trap 'rc=$?; ((rc == 0)) || down' EXIT
    if server_running "$SDIR/master.pid" master_cmd; then
        log "master already running: $MASTER_URL"
    else
        spark_home # pyspark may have moved (make install)
        start master "I have been elected leader" master_cmd
    fi
    local i
    for ((i = 1; i <= WORKERS; i++)); do
        server_running "$SDIR/worker-$i.pid" worker_cmd "$i" && continue
        mkdir -p "$SDIR/work-$i"
        start "worker-$i" "Successfully registered with master" worker_cmd "$i"
    done
    trap - EXIT
    echo "export SPARK_MASTER_URL=$MASTER_URL" >"$DEVSTACK_DIR/spark.env"
    log "ready: $MASTER_URL with $WORKERS worker(s) x $WORKER_CORES core(s) (logs in $SDIR)"
}

workers_recorded() { # the worker numbers that have a pid file
    local f n
    for f in "$SDIR"/worker-*.pid; do
        [[ -e $f ]] || continue
        n=${f##*/worker-}
        echo "${n%.pid}"
    done
}

down() {
    local i
    for i in $(workers_recorded); do server_stop "$SDIR/worker-$i.pid" worker_cmd "$i"; done
    server_stop "$SDIR/master.pid" master_cmd
    rm -f "$DEVSTACK_DIR/spark.env"
    log "stopped"
}

status() {
    local rc=0 i
    server_status master "$SDIR/master.pid" "" "$MASTER_URL" master_cmd || rc=1
    for i in $(workers_recorded); do
        server_status "worker-$i" "$SDIR/worker-$i.pid" "" "" worker_cmd "$i" || rc=1
    done
    return $rc
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
