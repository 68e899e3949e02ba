#!/usr/bin/env bash
# A Spark standalone cluster on loopback from pyspark's own distribution (no download):
# one master and SPARK_WORKERS workers (default 2, 1 core each), for `groupwarden audit --master`.
# Usage: devstack/spark.sh up|down|status      (writes $DEVSTACK_DIR/spark.env: SPARK_MASTER_URL)
# Env: SPARK_WORKERS (2), SPARK_WORKER_CORES (1), SPARK_WORKER_MEMORY (2g), SPARK_MASTER_PORT (37077).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
DEVSTACK_DIR=${DEVSTACK_DIR:-$repo/.devstack}
PY=${PYTHON:-$repo/.venv/bin/python}
SDIR=$DEVSTACK_DIR/spark
HOST=127.0.0.1
MASTER_PORT=${SPARK_MASTER_PORT:-37077}
MASTER_UI_PORT=${SPARK_MASTER_UI_PORT:-$((MASTER_PORT + 1000))}
WORKERS=${SPARK_WORKERS:-2}
WORKER_CORES=${SPARK_WORKER_CORES:-1}
WORKER_MEMORY=${SPARK_WORKER_MEMORY:-2g}
START_TIMEOUT=${SPARK_START_TIMEOUT:-60}
MASTER_URL=spark://$HOST:$MASTER_PORT

say() { echo "spark: $*" >&2; }

spark_home() {
    # pyspark's package is a Spark distribution without the RELEASE marker, and without it a
    # worker's launcher looks for a source build ("Cannot find any build directories"). So the
    # cluster gets its own SPARK_HOME: links to pyspark's jars/bin/python plus a RELEASE file.
    local dist home=$SDIR/home
    dist=$("$PY" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')
    mkdir -p "$home"
    for part in jars bin python sbin; do
        [[ -e $dist/$part ]] && ln -sfn "$dist/$part" "$home/$part"
    done
    "$PY" -c 'import pyspark; print("Spark", pyspark.__version__, "(linked from pyspark by devstack/spark.sh)")' >"$home/RELEASE"
    echo "$home"
}

running() { # pid file -> true while that process exists
    # What startup waits on, not `alive`: right after `start`, the pid may still be the forked
    # shell that has not yet exec'd java (its cmdline is this script's).
    local pid
    [[ -f $1 ]] && pid=$(<"$1") && [[ $pid =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null
}

alive() { # pid file -> pid, if that process is alive and ours (a stale pid file may name another)
    running "$1" || return 1
    local pid; pid=$(<"$1")
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'org.apache.spark.deploy' || return 1
    echo "$pid"
}

start() { # name class args...
    local name=$1; shift
    local home; home=$(spark_home)
    # SPARK_HOME: workers launch executors from it (SPARK_SCALA_VERSION: the launcher asks for it even
    # for a binary distribution); SPARK_LOCAL_IP keeps everything on loopback.
    SPARK_HOME=$home SPARK_SCALA_VERSION=2.13 SPARK_LOCAL_IP=$HOST setsid nohup java -Xmx512m -cp "$home/jars/*" "$@" \
        >"$SDIR/$name.log" 2>&1 </dev/null &
    echo $! >"$SDIR/$name.pid"
}

wait_log() { # name pattern
    local deadline=$((SECONDS + START_TIMEOUT))
    until grep -q "$2" "$SDIR/$1.log" 2>/dev/null; do
        if ! running "$SDIR/$1.pid"; then
            say "$1 exited during startup:"; tail -20 "$SDIR/$1.log" >&2; return 1
        fi
        ((SECONDS < deadline)) || { say "$1 not ready after ${START_TIMEOUT}s"; tail -20 "$SDIR/$1.log" >&2; return 1; }
        sleep 0.3
    done
}

up() {
    mkdir -p "$SDIR"
    if alive "$SDIR/master.pid" >/dev/null; then
        say "master already running: $MASTER_URL"
    else
        start master org.apache.spark.deploy.master.Master --host "$HOST" --port "$MASTER_PORT" \
            --webui-port "$MASTER_UI_PORT"
        wait_log master "I have been elected leader" || { down; return 1; }
    fi
    for i in $(seq 1 "$WORKERS"); do
        if alive "$SDIR/worker-$i.pid" >/dev/null; then continue; fi
        mkdir -p "$SDIR/work-$i"
        start "worker-$i" org.apache.spark.deploy.worker.Worker --host "$HOST" --cores "$WORKER_CORES" \
            --memory "$WORKER_MEMORY" --webui-port "$((MASTER_UI_PORT + i))" --work-dir "$SDIR/work-$i" "$MASTER_URL"
        # A failed start leaves nothing running (a half-started cluster would hold its ports)
        wait_log "worker-$i" "Successfully registered with master" || { down; return 1; }
    done
    echo "export SPARK_MASTER_URL=$MASTER_URL" >"$DEVSTACK_DIR/spark.env"
    say "ready: $MASTER_URL with $WORKERS worker(s) x $WORKER_CORES core(s) (logs in $SDIR)"
}

down() {
    local file pid
    for file in "$SDIR"/worker-*.pid "$SDIR"/master.pid; do
        [[ -e $file ]] || continue
        if pid=$(alive "$file"); then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
        fi
        rm -f "$file"
    done
    rm -f "$DEVSTACK_DIR/spark.env"
    say "stopped"
}

status() {
    local file
    for file in "$SDIR"/master.pid "$SDIR"/worker-*.pid; do
        [[ -e $file ]] || continue
        if pid=$(alive "$file"); then echo "$(basename "$file" .pid): running (pid $pid)"; else echo "$(basename "$file" .pid): stopped"; fi
    done
}

case ${1:-} in
    up) up ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
