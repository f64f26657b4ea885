#!/usr/bin/env bash
# npm-pin.sh PACKAGE VERSION DIR: installs PACKAGE@VERSION into DIR (npm --prefix) only
# when it is missing there or at another version, and prints DIR. The interop tests'
# tools.sh scripts pin their package with it. Needs node (>= 18) and npm, with the npm
# registry on first run.
set -euo pipefail
PACKAGE="$1" VERSION="$2" DIR="$3"
have="$(node -p "try { require('$DIR/node_modules/$PACKAGE/package.json').version } catch (e) { '' }")"
if [[ "$have" != "$VERSION" ]]; then
    echo "npm-pin.sh: installing $PACKAGE@$VERSION into $DIR" >&2
    mkdir -p "$DIR"
    npm install --prefix "$DIR" --no-audit --no-fund --save-exact "$PACKAGE@$VERSION" >&2
fi
echo "$DIR"
