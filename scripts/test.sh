#!/usr/bin/env bash
# Set up, then run the test suite (offline, CPU, under 10 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m pytest -q "$@"
