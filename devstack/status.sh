#!/usr/bin/env bash
# Exit 0 if every devstack component is running and healthy (each prints one line per process).
# Usage: devstack/status.sh [COMPONENT...]   (default: the same set as devstack/up.sh)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export DEVSTACK_DIR=${DEVSTACK_DIR:-$repo/.devstack}
# shellcheck source=components.sh
. "$repo/devstack/components.sh"
components=("$@")
((${#components[@]})) || components=("${DEVSTACK_COMPONENTS[@]}")
rc=0
for c in "${components[@]}"; do
  "$repo/devstack/$c.sh" status || rc=1
done
exit $rc
