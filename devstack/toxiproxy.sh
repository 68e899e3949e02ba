#!/usr/bin/env bash
# devstack/toxiproxy.sh: build (once) and locate Toxiproxy, the TCP proxy the fault-injection
# tests put between groupwarden and Kafka / the API server (docs/fault-injection.md).
#
#   devstack/toxiproxy.sh build    build toxiproxy-server into $GROUPWARDEN_CACHE/bin (if missing)
#   devstack/toxiproxy.sh path     print the binary's path (builds it first if needed)
#
# Built from the Go module proxy like the devstack's other Go components (no replace directives:
# a plain `go install MODULE@VERSION` works) and cached by version, so later runs take no time.
# The tests start their own toxiproxy-server per test module on a free loopback port (their
# fixture owns its lifetime); nothing here runs a daemon.
set -euo pipefail
DEVSTACK_NAME=toxiproxy
# shellcheck source=lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh" # GROUPWARDEN_CACHE, log/die, find_go

TOXIPROXY_VERSION=${TOXIPROXY_VERSION:-v2.12.0}
BIN=$GROUPWARDEN_CACHE/bin/toxiproxy-server-$TOXIPROXY_VERSION
LOG=$GROUPWARDEN_CACHE/build/toxiproxy-$TOXIPROXY_VERSION.log

build() {
  [[ -x $BIN ]] && return 0
  find_go "build toxiproxy $TOXIPROXY_VERSION (once)"
  mkdir -p "$GROUPWARDEN_CACHE/bin" "$GROUPWARDEN_CACHE/build"
  # Its own lock: the Kubernetes builds hold build/.lock for minutes.
  exec 8>"$GROUPWARDEN_CACHE/build/.toxiproxy.lock"
  flock -w 900 8 || die "timed out waiting for another toxiproxy build"
  [[ -x $BIN ]] && return 0
  local gobin
  gobin=$(mktemp -d "$GROUPWARDEN_CACHE/build/.toxiproxy.XXXXXX")
  log "building $TOXIPROXY_VERSION (log: $LOG)"
  if ! CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOBIN=$gobin GOFLAGS=-mod=mod \
    go install -trimpath -ldflags "-s -w" \
    "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >"$LOG" 2>&1; then
    rm -rf "$gobin"
    die "building toxiproxy $TOXIPROXY_VERSION failed; see $LOG"
  fi
  mv -f "$gobin/server" "$BIN"
  rm -rf "$gobin"
}

case ${1:-} in
  build) build ;;
  path) build && printf '%s\n' "$BIN" ;;
  *) echo "usage: $0 build|path" >&2; exit 2 ;;
esac
