#!/usr/bin/env bash
# Installs the pinned PyPI pymacaroons (an independent macaroon implementation: the L402
# test reads the node's macaroons with it and attenuates them as a holder would) into its
# own virtual environment, ${FLEETMESH_PYMACAROONS_VENV:-$HOME/.cache/fleetmesh/pymacaroons-venv},
# only when it is missing or at another version, and prints the environment's python.
# .ci/test calls it; the L402 test calls it when python3 can make a venv. Needs PyPI on
# first run.
set -euo pipefail
VENV="$("$(dirname "$0")/../pip-pin.sh" \
    "${FLEETMESH_PYMACAROONS_VENV:-$HOME/.cache/fleetmesh/pymacaroons-venv}" pymacaroons 0.13.0)"
echo "$VENV/bin/python"
