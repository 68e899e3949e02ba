#!/usr/bin/env bash
# devstack/prometheus.sh: Prometheus and promtool from Debian's `prometheus` package, on demand.
#
#   devstack/prometheus.sh fetch                 download + unpack the package (once, cached)
#   devstack/prometheus.sh promtool              print promtool's path (fetches first if needed)
#   devstack/prometheus.sh path                  print prometheus's path (fetches first if needed)
#   devstack/prometheus.sh up DIR CONFIG PORT    start a server: data, pid and log in DIR, its
#                                                config file CONFIG, listening on 127.0.0.1:PORT
#   devstack/prometheus.sh down DIR              stop the server started with DIR
#   devstack/prometheus.sh crds                  print the directory holding the pinned Prometheus
#                                                Operator release's monitoring.coreos.com CRDs
#
# The package is fetched with `apt-get download` and unpacked with `dpkg-deb -x` into
# $GROUPWARDEN_CACHE/prometheus/<version>: installing it would start a system service on :9090
# (a port nobody here may take). Its binaries are static Go programs, so they run from there.
# Nothing runs unless asked: `make lint` uses promtool, the alerting e2e test starts its own
# server on a free loopback port with its own directory (never a shared port).
set -euo pipefail

DEVSTACK_NAME=prometheus
# shellcheck source=lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh" # GROUPWARDEN_CACHE, log/die/need, find_go, wait_until

PKG_DIR=$GROUPWARDEN_CACHE/prometheus
CURRENT=$PKG_DIR/current
# The Prometheus Operator release whose CRDs (PrometheusRule, ServiceMonitor, ...) the chart's
# templates are validated against; its Go module carries them under example/prometheus-operator-crd/.
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-v0.85.0}
PROMETHEUS_OPERATOR_MODULE=github.com/prometheus-operator/prometheus-operator

fetch() {
  [[ -x $CURRENT/usr/bin/promtool && -x $CURRENT/usr/bin/prometheus ]] && return 0
  need apt-get "fetch Debian's prometheus package"
  mkdir -p "$PKG_DIR"
  exec 8>"$PKG_DIR/.lock"
  flock -w 600 8 || die "timed out waiting for another fetch of the package"
  [[ -x $CURRENT/usr/bin/promtool && -x $CURRENT/usr/bin/prometheus ]] && return 0
  local work log=$PKG_DIR/fetch.log deb version
  work=$(mktemp -d "$PKG_DIR/.fetch.XXXXXX")
  chmod 755 "$work" # apt's download sandbox user writes here
  # A fresh machine may have no package lists yet: update, then try again. `make test` runs this
  # (through `make lint`) while devstack/node.sh may run apt-get itself: a held apt lock is waited out.
  local attempt
  : >"$log"
  for attempt in 1 2 3 4 5 6; do
    (cd "$work" && apt-get download -q prometheus) >>"$log" 2>&1 && break
    ((attempt < 6)) || { rm -rf "$work"; die "apt-get download prometheus failed; see $log"; }
    if ((attempt == 1)); then apt-get update -q >>"$log" 2>&1 || true; else sleep 10; fi
  done
  deb=$(ls "$work"/prometheus_*.deb)
  version=$(dpkg-deb -f "$deb" Version)
  rm -rf "${PKG_DIR:?}/${version:?}"
  dpkg-deb -x "$deb" "$work/root" || { rm -rf "$work"; die "dpkg-deb -x $deb failed"; }
  mv "$work/root" "$PKG_DIR/$version"
  rm -rf "$work"
  ln -sfn "$version" "$CURRENT.tmp" && mv -Tf "$CURRENT.tmp" "$CURRENT"
  log "Debian package $version unpacked into $PKG_DIR/$version"
}

up() {
  local dir=${1:?usage: up DIR CONFIG PORT} config=${2:?config file} port=${3:?port}
  fetch
  mkdir -p "$dir/data"
  if proc_live_pid "$dir/prometheus.pid" "--web.listen-address=127.0.0.1:$port" >/dev/null; then
    log "already running in $dir"
    return 0
  fi
  proc_claim "$dir" "port-$port" || die "port $port is taken"
  local bin
  bin=$(readlink -f "$CURRENT/usr/bin/prometheus")
  proc_spawn "$dir/prometheus.pid" "$dir/prometheus.log" "$bin" "$bin" \
    --config.file="$config" \
    --storage.tsdb.path="$dir/data" \
    --storage.tsdb.retention.time=2h \
    --web.listen-address="127.0.0.1:$port" \
    --web.enable-lifecycle \
    || { proc_release_claims; die "prometheus did not start; see $dir/prometheus.log"; }
  proc_release_claims
  WAIT_INTERVAL=0.1 wait_until 30 listening "$dir" "$port" \
    || die "prometheus is not listening on 127.0.0.1:$port after 30 s; see $dir/prometheus.log"
  log "listening on 127.0.0.1:$port (log: $dir/prometheus.log)"
}

# listening DIR PORT: the server answers on PORT; dies at once if it exited while starting.
listening() {
  port_open "$2" && return 0
  proc_live_pid "$1/prometheus.pid" >/dev/null || die "prometheus exited; see $1/prometheus.log"
  return 1
}

crds() {
  local dir
  find_go "fetch $PROMETHEUS_OPERATOR_MODULE@$PROMETHEUS_OPERATOR_VERSION"
  # The Go module cache is content-addressed and locks itself: parallel callers are safe.
  dir=$(GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local} go mod download -json \
    "$PROMETHEUS_OPERATOR_MODULE@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [[ -n $dir && -d $dir/example/prometheus-operator-crd ]] \
    || die "go mod download $PROMETHEUS_OPERATOR_MODULE@$PROMETHEUS_OPERATOR_VERSION gave no CRD directory"
  printf '%s\n' "$dir/example/prometheus-operator-crd"
}

down() {
  local dir=${1:?usage: down DIR}
  proc_stop "$dir/prometheus.pid" "--storage.tsdb.path=$dir/data" prometheus 15
}

case ${1:-} in
  fetch) fetch ;;
  promtool) fetch && readlink -f "$CURRENT/usr/bin/promtool" ;;
  path) fetch && readlink -f "$CURRENT/usr/bin/prometheus" ;;
  up) shift && up "$@" ;;
  down) shift && down "$@" ;;
  crds) crds ;;
  *) echo "usage: $0 fetch|promtool|path|up DIR CONFIG PORT|down DIR|crds" >&2; exit 2 ;;
esac
