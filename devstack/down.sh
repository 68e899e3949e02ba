#!/usr/bin/env bash
# Stops the devstack. --purge also removes its data (never the cached binaries).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export DEVSTACK_DIR=${DEVSTACK_DIR:-$repo/.devstack}
rc=0
for c in k8s kafka; do
  "$repo/devstack/$c.sh" down "$@" || rc=1
done
exit $rc
