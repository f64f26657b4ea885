#!/usr/bin/env bash
# pip-pin.sh VENV PACKAGE VERSION [REQUIREMENT...]: installs PACKAGE==VERSION (and the
# extra requirements, e.g. upper bounds its dependencies need) into its own virtual
# environment VENV, only when it is missing there or at another version, and prints VENV.
# The interop tests' install scripts pin their PyPI package with it. Needs python3 with
# venv, and PyPI on first run.
set -euo pipefail
VENV="$1" PACKAGE="$2" VERSION="$3"
shift 3
PY="$VENV/bin/python"
have="$("$PY" -c "import importlib.metadata as m; print(m.version('$PACKAGE'))" 2>/dev/null || true)"
if [[ "$have" != "$VERSION" ]]; then
    echo "pip-pin.sh: installing $PACKAGE==$VERSION into $VENV" >&2
    python3 -m venv "$VENV" >&2
    "$PY" -m pip install --quiet --disable-pip-version-check "$PACKAGE==$VERSION" "$@" >&2
fi
echo "$VENV"
