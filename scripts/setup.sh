#!/usr/bin/env bash
# Create .venv and install fedapp with its test extra; idempotent, safe on a fresh machine.
# Once done, later calls return at once until pyproject.toml changes (a stamp in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/fedapp-setup.stamp
want="$(pwd) $(sha256sum pyproject.toml | cut -d' ' -f1)"
[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && exit 0
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
# pip warns about every configured package index that is absent on this machine; keep real errors
pipq() { python -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
pipq install -q --upgrade pip >/dev/null
# torch first and pinned: an unpinned torch would pull several GB of CUDA packages on a CPU machine.
python -c "import torch" 2>/dev/null || pipq install -q "torch==${TORCH_VERSION:-2.13.0}"
pipq install -q -e ".[dev]"
echo "$want" > "$STAMP"
