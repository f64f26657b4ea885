#!/usr/bin/env bash
# Installs the pinned nostr-tools (npm) the gift-wrap interop test runs against, into
# ${FLEETMESH_NOSTR_TOOLS_DIR:-$HOME/.cache/fleetmesh/npm-nostr-tools}, only when it is
# missing or at another version. .ci/test calls it; the test calls it when node is here
# and the package is not. Needs node (>= 18) and npm, with the npm registry on first run.
set -euo pipefail
VERSION=2.25.2
DIR="${FLEETMESH_NOSTR_TOOLS_DIR:-$HOME/.cache/fleetmesh/npm-nostr-tools}"
have="$(node -p "try { require('$DIR/node_modules/nostr-tools/package.json').version } catch (e) { '' }")"
if [[ "$have" != "$VERSION" ]]; then
    echo "tools.sh: installing nostr-tools@$VERSION into $DIR" >&2
    mkdir -p "$DIR"
    npm install --prefix "$DIR" --no-audit --no-fund --save-exact "nostr-tools@$VERSION" >&2
fi
echo "$DIR"
