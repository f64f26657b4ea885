#!/usr/bin/env bash
# Installs the pinned nostr-tools (npm) the gift-wrap interop test runs against, into
# ${FLEETMESH_NOSTR_TOOLS_DIR:-$HOME/.cache/fleetmesh/npm-nostr-tools}, only when it is
# missing or at another version. .ci/test calls it; the test calls it when node is here
# and the package is not. Needs node (>= 18) and npm, with the npm registry on first run.
set -euo pipefail
exec "$(dirname "$0")/../npm-pin.sh" nostr-tools 2.25.2 \
    "${FLEETMESH_NOSTR_TOOLS_DIR:-$HOME/.cache/fleetmesh/npm-nostr-tools}"
