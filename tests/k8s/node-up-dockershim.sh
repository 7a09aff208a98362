#!/bin/bash
# The seeds' era in a node bed: kubelet v1.23.17 with dockershim against dockerd 20.10, for
# tests/real_node.rs (the dockershim scenario) and by hand (docs/real-node.md "kubelet 1.23
# (dockershim)"):
#
#   tests/k8s/node-up-dockershim.sh [--affected]      then     tests/k8s/node-down.sh
#
# It is `tests/k8s/node-up.sh --dockershim` (see there): same lock, state, output lines.
exec "$(dirname "$0")/node-up.sh" --dockershim "$@"
