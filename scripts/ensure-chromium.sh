#!/usr/bin/env bash
# Installs Debian's headless-capable Chromium when it is missing (the fleet report's render test,
# tests/unit/fleet/test_fleet_report_render.py, needs it). CI runs as root on Debian; elsewhere,
# run it with sudo or install `chromium` yourself. Prints the binary's path.
set -euo pipefail
if [[ -x /usr/bin/chromium ]]; then
  echo /usr/bin/chromium
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "chromium is missing and this is not root: apt-get install -y chromium" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# devstack/node.sh may be installing its packages at the same moment (a test run beside
# `make devstack`): wait for apt's lock instead of failing on it.
wait_for_lock=(-o DPkg::Lock::Timeout=600)
apt-get "${wait_for_lock[@]}" update -qq >&2
apt-get "${wait_for_lock[@]}" install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
echo /usr/bin/chromium
