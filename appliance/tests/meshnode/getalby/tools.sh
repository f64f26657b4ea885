#!/usr/bin/env bash
# Installs the pinned @getalby/sdk (an independent NIP-47 client) the NWC interop test pays
# through the node's wallet service with, and ws (node 20 has no WebSocket of its own),
# into ${FLEETMESH_GETALBY_DIR:-$HOME/.cache/fleetmesh/npm-getalby}, only when missing or at
# another version. .ci/test calls it; the test calls it when node is here and the package
# is not. Needs node (>= 18) and npm, with the npm registry on first run.
set -euo pipefail
DIR="${FLEETMESH_GETALBY_DIR:-$HOME/.cache/fleetmesh/npm-getalby}"
"$(dirname "$0")/../npm-pin.sh" ws 8.23.0 "$DIR" >/dev/null
exec "$(dirname "$0")/../npm-pin.sh" @getalby/sdk 8.0.3 "$DIR"
