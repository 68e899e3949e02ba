# shellcheck shell=bash
# The devstack's shell library: every devstack script (up.sh, status.sh, down.sh and each
# component: kafka.sh, k8s.sh, node.sh, spark.sh, toxiproxy.sh, prometheus.sh) sets DEVSTACK_NAME (the name its
# messages carry) and sources this file. It brings proc.sh (process identity, machine-wide claims,
# ports, wait_until) and adds:
#   - the state and cache directories (DEVSTACK_DIR, GROUPWARDEN_CACHE) and the repository root;
#   - messages: log, die, need;
#   - Go: find_go, build_k8s_binary (one build per cache at a time);
#   - servers described by a spec function: server_running, server_stop, start_server,
#     alive_or_die (how a wait fails fast when the server died).

_devstack_lib=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
DEVSTACK_REPO=$(cd -- "$_devstack_lib/../.." && pwd -P)
# shellcheck source=proc.sh
. "$_devstack_lib/proc.sh"
: "${DEVSTACK_NAME:?set DEVSTACK_NAME before sourcing devstack/lib/common.sh}"

# ---- messages
log() { printf 'devstack: %s: %s\n' "$DEVSTACK_NAME" "$*" >&2; }
die() { printf 'devstack: %s: ERROR: %s\n' "$DEVSTACK_NAME" "$*" >&2; exit 1; }
# need TOOL WHAT-FOR: TOOL is on PATH, or die saying what it is needed for.
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH (needed to $2)"; }
now_ms() { date +%s%3N; }
# log_tail FILE [LINES]: the last lines of a log on one line, for an error message.
log_tail() { tail -n "${2:-3}" "$1" 2>/dev/null | tr '\n' ' ' | cut -c1-600; }

# ---- directories
# abspath PATH: absolute, without requiring it to exist (symlinks kept).
abspath() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
# The state directory, with symlinks resolved: the servers' command lines hold paths under it, so a
# worktree whose .devstack is a symlink to another checkout's state names the same servers (and
# finds them running) instead of taking them for servers started with other flags.
DEVSTACK_DIR=$(readlink -m -- "${DEVSTACK_DIR:-$DEVSTACK_REPO/.devstack}")
GROUPWARDEN_CACHE=$(abspath "${GROUPWARDEN_CACHE:-$HOME/.cache/groupwarden}")

# write_file PATH CONTENT: write CONTENT and a newline to PATH atomically (a reader never sees half
# a file), and only if it changed (an idempotent `up` rewrites nothing).
write_file() {
  local path=$1 content=$2
  if [[ -f $path ]] && [[ $(<"$path") == "$content" ]]; then return 0; fi
  printf '%s\n' "$content" >"$path.tmp.$$"
  mv -f "$path.tmp.$$" "$path"
}

# ---- Go builds
# find_go WHAT-FOR: put `go` on PATH (PATH first, else /usr/local/go/bin) or die.
find_go() {
  command -v go >/dev/null 2>&1 && return 0
  [[ -x /usr/local/go/bin/go ]] || die "'go' not found on PATH or in /usr/local/go/bin (needed to $1)"
  export PATH="/usr/local/go/bin:$PATH"
}

# build_k8s_binary NAME VERSION OUT: build a Kubernetes component or etcd from the Go module proxy
# (devstack/k8s/build.sh) into OUT, unless it exists. One builder per cache at a time: another
# devstack may share the cache, and a cold build takes minutes.
build_k8s_binary() {
  local name=$1 ver=$2 out=$3 logf="$DEVSTACK_DIR/logs/build-$1-$2.log" t0 lock
  [[ -x $out ]] && return 0
  find_go "build $name"
  mkdir -p "$DEVSTACK_DIR/logs" "$(dirname "$out")" "$GROUPWARDEN_CACHE/build"
  exec {lock}>"$GROUPWARDEN_CACHE/build/.lock"
  flock -w 1800 "$lock" || die "timed out waiting for another build holding $GROUPWARDEN_CACHE/build/.lock"
  if [[ ! -x $out ]]; then
    log "building $name $ver (cold build takes minutes; log: $logf)"
    t0=$(now_ms)
    "$DEVSTACK_REPO/devstack/k8s/build.sh" "$name" "$ver" "$out" "$GROUPWARDEN_CACHE/build/$name-$ver" >"$logf" 2>&1 \
      || { exec {lock}>&-; die "building $name $ver failed; see $logf"; }
    log "built $name $ver in $(( ($(now_ms) - t0) / 1000 )) s -> $out"
  fi
  exec {lock}>&-
}

# ---- servers
# A server is described by a spec function, called with start_server's extra arguments. It sets:
#   CMD           the exact command line (CMD[0]: the binary the server execs, what proc_spawn waits for)
#   MATCH         what the running server's command line must contain to be this very server
#                 (default: all of CMD, so new flags or a new version mean a restart)
#   IDENT         what makes a process in the pid file a server of this kind, any version or flags
#                 (default: CMD[0]); such a server is stopped before another one is started
#   CONF          optional: the configuration file it reads; a server started from an older
#                 version of it is restarted (a copy is kept as $CONF.running)
#   CLAIMS        machine-wide claims it keeps for its lifetime (port-N, bridge-NAME: proc.sh);
#                 every claimed port must also be free of other processes
#   KNOBS         the variables a user sets to avoid a clash (for the error messages)
#   STOP_TIMEOUT  seconds between SIGTERM and SIGKILL (default 30)
#   LABEL         its name in messages (default: the binary's name)

# server_running PIDFILE SPEC [ARGS...]: the recorded process is alive and is exactly that server.
server_running() {
  local pidf=$1 spec=$2 CMD=() MATCH="" IDENT="" CONF="" CLAIMS=() KNOBS="" STOP_TIMEOUT=30 LABEL=""
  shift 2
  "$spec" "$@"
  proc_live_pid "$pidf" "${MATCH:-${CMD[*]}}" >/dev/null || return 1
  [[ -z $CONF ]] || cmp -s "$CONF" "$CONF.running"
}

# server_pid PIDFILE SPEC [ARGS...]: print the pid of the recorded server of that kind (any
# version or flags) if it runs.
server_pid() {
  local pidf=$1 spec=$2 CMD=() MATCH="" IDENT="" CONF="" CLAIMS=() KNOBS="" STOP_TIMEOUT=30 LABEL=""
  shift 2
  "$spec" "$@"
  proc_live_pid "$pidf" "${IDENT:-${CMD[0]}}"
}

# server_status LABEL PIDFILE HEALTH-CHECK DETAILS SPEC [ARGS...]: print one status line; returns
# 0 if the server runs and HEALTH-CHECK (a command, may be "") passes. A server of that kind
# started with other flags or configuration is reported as such (the next `up` restarts it).
server_status() {
  local label=$1 pidf=$2 health=$3 details=${4:+, $4} pid
  shift 4
  if ! pid=$(server_pid "$pidf" "$@"); then
    echo "$label: stopped"
    return 1
  fi
  if [[ -n $health ]] && ! "$health"; then
    echo "$label: running (pid $pid) but not healthy"
    return 1
  fi
  if server_running "$pidf" "$@"; then
    echo "$label: running (pid $pid$details)"
  else
    echo "$label: running (pid $pid$details) with an older version, flags or configuration: the next up restarts it"
  fi
}

# server_stop PIDFILE SPEC [ARGS...]: stop the recorded server of that kind, if it runs.
server_stop() {
  local pidf=$1 spec=$2 CMD=() MATCH="" IDENT="" CONF="" CLAIMS=() KNOBS="" STOP_TIMEOUT=30 LABEL=""
  shift 2
  "$spec" "$@"
  proc_stop "$pidf" "${IDENT:-${CMD[0]}}" "${LABEL:-${CMD[0]##*/}}" "$STOP_TIMEOUT"
}

# start_server PIDFILE LOGFILE SPEC [ARGS...]: nothing if that very server runs; otherwise stop a
# server of that kind started with other flags or configuration, take the claims, check that no
# other process listens on the claimed ports, spawn it (stdout+stderr appended to LOGFILE) and
# return once it runs its binary. Dies with the log's last lines when it cannot start. Waiting for
# it to be ready is the caller's (wait_until with a check that starts with alive_or_die).
# The server inherits exactly its own claims: those this shell already holds for it (node.sh
# claims the node's bridge before it touches the network) and those taken here, never others.
start_server() {
  local pidf=$1 logf=$2 spec=$3 CMD=() MATCH="" IDENT="" CONF="" CLAIMS=() KNOBS="" STOP_TIMEOUT=30 LABEL=""
  shift 3
  "$spec" "$@"
  if proc_live_pid "$pidf" "${MATCH:-${CMD[*]}}" >/dev/null && { [[ -z $CONF ]] || cmp -s "$CONF" "$CONF.running"; }; then
    return 0
  fi
  local name=${LABEL:-${CMD[0]##*/}}
  if proc_live_pid "$pidf" "${IDENT:-${CMD[0]}}" >/dev/null; then
    log "restarting $name (version, flags or configuration changed)"
    proc_stop "$pidf" "${IDENT:-${CMD[0]}}" "$name" "$STOP_TIMEOUT"
  fi
  local keys=() fds=() i key
  for i in "${!PROC_CLAIM_KEYS[@]}"; do
    for key in "${CLAIMS[@]}"; do
      if [[ ${PROC_CLAIM_KEYS[i]} == "$key" ]]; then
        keys+=("$key")
        fds+=("${PROC_CLAIM_FDS[i]}")
      fi
    done
  done
  local PROC_CLAIM_KEYS=("${keys[@]}") PROC_CLAIM_FDS=("${fds[@]}") held=${#keys[@]}
  # Machine-wide claims first: another devstack's server on these ports fails here, by name,
  # instead of racing for the bind.
  proc_claim "$DEVSTACK_DIR" "${CLAIMS[@]}" || die "cannot start $name: set ${KNOBS:-its ports}, or stop that devstack"
  for key in "${CLAIMS[@]}"; do
    if [[ $key == port-* ]] && port_open "${key#port-}"; then
      proc_release_claims_from "$held"
      die "port ${key#port-} is in use by a process not started by a devstack (set ${KNOBS:-its ports})"
    fi
  done
  if ! proc_spawn "$pidf" "$logf" "${CMD[0]}" "${CMD[@]}"; then
    proc_release_claims_from "$held"
    die "could not start $name: $(log_tail "$logf" 5)"
  fi
  proc_release_claims_from "$held"
  [[ -z $CONF ]] || cp -f "$CONF" "$CONF.running"
}

# alive_or_die PIDFILE LABEL LOGFILE: the process spawn recorded still runs (identity only: pid +
# start time), or die with the log's last lines. Used first in a wait's check, so a server that
# exited while starting fails the wait at once instead of at its timeout.
alive_or_die() {
  proc_live_pid "$1" >/dev/null || die "$2 exited during startup; see $3 (last lines: $(log_tail "$3"))"
}
