#!/usr/bin/env bash
# Set up, then run the test suite (offline, CPU; its running time on 2 cores: the README).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
# one worker a core and two more (the tests that start real Flower processes spend much of their time
# waiting on them), tests handed out one by one, the slow ones first; those sharing a module fixture
# (a federation) stay together on one worker (both: tests/conftest.py); PYTEST_WORKERS=0 runs in this
# process
python -m pytest -q -n "${PYTEST_WORKERS:-$(( $(nproc) + 2 ))}" --dist loadgroup "$@"
