#!/usr/bin/env bash
# Exit 0 if every devstack component is running and healthy (each prints one line per process).
# Usage: devstack/status.sh [COMPONENT...]   (default: the same set as devstack/up.sh)
set -euo pipefail
DEVSTACK_NAME=status
# shellcheck source=lib/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh" # DEVSTACK_DIR (symlinks resolved), log/die
repo=$DEVSTACK_REPO
export DEVSTACK_DIR
# shellcheck source=components.sh
. "$repo/devstack/components.sh"
components=("$@")
((${#components[@]})) || components=("${DEVSTACK_COMPONENTS[@]}")
rc=0
for c in "${components[@]}"; do
  "$repo/devstack/$c.sh" status || rc=1
done
exit $rc
