#!/usr/bin/env bash
# Stops the devstack. --purge also removes its data (never the cached binaries).
set -euo pipefail
DEVSTACK_NAME=down
# shellcheck source=lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh" # DEVSTACK_DIR (symlinks resolved), log/die
repo=$DEVSTACK_REPO
export DEVSTACK_DIR
rc=0
# Reverse start order; every known component, so a stack started with more parts still stops.
for c in node k8s kafka; do
  [[ -x $repo/devstack/$c.sh ]] || continue
  "$repo/devstack/$c.sh" down "$@" || rc=1
done
exit $rc
