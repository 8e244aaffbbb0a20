#!/usr/bin/env bash
# Set up, then run the app with `flwr run` on a local simulation federation (offline default:
# FedAvg on the synthetic data). Extra arguments are run-config overrides, e.g.
#   bash scripts/run.sh "strategy='fedprox' num-server-rounds=5"
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
python -m fedapp.launch --run-config "num-clients=10 ${1:-}"
