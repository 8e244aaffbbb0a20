#!/usr/bin/env bash
# Set up, then run the app with `flwr run` on a local simulation federation (offline default:
# FedAvg on the synthetic data, 10 clients). Arguments go to `python -m fedapp.runtime.launch --run-config`:
# overrides and/or TOML files, later ones winning, e.g.
#   bash scripts/run.sh "strategy='fedprox' num-server-rounds=5"
#   bash scripts/run.sh simulations/fedsmoo/reduced-cifar10-mlp-dir0.1-10pct-of-100.toml "num-server-rounds=5"
# Ctrl-C stops the run and everything it started; the results so far stay in results/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
args=(--run-config "num-clients=10")
for a in "$@"; do args+=(--run-config "$a"); done
exec .venv/bin/python -m fedapp.runtime.launch "${args[@]}"
