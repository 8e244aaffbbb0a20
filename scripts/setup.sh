#!/usr/bin/env bash
# Create .venv and install fedapp with its test extra; idempotent, safe on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null
# torch first and pinned: an unpinned torch would pull several GB of CUDA packages on a CPU machine.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
python -m pip install -q -e ".[dev]"
