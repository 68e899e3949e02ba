# shellcheck shell=bash
# Sourced by the Makefile: exports the devstack's environment for one command.
# KAFKA_BOOTSTRAP_SERVERS and KUBECONFIG that the caller already set win, so the same tests run
# against an existing Kafka or any cluster (e.g. kind).
_gw_kafka=${KAFKA_BOOTSTRAP_SERVERS-}
_gw_kubeconfig=${KUBECONFIG-}
if [[ -f .devstack/env ]]; then
  # shellcheck disable=SC1091
  source .devstack/env
fi
[[ -n $_gw_kafka ]] && export KAFKA_BOOTSTRAP_SERVERS=$_gw_kafka
[[ -n $_gw_kubeconfig ]] && export KUBECONFIG=$_gw_kubeconfig
unset _gw_kafka _gw_kubeconfig
