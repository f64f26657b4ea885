#!/usr/bin/env bash
# Installs the pinned npm `bolt11` (an independent BOLT #11 implementation) the settle
# interop test makes invoices with, into
# ${FLEETMESH_BOLT11_JS_DIR:-$HOME/.cache/fleetmesh/npm-bolt11}, only when it is missing or
# at another version. .ci/test calls it; the test calls it when node is here and the
# package is not. Needs node (>= 18) and npm, with the npm registry on first run.
set -euo pipefail
exec "$(dirname "$0")/../npm-pin.sh" bolt11 1.4.1 \
    "${FLEETMESH_BOLT11_JS_DIR:-$HOME/.cache/fleetmesh/npm-bolt11}"
