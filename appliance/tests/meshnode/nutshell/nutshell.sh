#!/usr/bin/env bash
# Installs nutshell (PyPI `cashu`, the reference Cashu mint and wallet) pinned, into its
# own virtual environment ${FLEETMESH_NUTSHELL_VENV:-$HOME/.cache/fleetmesh/nutshell-venv},
# only when it is missing or at another version, and prints the environment's bin
# directory (its `mint` and `cashu`). .ci/test calls it; the wallet tests call it when
# python3 can make a venv. Needs PyPI on first run.
#
# 0.19.2 with marshmallow<4, limits<4 and sqlalchemy<2.1: later releases pin a
# breez-sdk-spark range the registry no longer serves, and newer marshmallow, limits and
# SQLAlchemy break 0.19.2 at start-up.
set -euo pipefail
VENV="$("$(dirname "$0")/../pip-pin.sh" \
    "${FLEETMESH_NUTSHELL_VENV:-$HOME/.cache/fleetmesh/nutshell-venv}" cashu 0.19.2 \
    'marshmallow<4' 'limits<4' 'sqlalchemy<2.1')"
echo "$VENV/bin"
