#!/bin/bash
# The authors' FedALS code, unmodified, on the reduced ResNet-20 setting of cpu-cifar10-resnet20.toml, through
# the anchor harness (../shared/anchors/run_FedALS.sh, which copies their repository to a scratch directory):
#   ANCHOR_SRC=... ANCHOR_DATA=... ANCHOR_PY=... ANCHOR_WORK=... bash simulations/fedals/authors_reduced.sh ALPHA [ITERATIONS]
# ALPHA 1 is their FedAvg, 10 FedALS; L = 19 (all but the fc head), tau = 5, constant lr 2**-5.643856 = 0.02,
# one thread, evaluated every 100 iterations. The harness summary lands in
# simulations/fedals/results/cpu-cifar10-resnet20/authors-<ITERATIONS-1>-alpha<ALPHA>.json (what claims.py reads).
set -euo pipefail
ALPHA="${1:?alpha (1 = FedAvg, 10 = FedALS)}"
ITERS="${2:-2001}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="$HERE/results/cpu-cifar10-resnet20"
export ANCHOR_RESULTS="${ANCHOR_WORK:?scratch directory}/results" ANCHOR_THREADS=1 ANCHOR_TIMEOUT=9000
export FEDALS_LR_EXP=5.643856 FEDALS_CTE=True
bash "$HERE/../../../shared/anchors/run_FedALS.sh" "$ALPHA" "$ITERS" 100
cp "$ANCHOR_RESULTS/FedALS_alpha${ALPHA}_tau5_L19_it${ITERS}.json" "$OUT/authors-$((ITERS - 1))-alpha${ALPHA}.json"
