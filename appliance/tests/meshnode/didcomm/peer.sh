#!/usr/bin/env bash
# Installs the pinned PyPI didcomm (SICPA's didcomm-python, the independent DIDComm v2
# implementation peer.py drives) into its own virtual environment,
# ${FLEETMESH_DIDCOMM_VENV:-$HOME/.cache/fleetmesh/didcomm-venv}, only when it is missing
# or at another version, and prints the environment's python. .ci/test calls it; the
# DIDComm interop test calls it when python3 can make a venv. Needs PyPI on first run.
set -euo pipefail
VERSION=0.3.2
VENV="${FLEETMESH_DIDCOMM_VENV:-$HOME/.cache/fleetmesh/didcomm-venv}"
PY="$VENV/bin/python"
have="$("$PY" -c 'import importlib.metadata as m; print(m.version("didcomm"))' 2>/dev/null || true)"
if [[ "$have" != "$VERSION" ]]; then
    echo "peer.sh: installing didcomm==$VERSION into $VENV" >&2
    python3 -m venv "$VENV" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check "didcomm==$VERSION" >&2
fi
echo "$PY"
