# shellcheck shell=bash
# The devstack's components and the facts they share. Sourced by up.sh, status.sh, kafka.sh, node.sh.
# up.sh starts kafka and k8s in parallel, then node (it needs the API server).
# DEVSTACK_COMPONENTS="kafka k8s" leaves the node out.
read -r -a DEVSTACK_COMPONENTS <<<"${DEVSTACK_COMPONENTS:-kafka k8s node}"

# The node's pod network: a bridge on this machine, one /24. Its first address is the node's
# InternalIP and the pods' gateway; everything pods reach there is DNAT'ed to loopback servers
# (docs/devstack-k8s.md, "The node").
NODE_POD_CIDR=${NODE_POD_CIDR:-10.244.0.0/24}
_gw_net=${NODE_POD_CIDR%/*}
NODE_GATEWAY_IP=${NODE_GATEWAY_IP:-${_gw_net%.*}.1}
unset _gw_net
