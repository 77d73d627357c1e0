#!/usr/bin/env bash
# Create the project virtualenv and install the service, the client SDK and test tools.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "ETT telemetry needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version))" >&2
  exit 1
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q -e '.[test]'
if [ -f client/pyproject.toml ]; then
  "$VENV/bin/python" -m pip install -q -e ./client
fi
