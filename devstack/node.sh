#!/usr/bin/env bash
# devstack/node.sh: one real Kubernetes node on this machine, plus the image builder.
#   containerd + runc (Debian) with their own root/state/socket, a pod bridge (Debian CNI plugins),
#   a kubelet of the API server's version (built from the Go module proxy, cached), a dockerd
#   (Debian docker.io) that builds images, an image registry on loopback (Debian docker-registry),
#   the sandbox ("pause") image and a Debian+Python base
#   image made locally (debootstrap: no registry is reachable). Needs devstack/k8s.sh up first.
# Notes, networking and timings: docs/devstack-k8s.md ("The node").
#
#   devstack/node.sh up              install/build what is missing, start everything, wait for Ready
#   devstack/node.sh down [--purge]  stop (pods' containers too); --purge also drops node state
#   devstack/node.sh status          exit 0 if every process runs and the node is Ready
#   devstack/node.sh image [TAG [DIR]] build DIR's Dockerfile (default: this checkout's) into TAG
#                                    (default groupwarden:dev; DIR: e.g. an earlier release's tree) with the
#                                    devstack's Python base and a host-resolved wheelhouse, and load
#                                    it into the node's containerd (what `make image` runs)
#   devstack/node.sh build TAG       the same build without loading it into the node (make release)
#
# Env knobs: DEVSTACK_DIR, GROUPWARDEN_CACHE, KUBE_VERSION [v1.35.4], NODE_NAME [groupwarden-devstack],
#   NODE_POD_CIDR [10.244.0.0/24, must be a /24], NODE_BRIDGE [gwdev0], NODE_PORT_BASE [10250]
#   (kubelet API; +1 kubelet healthz), KUBE_APISERVER_PORT [26443], SERVICE_CIDR [10.0.0.0/24],
#   KAFKA_POD_PORT [KAFKA_PORT+3], REGISTRY_PORT [25000], NODE_READY_TIMEOUT [180] seconds,
#   DEBIAN_SUITE [bookworm].
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DEVSTACK_NAME=node
# shellcheck source=lib/common.sh
. "$SCRIPT_DIR/lib/common.sh" # DEVSTACK_DIR, GROUPWARDEN_CACHE, log/die, servers
# shellcheck source=components.sh
. "$SCRIPT_DIR/components.sh"

KUBE_VERSION="${KUBE_VERSION:-1.35.4}"; KUBE_VERSION="v${KUBE_VERSION#v}"
NODE_NAME="${NODE_NAME:-groupwarden-devstack}"
NODE_BRIDGE="${NODE_BRIDGE:-gwdev0}"
NODE_PORT_BASE="${NODE_PORT_BASE:-10250}"
KUBELET_PORT=$NODE_PORT_BASE
KUBELET_HEALTHZ_PORT=$((NODE_PORT_BASE + 1))
KUBE_APISERVER_PORT="${KUBE_APISERVER_PORT:-26443}"
SERVICE_CIDR="${SERVICE_CIDR:-10.0.0.0/24}"
_svc_net=${SERVICE_CIDR%/*}
KUBERNETES_SERVICE_IP="${_svc_net%.*}.$(( ${_svc_net##*.} + 1 ))"
KAFKA_PORT="${KAFKA_PORT:-29092}"
KAFKA_POD_PORT="${KAFKA_POD_PORT:-$((KAFKA_PORT + 3))}"
NODE_READY_TIMEOUT="${NODE_READY_TIMEOUT:-180}"
REGISTRY_PORT="${REGISTRY_PORT:-25000}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
NFT_TABLE="groupwarden_${NODE_BRIDGE}"

[[ $NODE_POD_CIDR =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/24$ ]] || die "NODE_POD_CIDR must be a /24 (x.y.z.0/24), got $NODE_POD_CIDR"
POD_NET_PREFIX=${BASH_REMATCH[1]}

CACHE_BIN="$GROUPWARDEN_CACHE/bin"
IMAGE_CACHE="$GROUPWARDEN_CACHE/images"
KUBELET_BIN="$CACHE_BIN/kubelet-$KUBE_VERSION"
NODE_DIR="$DEVSTACK_DIR/node"
LOGS="$DEVSTACK_DIR/logs"
K8S_PKI="$DEVSTACK_DIR/k8s/pki"
ADMIN_KUBECONFIG="$DEVSTACK_DIR/kubeconfig"
CTRD_DIR="$NODE_DIR/containerd"
CTRD_SOCK="$CTRD_DIR/containerd.sock"
CTRD_PID="$NODE_DIR/containerd.pid"
DOCKER_DIR="$NODE_DIR/docker"
DOCKER_SOCK="$NODE_DIR/docker.sock"
DOCKERD_PID="$NODE_DIR/dockerd.pid"
KUBELET_DIR="$NODE_DIR/kubelet"
KUBELET_PID="$NODE_DIR/kubelet.pid"
CNI_DIR="$NODE_DIR/cni"
ENV_OUT="$DEVSTACK_DIR/node.env"
PAUSE_IMAGE="localhost/groupwarden-pause:1"
SERVER_URL="https://127.0.0.1:$KUBE_APISERVER_PORT"
APT_PACKAGES=(containerd runc containernetworking-plugins docker.io docker-registry debootstrap nftables)
REGISTRY_DIR="$NODE_DIR/registry"
REGISTRY_PID="$NODE_DIR/registry.pid"
REGISTRY="127.0.0.1:$REGISTRY_PORT"

kubectl_admin() { "$DEVSTACK_DIR/bin/kubectl" --kubeconfig="$ADMIN_KUBECONFIG" --request-timeout=10s "$@"; }
ctr_k8s() { ctr --address "$CTRD_SOCK" --namespace k8s.io "$@"; }
docker_cli() { DOCKER_HOST="unix://$DOCKER_SOCK" /usr/bin/docker "$@"; }

# ---------------------------------------------------------------- prerequisites
ensure_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  [[ $(id -u) == 0 ]] || die "the node needs Debian packages ${missing[*]} (run as root, or install them)"
  log "installing Debian packages: ${missing[*]}"
  if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >"$LOGS/node-apt.log" 2>&1; then
    apt-get -o DPkg::Lock::Timeout=600 update -q >>"$LOGS/node-apt.log" 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}" >>"$LOGS/node-apt.log" 2>&1 \
      || die "apt-get install ${missing[*]} failed; see $LOGS/node-apt.log"
  fi
}

build_kubelet() {
  build_k8s_binary kubelet "$KUBE_VERSION" "$KUBELET_BIN"
  ln -sfn "$KUBELET_BIN" "$DEVSTACK_DIR/bin/kubelet"
}

# The pause binary: a static Go program from devstack/node/pause, cached by its source hash.
PAUSE_BIN=""
build_pause() {
  local h
  h=$(cat "$SCRIPT_DIR/node/pause/main.go" "$SCRIPT_DIR/node/pause/go.mod" | sha256sum | cut -c1-12)
  PAUSE_BIN="$CACHE_BIN/pause-$h"
  [[ -x $PAUSE_BIN ]] && return 0
  find_go "build the pause binary"
  mkdir -p "$CACHE_BIN"
  (cd "$SCRIPT_DIR/node/pause" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$PAUSE_BIN.tmp.$$" .) \
    || die "building the pause binary failed"
  mv -f "$PAUSE_BIN.tmp.$$" "$PAUSE_BIN"
}

# ---------------------------------------------------------------- network
# Pods live on a bridge with NODE_GATEWAY_IP; the servers they need listen on loopback only.
#  * kubernetes Service (KUBERNETES_SERVICE_IP:443, what in-cluster clients use) -> 127.0.0.1:apiserver.
#    kube-proxy cannot do this: the API server's endpoint is 127.0.0.1, and Endpoints/EndpointSlices
#    reject loopback addresses, so the devstack installs the one DNAT kube-proxy would have made.
#  * NODE_GATEWAY_IP:KAFKA_POD_PORT -> 127.0.0.1:KAFKA_POD_PORT (Kafka's POD listener advertises it).
#  * NODE_GATEWAY_IP:kubelet port (the node's InternalIP, used by `kubectl logs`) -> 127.0.0.1 (host only).
#  route_localnet on the bridge lets the kernel route those packets to 127.0.0.1; nothing from the
#  bridge is forwarded anywhere, and nothing for the service or pod range leaves through another
#  interface (reject), so no packet of the node ever leaves the machine.
setup_network() {
  if ! ip link show "$NODE_BRIDGE" >/dev/null 2>&1; then
    ip link add "$NODE_BRIDGE" type bridge || die "cannot create bridge $NODE_BRIDGE"
  fi
  ip addr replace "$NODE_GATEWAY_IP/24" dev "$NODE_BRIDGE"
  ip link set "$NODE_BRIDGE" up
  sysctl -qw "net.ipv4.conf.$NODE_BRIDGE.route_localnet=1"
  nft delete table ip "$NFT_TABLE" 2>/dev/null || true
  nft -f - <<EOF || die "nft rules failed"
table ip $NFT_TABLE {
  chain gw_prerouting {
    type nat hook prerouting priority dstnat; policy accept;
    iifname "$NODE_BRIDGE" ip daddr $KUBERNETES_SERVICE_IP tcp dport 443 dnat to 127.0.0.1:$KUBE_APISERVER_PORT
    iifname "$NODE_BRIDGE" ip daddr $NODE_GATEWAY_IP tcp dport $KAFKA_POD_PORT dnat to 127.0.0.1:$KAFKA_POD_PORT
  }
  chain gw_output_nat {
    type nat hook output priority -100; policy accept;
    ip daddr $KUBERNETES_SERVICE_IP tcp dport 443 dnat to 127.0.0.1:$KUBE_APISERVER_PORT
    ip daddr $NODE_GATEWAY_IP tcp dport $KAFKA_POD_PORT dnat to 127.0.0.1:$KAFKA_POD_PORT
    ip daddr $NODE_GATEWAY_IP tcp dport $KUBELET_PORT dnat to 127.0.0.1:$KUBELET_PORT
  }
  chain gw_forward {
    type filter hook forward priority filter; policy accept;
    iifname "$NODE_BRIDGE" drop
    oifname "$NODE_BRIDGE" drop
  }
  chain gw_output_guard {
    type filter hook output priority filter; policy accept;
    oifname != { "lo", "$NODE_BRIDGE" } ip daddr { $SERVICE_CIDR, $NODE_POD_CIDR } reject
  }
}
EOF
}

teardown_network() {
  nft delete table ip "$NFT_TABLE" 2>/dev/null || true
  local l
  # veths of pods whose sandboxes were not torn down by CNI
  for l in $(ip -o link show master "$NODE_BRIDGE" 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
    ip link del "$l" 2>/dev/null || true
  done
  ip link del "$NODE_BRIDGE" 2>/dev/null || true
}

write_cni_config() {
  mkdir -p "$CNI_DIR/net.d" "$CNI_DIR/ipam"
  cat >"$CNI_DIR/net.d/10-groupwarden.conflist.tmp" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "groupwarden-devstack",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$NODE_BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CNI_DIR/ipam",
        "ranges": [[{"subnet": "$NODE_POD_CIDR", "rangeStart": "$POD_NET_PREFIX.10", "rangeEnd": "$POD_NET_PREFIX.250", "gateway": "$NODE_GATEWAY_IP"}]],
        "routes": [{"dst": "0.0.0.0/0", "gw": "$NODE_GATEWAY_IP"}]
      }
    }
  ]
}
EOF
  mv -f "$CNI_DIR/net.d/10-groupwarden.conflist.tmp" "$CNI_DIR/net.d/10-groupwarden.conflist"
}

# ---------------------------------------------------------------- PKI + RBAC
gen_node_pki() {
  local d="$NODE_DIR/pki"
  [[ -s $K8S_PKI/ca.key ]] || die "no devstack CA in $K8S_PKI: run devstack/k8s.sh up first"
  mkdir -p "$d"; chmod 700 "$d"
  # Reissue when the CA changed (k8s.sh regenerated its PKI).
  if [[ -s $d/kubelet-client.crt ]] && openssl verify -CAfile "$K8S_PKI/ca.crt" "$d/kubelet-client.crt" >/dev/null 2>&1; then
    return 0
  fi
  (
    cd "$d"
    exec >openssl.log 2>&1
    printf '%s\n' "basicConstraints=critical,CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" \
      "extendedKeyUsage=clientAuth" > client.ext
    openssl req -new -newkey rsa:2048 -nodes -keyout kubelet-client.key -out kubelet-client.csr \
      -subj "/O=system:nodes/CN=system:node:$NODE_NAME"
    openssl x509 -req -in kubelet-client.csr -CA "$K8S_PKI/ca.crt" -CAkey "$K8S_PKI/ca.key" -CAcreateserial \
      -CAserial "$d/ca.srl" -sha256 -days 3650 -extfile client.ext -out kubelet-client.crt
    rm -f kubelet-client.csr
  ) || die "openssl failed; see $d/openssl.log"
}

write_kubelet_kubeconfig() {
  local f="$NODE_DIR/kubelet.kubeconfig"
  cat >"$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: groupwarden-devstack
  cluster:
    server: $SERVER_URL
    certificate-authority: $K8S_PKI/ca.crt
users:
- name: kubelet
  user:
    client-certificate: $NODE_DIR/pki/kubelet-client.crt
    client-key: $NODE_DIR/pki/kubelet-client.key
contexts:
- name: kubelet
  context: {cluster: groupwarden-devstack, user: kubelet}
current-context: kubelet
EOF
  chmod 600 "$f.tmp"; mv -f "$f.tmp" "$f"
}

# RBAC the kubeadm way: the node's identity (group system:nodes) gets system:node; the API
# server's kubelet client gets system:kubelet-api-admin (the kubelet authorizes it by webhook).
apply_rbac() {
  kubectl_admin apply -f - >/dev/null <<EOF || die "could not create the node's RBAC bindings"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "groupwarden-devstack:nodes"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "groupwarden-devstack:apiserver-kubelet-client"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kubelet-api-admin"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "kube-apiserver-kubelet-client"}]
EOF
  # The node must never pull from a registry on the internet (none is reachable, and no packet of
  # the devstack leaves the machine): pods may only use images that are already on the node
  # (imagePullPolicy: Never, e.g. `make image`) or the devstack's registry. Other pods are refused
  # at admission (their ReplicaSet reports FailedCreate), as they stayed Pending before the node.
  kubectl_admin apply -f - >/dev/null <<EOF || die "could not create the devstack's image admission policy"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: groupwarden-devstack-local-images}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: ["v1"], operations: ["CREATE", "UPDATE"], resources: ["pods"]}
  validations:
  - expression: >-
      (object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).all(c,
      (has(c.imagePullPolicy) && c.imagePullPolicy == 'Never') || c.image.startsWith('$REGISTRY/'))
    message: >-
      the devstack node reaches no registry on the internet: use imagePullPolicy Never with an
      image loaded by make image, or an image pushed to the devstack registry $REGISTRY
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: groupwarden-devstack-local-images}
spec:
  policyName: groupwarden-devstack-local-images
  validationActions: [Deny]
EOF
}

# ---------------------------------------------------------------- containerd + dockerd
write_containerd_config() {
  mkdir -p "$CTRD_DIR/root" "$CTRD_DIR/state"
  cat >"$CTRD_DIR/config.toml.tmp" <<EOF
# Generated by devstack/node.sh; rewritten on every 'up'.
version = 2
root = "$CTRD_DIR/root"
state = "$CTRD_DIR/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = "$CTRD_SOCK.ttrpc"
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # runc cannot set oom_score_adj below the parent's here (no CAP_SYS_RESOURCE)
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  # The devstack's registry (plain HTTP on loopback): what the users' path (docker push, then
  # helm install --set image.repository=...) pulls from.
  [plugins."io.containerd.grpc.v1.cri".registry.mirrors."$REGISTRY"]
    endpoint = ["http://$REGISTRY"]
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$CNI_DIR/net.d"
EOF
  mv -f "$CTRD_DIR/config.toml.tmp" "$CTRD_DIR/config.toml"
}

# The servers (specs for devstack/lib/common.sh's start_server). A server started from an older
# version of its configuration file (CONF) or with other flags is restarted by `up`.
containerd_cmd() { CONF=$CTRD_DIR/config.toml CMD=(/usr/bin/containerd --config "$CTRD_DIR/config.toml"); }

dockerd_cmd() {
  CMD=(/usr/sbin/dockerd
    --data-root "$DOCKER_DIR/data" --exec-root "$DOCKER_DIR/exec" --pidfile "$DOCKER_DIR/dockerd-own.pid"
    -H "unix://$DOCKER_SOCK" --containerd "$CTRD_SOCK" --containerd-namespace groupwarden-docker
    --containerd-plugins-namespace groupwarden-docker-plugins
    --storage-driver overlay2 --iptables=false --ip6tables=false --bridge=none --ip-forward=false
    --ip-masq=false --userland-proxy=false --log-level warn)
}

registry_cmd() {
  CONF=$REGISTRY_DIR/config.yml CLAIMS=("port-$REGISTRY_PORT") KNOBS=REGISTRY_PORT STOP_TIMEOUT=15
  CMD=(/usr/bin/docker-registry serve "$REGISTRY_DIR/config.yml")
}

write_registry_config() {
  mkdir -p "$REGISTRY_DIR/data"
  cat >"$REGISTRY_DIR/config.yml.tmp" <<EOF
# Generated by devstack/node.sh: an image registry (distribution v2, Debian docker-registry) on loopback.
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $REGISTRY_DIR/data}
  delete: {enabled: true}
http:
  addr: $REGISTRY
EOF
  mv -f "$REGISTRY_DIR/config.yml.tmp" "$REGISTRY_DIR/config.yml"
}

# The kubelet keeps the node's claims (bridge, pod range, its ports), taken by cmd_up before it
# touches the network; containerd and dockerd keep none.
kubelet_cmd() {
  IDENT=/kubelet-v LABEL=kubelet CONF=$NODE_DIR/kubelet-config.yaml CLAIMS=("${NODE_CLAIMS[@]}") KNOBS=$NODE_KNOBS
  CMD=("$KUBELET_BIN"
    --config="$NODE_DIR/kubelet-config.yaml"
    --kubeconfig="$NODE_DIR/kubelet.kubeconfig"
    --root-dir="$KUBELET_DIR"
    --hostname-override="$NODE_NAME"
    --node-ip="$NODE_GATEWAY_IP"
    --v=1)
}

write_kubelet_config() {
  mkdir -p "$KUBELET_DIR" "$NODE_DIR/pod-logs"
  cat >"$NODE_DIR/kubelet-config.yaml.tmp" <<EOF
# Generated by devstack/node.sh; rewritten on every 'up'.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
containerRuntimeEndpoint: unix://$CTRD_SOCK
imageServiceEndpoint: unix://$CTRD_SOCK
podLogsDir: $NODE_DIR/pod-logs
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
enforceNodeAllocatable: []
makeIPTablesUtilChains: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $K8S_PKI/ca.crt}
authorization:
  mode: Webhook
# Images are imported (no registry): never garbage-collect them, never evict for disk pressure.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi"}
serializeImagePulls: false
maxPods: 30
resolvConf: /etc/resolv.conf
EOF
  mv -f "$NODE_DIR/kubelet-config.yaml.tmp" "$NODE_DIR/kubelet-config.yaml"
}

# The node's machine-wide claims (devstack/lib/proc.sh): its bridge (and so its pod range and nft
# table) and the kubelet's ports. Taken before the network is touched, kept by the kubelet.
NODE_CLAIMS=("bridge-$NODE_BRIDGE" "podnet-$POD_NET_PREFIX" "port-$KUBELET_PORT" "port-$KUBELET_HEALTHZ_PORT")
NODE_KNOBS="NODE_BRIDGE / NODE_POD_CIDR / NODE_PORT_BASE"
claim_node() {
  proc_claim "$DEVSTACK_DIR" "${NODE_CLAIMS[@]}" || die "cannot start the node: set $NODE_KNOBS, or stop that devstack"
}

registry_ready() { alive_or_die "$REGISTRY_PID" registry "$LOGS/registry.log"; curl -fsS --max-time 2 "http://$REGISTRY/v2/" >/dev/null 2>&1; }
containerd_ready() { alive_or_die "$CTRD_PID" containerd "$LOGS/containerd.log"; ctr --address "$CTRD_SOCK" version >/dev/null 2>&1; }
dockerd_ready() { alive_or_die "$DOCKERD_PID" dockerd "$LOGS/dockerd.log"; docker_cli version >/dev/null 2>&1; }
node_ready() {
  alive_or_die "$KUBELET_PID" kubelet "$LOGS/kubelet.log"
  [[ $(kubectl_admin get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

# ---------------------------------------------------------------- images
# Sandbox image: FROM scratch + the static pause binary.
ensure_pause_image() {
  ctr_k8s images check "name==$PAUSE_IMAGE" 2>/dev/null | grep -q "$PAUSE_IMAGE" && return 0
  build_pause
  local t
  t=$(mktemp -d "$NODE_DIR/pause.XXXXXX")
  cp "$PAUSE_BIN" "$t/pause"
  tar -C "$t" -cf "$t/rootfs.tar" pause
  docker_cli import --change 'ENTRYPOINT ["/pause"]' "$t/rootfs.tar" "$PAUSE_IMAGE" >/dev/null
  docker_cli save "$PAUSE_IMAGE" | ctr_k8s images import - >/dev/null || die "importing $PAUSE_IMAGE into containerd failed"
  rm -rf "$t"
  log "sandbox image $PAUSE_IMAGE loaded into containerd"
}

# The Debian mirror apt already uses on this machine (read at run time: never written to the repo).
debian_mirror() {
  local m
  m=$(awk -v s="$DEBIAN_SUITE" '
      /^URIs:/ {u=$2} /^Suites:/ {for (i=2;i<=NF;i++) if ($i==s && u!="") {print u; exit}}
    ' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [[ -n $m ]] || m=$(awk -v s="$DEBIAN_SUITE" '$1=="deb" && $0 ~ " "s" " {for (i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
  [[ -n $m ]] || die "no Debian mirror for '$DEBIAN_SUITE' in /etc/apt/sources.list*: set DEBIAN_MIRROR"
  echo "$m"
}

# The Dockerfile's Python minor version (ARG PYTHON_IMAGE=python:3.X-...).
dockerfile_python() {
  sed -n 's/^ARG PYTHON_IMAGE=python:\([0-9]*\.[0-9]*\).*/\1/p' "$BUILD_CONTEXT/Dockerfile" | head -1
}

PYTHON_BASE_IMAGE=""
# A Debian (debootstrap, minbase) root filesystem with python3 + venv, imported into dockerd as
# localhost/groupwarden-python:<minor>-<suite>. The rootfs tarball is cached by suite and package set.
ensure_python_base() {
  local py want_py key tarball t mirror
  want_py=$(dockerfile_python)
  [[ -n $want_py ]] || die "cannot read the Python version from the Dockerfile's ARG PYTHON_IMAGE"
  PYTHON_BASE_IMAGE="localhost/groupwarden-python:$want_py-$DEBIAN_SUITE"
  if docker_cli image inspect "$PYTHON_BASE_IMAGE" >/dev/null 2>&1; then return 0; fi
  key=$(printf '%s\n' "$DEBIAN_SUITE" "python3 python3-venv python-is-python3 ca-certificates" "v1" | sha256sum | cut -c1-12)
  tarball="$IMAGE_CACHE/debian-$DEBIAN_SUITE-python-$key.tar"
  if [[ ! -s $tarball ]]; then
    mkdir -p "$IMAGE_CACHE"
    exec 7>"$IMAGE_CACHE/.lock"
    flock -w 900 7 || die "timed out waiting for $IMAGE_CACHE/.lock"
    if [[ ! -s $tarball ]]; then
      mirror=${DEBIAN_MIRROR:-$(debian_mirror)}
      t=$(mktemp -d "$IMAGE_CACHE/.rootfs.XXXXXX")
      log "debootstrap $DEBIAN_SUITE (minbase + python3) for the Python base image (log: $LOGS/debootstrap.log)"
      local t0; t0=$(now_ms)
      debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
        "$DEBIAN_SUITE" "$t/rootfs" "$mirror" >"$LOGS/debootstrap.log" 2>&1 \
        || { rm -rf "$t"; die "debootstrap failed; see $LOGS/debootstrap.log"; }
      # No mirror URL, apt lists, caches, docs or logs in the image.
      rm -rf "$t/rootfs/var/lib/apt/lists/"* "$t/rootfs/var/cache/apt/"* "$t/rootfs/var/log/"* \
        "$t/rootfs/usr/share/doc/"* "$t/rootfs/usr/share/man/"* "$t/rootfs/usr/share/info/"*
      : >"$t/rootfs/etc/apt/sources.list"
      rm -f "$t/rootfs/etc/apt/sources.list.d/"*
      tar --numeric-owner -C "$t/rootfs" -cf "$t/rootfs.tar" .
      mv -f "$t/rootfs.tar" "$tarball"
      rm -rf "$t"
      log "base rootfs cached in $tarball ($(( ($(now_ms) - t0) / 1000 )) s)"
    fi
    exec 7>&-
  fi
  docker_cli import --change 'CMD ["python3"]' --change 'ENV LANG=C.UTF-8' "$tarball" "$PYTHON_BASE_IMAGE" >/dev/null \
    || die "docker import of $tarball failed"
  py=$(docker_cli run --rm --network none "$PYTHON_BASE_IMAGE" python -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  if [[ $py != "$want_py" ]]; then
    docker_cli rmi "$PYTHON_BASE_IMAGE" >/dev/null 2>&1 || true
    die "Debian $DEBIAN_SUITE has Python $py but the Dockerfile uses $want_py: set DEBIAN_SUITE to a suite with Python $want_py"
  fi
  log "Python base image $PYTHON_BASE_IMAGE (Python $py) ready"
}

# ---------------------------------------------------------------- image build (make image)
# The build container cannot use this machine's TLS setup for PyPI, so the wheels are resolved
# here, on the host, into .wheelhouse/ (the Dockerfile's PIP_OFFLINE=1 installs only from it).
# BUILD_CONTEXT: the source tree built (this checkout, or another release's tree: `image TAG DIR`).
BUILD_CONTEXT=$DEVSTACK_REPO
build_wheelhouse() {
  local py=$1 pip=${PYTHON_FOR_WHEELS:-python3} key stamp WHEELHOUSE="$BUILD_CONTEXT/.wheelhouse"
  key=$(cat "$BUILD_CONTEXT/deploy/docker/constraints.txt" "$BUILD_CONTEXT/pyproject.toml" | sha256sum | cut -c1-12)
  stamp="$WHEELHOUSE/.complete-$py-$key"
  [[ -f $stamp ]] && return 0
  log "resolving wheels for Python $py into $WHEELHOUSE (host pip, constraints deploy/docker/constraints.txt)"
  rm -rf "$WHEELHOUSE"; mkdir -p "$WHEELHOUSE"
  # Runtime dependencies exactly as pinned, for the image's interpreter and platform, wheels only.
  grep -Ev '^\s*(#|$)' "$BUILD_CONTEXT/deploy/docker/constraints.txt" >"$WHEELHOUSE/requirements.txt"
  # The build backend of pyproject.toml (pip builds groupwarden's wheel in the container).
  sed -n '/^\[build-system\]/,/^\[/s/^requires *= *\[\(.*\)\]/\1/p' "$BUILD_CONTEXT/pyproject.toml" \
    | tr ',' '\n' | tr -d ' "' | grep -v '^$' >>"$WHEELHOUSE/requirements.txt"
  "$pip" -m pip download --quiet --dest "$WHEELHOUSE" --only-binary=:all: \
    --python-version "$py" --implementation cp --abi "cp${py/./}" --abi abi3 --abi none \
    --platform manylinux_2_36_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any \
    -r "$WHEELHOUSE/requirements.txt" >"$LOGS/wheelhouse.log" 2>&1 \
    || die "pip download for the wheelhouse failed; see $LOGS/wheelhouse.log"
  rm -f "$WHEELHOUSE/requirements.txt"
  touch "$stamp"
}

# docker save | ctr import, skipped when the node already has this very image (same image id).
load_into_node() {
  local tag=$1 id stamp ref
  id=$(docker_cli image inspect -f '{{.Id}}' "$tag")
  ref=$tag; [[ $ref == */* ]] || ref="docker.io/library/$ref"
  stamp="$NODE_DIR/images/$(printf '%s' "$ref" | tr '/:' '__').id"
  if [[ -f $stamp && $(<"$stamp") == "$id" ]] && ctr_k8s images check "name==$ref" 2>/dev/null | grep -q complete; then
    return 0
  fi
  docker_cli save "$tag" | ctr_k8s images import - >/dev/null || die "importing $tag into the node's containerd failed"
  mkdir -p "$NODE_DIR/images"
  printf '%s\n' "$id" >"$stamp"
}

# The Dockerfile built into TAG with the devstack's offline inputs (Python base, host wheelhouse),
# OCI labels version = the package's __version__ and revision = the git commit.
build_image() {
  local tag=$1 py t0 size version revision
  if ! server_running "$DOCKERD_PID" dockerd_cmd; then
    die "the node's dockerd is not running: make devstack (or devstack/node.sh up) first"
  fi
  ensure_python_base
  py=$(dockerfile_python)
  build_wheelhouse "$py"
  version=$(sed -n 's/^__version__ *= *"\(.*\)"/\1/p' "$BUILD_CONTEXT/operator/groupwarden/__init__.py" | head -1)
  # IMAGE_REVISION: scripts/release.sh passes COMMIT-dirty for a rehearsal on a changed tree.
  revision=${IMAGE_REVISION:-$(git -C "$BUILD_CONTEXT" rev-parse HEAD 2>/dev/null || echo unknown)}
  t0=$(now_ms)
  docker_cli build --network host --pull=false -t "$tag" \
    --build-arg "PYTHON_IMAGE=$PYTHON_BASE_IMAGE" --build-arg PIP_OFFLINE=1 \
    --build-arg "VERSION=${version:-unknown}" --build-arg "REVISION=$revision" \
    "$BUILD_CONTEXT" >"$LOGS/image-build.log" 2>&1 || die "docker build failed; see $LOGS/image-build.log"
  size=$(docker_cli image inspect -f '{{.Size}}' "$tag")
  log "built $tag in $(( ($(now_ms) - t0) / 1000 )) s (image size $((size / 1000000)) MB, version $version, revision $revision)"
}

cmd_image() {
  local tag=${1:-groupwarden:dev} t1
  if [[ -n ${2:-} ]]; then
    [[ -f $2/Dockerfile ]] || die "image $tag $2: no Dockerfile in $2"
    BUILD_CONTEXT=$(cd -- "$2" && pwd -P)
  fi
  if ! server_running "$DOCKERD_PID" dockerd_cmd || ! server_running "$CTRD_PID" containerd_cmd; then
    die "the node is not running: make devstack (or devstack/node.sh up) first"
  fi
  build_image "$tag"
  t1=$(now_ms)
  load_into_node "$tag"
  docker_cli image prune -f >/dev/null 2>&1 || true # untagged images of earlier builds
  log "loaded $tag into the node in $(( ($(now_ms) - t1) / 1000 )) s"
  echo "$tag"
}

# The image only (scripts/release.sh): built into dockerd, not loaded into the node.
cmd_build() {
  local tag=${1:?usage: devstack/node.sh build TAG}
  build_image "$tag"
  echo "$tag"
}

# ---------------------------------------------------------------- up / down / status
write_env() {
  write_file "$ENV_OUT" "$(cat <<EOF
# Written by devstack/node.sh up; source it (devstack/up.sh's env includes it).
export GROUPWARDEN_NODE_NAME="$NODE_NAME"
export GROUPWARDEN_NODE_IP="$NODE_GATEWAY_IP"
# Kafka's POD listener: the address pods (and policies run by the in-cluster operator) use.
export GROUPWARDEN_NODE_KAFKA_BOOTSTRAP="$NODE_GATEWAY_IP:$KAFKA_POD_PORT"
export GROUPWARDEN_CONTAINERD_ADDRESS="$CTRD_SOCK"
export DOCKER_HOST="unix://$DOCKER_SOCK"
# An image registry on loopback (docker push here; the node pulls from it)
export GROUPWARDEN_REGISTRY="$REGISTRY"
EOF
)"
}

all_healthy() {
  server_running "$CTRD_PID" containerd_cmd && server_running "$DOCKERD_PID" dockerd_cmd \
    && server_running "$KUBELET_PID" kubelet_cmd && server_running "$REGISTRY_PID" registry_cmd \
    && [[ -s $ENV_OUT ]] && nft list table ip "$NFT_TABLE" >/dev/null 2>&1 && node_ready 2>/dev/null
}

cmd_up() {
  local t0
  t0=$(now_ms)
  [[ -s $ADMIN_KUBECONFIG && -x $DEVSTACK_DIR/bin/kubectl ]] || die "no API server: run devstack/k8s.sh up first"
  mkdir -p "$NODE_DIR" "$LOGS" "$DEVSTACK_DIR/bin"
  exec 9>"$NODE_DIR/up.lock"
  flock -w 900 9 || die "timed out waiting for another node.sh holding $NODE_DIR/up.lock"
  # Inputs first: a changed script rewrites configs, and a changed command line restarts that server.
  write_containerd_config
  write_kubelet_config
  write_registry_config
  apply_rbac
  if all_healthy; then
    log "already running (node $NODE_NAME Ready)"
    write_env
    return 0
  fi
  proc_live_pid "$KUBELET_PID" >/dev/null || claim_node
  ensure_packages
  build_kubelet
  ln -sfn /usr/bin/docker "$DEVSTACK_DIR/bin/docker"
  ln -sfn /usr/bin/ctr "$DEVSTACK_DIR/bin/ctr"
  setup_network
  write_cni_config
  gen_node_pki
  write_kubelet_kubeconfig
  start_server "$CTRD_PID" "$LOGS/containerd.log" containerd_cmd
  wait_until 60 containerd_ready || die "containerd not answering on $CTRD_SOCK after 60s; see $LOGS/containerd.log"
  mkdir -p "$DOCKER_DIR"
  start_server "$DOCKERD_PID" "$LOGS/dockerd.log" dockerd_cmd
  wait_until 60 dockerd_ready || die "dockerd not answering on $DOCKER_SOCK after 60s; see $LOGS/dockerd.log"
  ensure_pause_image
  start_server "$REGISTRY_PID" "$LOGS/registry.log" registry_cmd
  wait_until 30 registry_ready || die "registry not answering on $REGISTRY after 30s; see $LOGS/registry.log"
  start_server "$KUBELET_PID" "$LOGS/kubelet.log" kubelet_cmd
  proc_release_claims
  wait_until "$NODE_READY_TIMEOUT" node_ready \
    || die "node $NODE_NAME not Ready after ${NODE_READY_TIMEOUT}s; see $LOGS/kubelet.log"
  write_env
  log "up in $(( $(now_ms) - t0 )) ms: node $NODE_NAME Ready (InternalIP $NODE_GATEWAY_IP, pods $NODE_POD_CIDR), containerd $CTRD_SOCK, dockerd $DOCKER_SOCK"
}

# Kill the pods' containers (their shims outlive containerd), unmount what the kubelet and
# containerd mounted under NODE_DIR.
stop_workloads() {
  local id
  if proc_live_pid "$CTRD_PID" >/dev/null; then
    for id in $(ctr_k8s tasks list -q 2>/dev/null); do
      ctr_k8s tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    for id in $(ctr_k8s tasks list -q 2>/dev/null); do
      ctr_k8s tasks delete -f "$id" >/dev/null 2>&1 || true
    done
  fi
}

unmount_under_node_dir() {
  local m
  [[ -d $NODE_DIR ]] || return 0
  findmnt -rn -o TARGET | { grep -F "$NODE_DIR/" || true; } | sort -r | while read -r m; do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
  done
}

cmd_down() {
  local purge=0
  [[ ${1:-} == --purge ]] && purge=1
  mkdir -p "$NODE_DIR"
  exec 9>"$NODE_DIR/up.lock"
  flock -w 900 9 || die "timed out waiting for another node.sh holding $NODE_DIR/up.lock"
  server_stop "$KUBELET_PID" kubelet_cmd
  stop_workloads
  server_stop "$DOCKERD_PID" dockerd_cmd
  server_stop "$REGISTRY_PID" registry_cmd
  server_stop "$CTRD_PID" containerd_cmd
  unmount_under_node_dir
  teardown_network
  if ((purge)); then
    if [[ -s $ADMIN_KUBECONFIG ]]; then
      kubectl_admin delete node "$NODE_NAME" --ignore-not-found >/dev/null 2>&1 || true
    fi
    rm -rf "$NODE_DIR" "$ENV_OUT"
    log "purged $NODE_DIR"
  fi
}

cmd_status() {
  local rc=0
  server_status containerd "$CTRD_PID" "" "" containerd_cmd || rc=1
  server_status dockerd "$DOCKERD_PID" "" "" dockerd_cmd || rc=1
  server_status registry "$REGISTRY_PID" "" "" registry_cmd || rc=1
  server_status kubelet "$KUBELET_PID" "" "" kubelet_cmd || rc=1
  if ((rc == 0)) && node_ready 2>/dev/null; then echo "node $NODE_NAME: Ready"; else echo "node $NODE_NAME: not Ready"; rc=1; fi
  return $rc
}

case "${1:-}" in
  up) cmd_up ;;
  down) shift; cmd_down "$@" ;;
  status) cmd_status ;;
  image) shift; cmd_image "$@" ;;
  build) shift; cmd_build "$@" ;;
  *) echo "usage: $0 up|down [--purge]|status|image [TAG [SOURCE_DIR]]|build TAG" >&2; exit 2 ;;
esac
