#!/usr/bin/env bash
# Create the project virtualenv. `run`: the service alone. `test` (default): the service,
# the client SDK with PyTorch, and the test tools.
set -euo pipefail
WHAT=${1:-test}
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "ETT telemetry needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version))" >&2
  exit 1
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
if [ "$WHAT" = run ]; then
  "$VENV/bin/python" -m pip install -q -e .
  exit 0
fi
"$VENV/bin/python" -m pip install -q -e '.[test]'
# The client SDK with its PyTorch helpers. torch is pinned for the tests: 2.13.0 has a CPU
# build small enough to install anywhere (the real-trainer tests run it on the CPU), and an
# unpinned torch would pull a multi-gigabyte CUDA build. The trainer extras (Lightning,
# Hugging Face) are installed in the same command, so the pin holds for their dependencies.
"$VENV/bin/python" -m pip install -q -e './client[lightning,transformers]' torch==2.13.0 numpy
