#!/usr/bin/env bash
# Installs the pinned PyPI didcomm (SICPA's didcomm-python, the independent DIDComm v2
# implementation peer.py drives) into its own virtual environment,
# ${FLEETMESH_DIDCOMM_VENV:-$HOME/.cache/fleetmesh/didcomm-venv}, only when it is missing
# or at another version, and prints the environment's python. .ci/test calls it; the
# DIDComm interop test calls it when python3 can make a venv. Needs PyPI on first run.
set -euo pipefail
VENV="$("$(dirname "$0")/../pip-pin.sh" \
    "${FLEETMESH_DIDCOMM_VENV:-$HOME/.cache/fleetmesh/didcomm-venv}" didcomm 0.3.2)"
echo "$VENV/bin/python"
