# shellcheck shell=bash
# Process handling shared by every devstack component: process identity, machine-wide claims,
# ports and waiting. Sourced through devstack/lib/common.sh (what every devstack script sources);
# self-contained, so a script may also source it alone. Returns statuses, never exits.
#
# Why this exists (docs/devstack-k8s.md, "Startup reliability"): the pid files used to be written
# by a shell *before* it exec'd `nohup`, which exec'd the server, and liveness was "kill -0 works
# and /proc/PID/cmdline contains the binary name". While a process is inside execve(2) its
# /proc/PID/cmdline reads back EMPTY (the new mm has no argument area yet), and the chain
# bash -> nohup -> server passes through that window twice right after the pid file appears:
# a check made then declared a live server "exited during startup". Under CPU load the window is
# wide (measured: ~40 % of /proc/PID/cmdline reads during such a chain were empty, see
# scripts/devstack-cycle.sh for the proof loop).
#
# Now:
#   * a process is identified by "PID STARTTIME" (field 22 of /proc/PID/stat, clock ticks since
#     boot): exec(2) does not change it, a recycled pid cannot match it, a zombie is dead;
#   * proc_spawn returns only after the server has exec'd its final binary (/proc/PID/exe is the
#     expected file), so a later cmdline/exe check never sees a half-exec'd process;
#   * the pid written is the one of the process that execs the server ($$ inside it), not `$!` of a
#     wrapper that may fork (setsid forks when it is a process-group leader).

# proc_stat PID: sets PROC_STATE and PROC_START from /proc/PID/stat; fails if there is no such
# process. The comm field may hold spaces and ')' so parse after the LAST ')'.
proc_stat() {
  local s
  [[ $1 =~ ^[0-9]+$ ]] || return 1
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $s ]] || return 1
  s=${s##*) }
  # shellcheck disable=SC2086
  set -- $s
  PROC_STATE=$1
  PROC_START=${20}
}

# proc_alive PID STARTTIME: the very process that was started (not a zombie, not a recycled pid).
proc_alive() {
  proc_stat "$1" || return 1
  [[ $PROC_STATE != Z && $PROC_STATE != X && $PROC_STATE != x ]] || return 1
  [[ -z ${2:-} || $PROC_START == "$2" ]]
}

# proc_live_pid PIDFILE [CMDLINE-FRAGMENT]: print the pid if the process recorded in PIDFILE is
# alive (same start time) and, when a fragment is given, its command line contains it (the
# version/config check; safe because proc_spawn only records a process after its final exec).
# Legacy pid files (a bare pid, from before this file existed) fall back to the fragment check.
proc_live_pid() {
  local pid start cmd
  [[ -s $1 ]] || return 1
  read -r pid start <"$1" 2>/dev/null || [[ -n ${pid:-} ]] || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  proc_alive "$pid" "${start:-}" || return 1
  if [[ -n ${2:-} || -z ${start:-} ]]; then
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 1
    [[ -n ${2:-} && $cmd == *"$2"* ]] || return 1
    if [[ -z ${start:-} ]]; then
      # A legacy pid file of a server that is long past its exec: record its start time now, so
      # the identity checks that follow (no fragment) recognise it.
      printf '%s %s\n' "$pid" "$PROC_START" >"$1.tmp" && mv -f "$1.tmp" "$1"
    fi
  fi
  echo "$pid"
}

# ---- machine-wide claims (ports, bridge names)
# Two devstacks with different DEVSTACK_DIRs (two checkouts: /work/main and a fresh clone, a helper's
# worktree, CI) but the same ports used to race: both passed the "port free?" check, one server lost
# the bind and exited, and its `up` failed with "<server> exited during startup" while the other
# devstack's server was alive and listening on that port. A claim is an flock on
# $DEVSTACK_CLAIMS_DIR/<key>.lock taken before the check and INHERITED by the spawned server, so it
# lasts exactly as long as the server lives (no stale claims) and a second devstack fails at once
# with the holder's name.
DEVSTACK_CLAIMS_DIR=${DEVSTACK_CLAIMS_DIR:-/tmp/groupwarden-devstack-claims}
# The claims this shell holds: their keys and, at the same index, their locked fds (what
# proc_spawn hands on to the server).
PROC_CLAIM_FDS=()
PROC_CLAIM_KEYS=()

# proc_claim_held KEY: this shell already holds KEY.
proc_claim_held() {
  local k
  for k in "${PROC_CLAIM_KEYS[@]}"; do [[ $k == "$1" ]] && return 0; done
  return 1
}

# proc_claim OWNER KEY...: claim every KEY (e.g. port-22379, bridge-gwdev0) that this shell does
# not hold yet, or none of them; adds them to PROC_CLAIM_KEYS / PROC_CLAIM_FDS. On failure prints
# which devstack holds it and returns 1 (the claims held before the call are kept).
proc_claim() {
  local owner=$1 key fd holder held=${#PROC_CLAIM_FDS[@]}
  shift
  mkdir -p "$DEVSTACK_CLAIMS_DIR" && chmod 1777 "$DEVSTACK_CLAIMS_DIR" 2>/dev/null || true
  for key in "$@"; do
    proc_claim_held "$key" && continue
    exec {fd}>>"$DEVSTACK_CLAIMS_DIR/$key.lock"
    if ! flock -n "$fd"; then
      exec {fd}>&-
      holder=$(cat "$DEVSTACK_CLAIMS_DIR/$key.owner" 2>/dev/null) || holder="another devstack"
      proc_release_claims_from "$held"
      echo "$key is held by a running server of the devstack in $holder" >&2
      return 1
    fi
    printf '%s\n' "$owner" >"$DEVSTACK_CLAIMS_DIR/$key.owner"
    PROC_CLAIM_FDS+=("$fd")
    PROC_CLAIM_KEYS+=("$key")
  done
}

# proc_release_claims: close this shell's claim fds (a server spawned with them keeps the claims).
proc_release_claims() { proc_release_claims_from 0; }

# proc_release_claims_from N: close the claims taken after the first N (the ones a caller took
# on top of those it already held).
proc_release_claims_from() {
  local fd
  for fd in "${PROC_CLAIM_FDS[@]:$1}"; do exec {fd}>&-; done
  PROC_CLAIM_FDS=("${PROC_CLAIM_FDS[@]:0:$1}")
  PROC_CLAIM_KEYS=("${PROC_CLAIM_KEYS[@]:0:$1}")
}

# proc_spawn PIDFILE LOGFILE EXPECTED-EXE CMD [ARGS...]: start CMD detached (own session, SIGHUP
# ignored, stdin /dev/null, stdout+stderr appended to LOGFILE, no inherited fds above 2 except
# PROC_CLAIM_FDS, the claims the server keeps for its lifetime), wait
# until it runs EXPECTED-EXE, then write "PID STARTTIME" to PIDFILE atomically. Fails (return 1,
# message on stderr) if the process dies before that or does not get there in PROC_SPAWN_TIMEOUT
# seconds (default 30).
proc_spawn() {
  local pidf=$1 logf=$2 exe=$3 want pid="" deadline i
  shift 3
  want=$(readlink -f -- "$exe") || want=$exe
  rm -f "$pidf" "$pidf.spawn"
  # Close every inherited fd above 2 (lock fds, callers' pipes such as `| sed` or process
  # substitutions): a server holding them would block the next `up` or a caller's pipe.
  # shellcheck disable=SC2016
  GW_KEEP_FDS=" ${PROC_CLAIM_FDS[*]} " setsid bash -c 'for f in /proc/$$/fd/*; do f=${f##*/}
      if (( f > 2 )) && [[ $GW_KEEP_FDS != *" $f "* ]]; then eval "exec $f>&-"; fi; done
    unset GW_KEEP_FDS; echo $$ > "$0" || exit 97; trap "" HUP; exec "$@"' "$pidf.spawn" "$@" \
    </dev/null >>"$logf" 2>&1 &
  deadline=$((SECONDS + ${PROC_SPAWN_TIMEOUT:-30}))
  for ((i = 0; ; i++)); do
    if [[ -z $pid && -s $pidf.spawn ]]; then read -r pid <"$pidf.spawn" || pid=""; fi
    if [[ -n $pid ]]; then
      if ! proc_alive "$pid"; then
        rm -f "$pidf.spawn"
        echo "process $pid ($*) exited during startup" >&2
        return 1
      fi
      if [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == "$want" ]]; then
        proc_stat "$pid" || continue
        printf '%s %s\n' "$pid" "$PROC_START" >"$pidf.tmp"
        mv -f "$pidf.tmp" "$pidf"
        rm -f "$pidf.spawn"
        return 0
      fi
    fi
    if ((SECONDS >= deadline)); then
      echo "process ${pid:-?} ($1) did not exec $want within ${PROC_SPAWN_TIMEOUT:-30}s" >&2
      return 1
    fi
    sleep 0.02
  done
}

# proc_stop PIDFILE [CMDLINE-FRAGMENT] [LABEL] [TIMEOUT-SECONDS]: SIGTERM, wait (SIGKILL after
# TIMEOUT, default 15), wait until gone; removes PIDFILE. Prints what it did on stderr.
proc_stop() {
  local pidf=$1 frag=${2:-} label=${3:-process} timeout=${4:-15} pid start
  if pid=$(proc_live_pid "$pidf" "$frag"); then
    read -r _ start <"$pidf" || start=""
    kill -TERM "$pid" 2>/dev/null || true
    if ! WAIT_INTERVAL=0.1 wait_until "$timeout" proc_gone "$pid" "$start"; then
      echo "$label (pid $pid) ignored SIGTERM for ${timeout}s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
      WAIT_INTERVAL=0.1 wait_until 10 proc_gone "$pid" "$start" || true
    fi
    echo "stopped $label (pid $pid)" >&2
  fi
  rm -f "$pidf" "$pidf.spawn"
}

proc_gone() { ! proc_alive "$@"; }

# ---- ports and waiting
# port_open PORT [HOST]: something accepts connections on HOST (default 127.0.0.1):PORT.
port_open() { (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null; }

# wait_until SECONDS COMMAND [ARGS...]: run COMMAND every WAIT_INTERVAL seconds (default 0.2)
# until it succeeds; returns 1 if SECONDS pass first. The one way devstack scripts wait: what to
# say on a timeout is the caller's, and a check that must fail fast (a server that died while
# starting) dies inside COMMAND (common.sh's alive_or_die).
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep "${WAIT_INTERVAL:-0.2}"
  done
}

port_closed() { ! port_open "$@"; }

# port_free_wait PORT [SECONDS]: wait until nothing listens on 127.0.0.1:PORT (a server that was
# just stopped may still hold it for a moment). Returns 1 if still taken.
port_free_wait() { WAIT_INTERVAL=0.1 wait_until "${2:-10}" port_closed "$1"; }
