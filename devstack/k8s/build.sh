#!/usr/bin/env bash
# Build one control-plane binary from the Go module proxy through a small wrapper module.
#
# Usage: build.sh kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|etcd VERSION OUT_BINARY WORK_DIR
#   VERSION     e.g. v1.35.4 (kube-*) or v3.6.16 (etcd)
#   OUT_BINARY  final path; written atomically (tmp file + mv) only on success
#   WORK_DIR    where the wrapper module lives (outside the repo; kept for go.sum reuse)
# Uses the default (persistent) GOMODCACHE/GOCACHE unless the caller overrides them.
set -euo pipefail
what="${1:?component}"; ver="v${2#v}"; out="${3:?out}"; work="${4:?workdir}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
mkdir -p "$work" "$(dirname "$out")"
cd "$work"

case "$what" in
  kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy)
    pkg="k8s.io/kubernetes/cmd/$what"
    "$here/gen-kubernetes-gomod.sh" "$ver" > go.mod.new
    minor="${ver#v1.}"; minor="${minor%%.*}"
    ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${ver} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor} -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"
    ;;
  etcd)
    # etcd >= 3.5: the server module's root package is the etcd main (it calls etcdmain.Main).
    pkg=go.etcd.io/etcd/server/v3
    sed "s/@ETCD_VERSION@/${ver}/g" "$here/etcd.go.mod.in" > go.mod.new
    ldflags="-s -w"
    ;;
  *) echo "build.sh: unknown component $what" >&2; exit 2 ;;
esac

# Regenerate go.mod only when the template changed, so an existing go.sum stays valid.
if ! cmp -s go.mod.new go.mod.gen 2>/dev/null; then
  cp go.mod.new go.mod; cp go.mod.new go.mod.gen; rm -f go.sum
fi
rm -f go.mod.new
printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > tools.go

echo "== $(date -u +%FT%TZ) $what $ver: go mod tidy ($(go version))"
go mod tidy
echo "== $(date -u +%FT%TZ) $what $ver: go build $pkg"
go build -trimpath -ldflags "$ldflags" -o "$out.tmp.$$" "$pkg"
mv -f "$out.tmp.$$" "$out"
echo "== $(date -u +%FT%TZ) $what $ver: built $out"
