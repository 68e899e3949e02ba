#!/usr/bin/env bash
# Stops the devstack. --purge also removes its data (never the cached binaries).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export DEVSTACK_DIR=${DEVSTACK_DIR:-$repo/.devstack}
rc=0
# Reverse start order; every known component, so a stack started with more parts still stops.
for c in node k8s kafka; do
  [[ -x $repo/devstack/$c.sh ]] || continue
  "$repo/devstack/$c.sh" down "$@" || rc=1
done
exit $rc
