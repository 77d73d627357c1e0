#!/usr/bin/env bash
# Create the project virtualenv. `run`: the service and the client SDK (`pip install ./client`). `trainer`: the run set
# plus a CPU-only PyTorch, for examples/train_elastic.py (`make trainer`). `test` (default): the service,
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
  # The SDK too: the README's trainer snippet runs in this environment.
  "$VENV/bin/python" -m pip install -q -e . -e ./client
  exit 0
fi
# torch is pinned: 2.13.0's build on PyPI is the CPU-only one, small enough to install anywhere,
# where an unpinned `pip install torch` picks a build with the whole CUDA stack (several GB).
TORCH_PIN=torch==2.13.0
if [ "$WHAT" = trainer ]; then
  "$VENV/bin/python" -m pip install -q -e . -e './client[torch]' "$TORCH_PIN"
  exit 0
fi
"$VENV/bin/python" -m pip install -q -e '.[test]'
# The client SDK with its PyTorch helpers (the real-trainer tests run torch on the CPU). The
# trainer extras (Lightning, Hugging Face) are installed in the same command, so the pin holds
# for their dependencies.
"$VENV/bin/python" -m pip install -q -e './client[lightning,transformers]' "$TORCH_PIN" numpy
