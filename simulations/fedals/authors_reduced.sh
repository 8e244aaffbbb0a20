#!/bin/bash
# The authors' FedALS code, unmodified, on the cpu setting of Table 1 / Table 2 (non-IID CIFAR-10, ResNet-20,
# 5 nodes, tau = 5), through an anchor harness (run_FedALS.sh, which copies their repository to a scratch folder
# and edits only the settings block at the top of main_fed_layer.py):
#   ANCHOR_HARNESS=<harness folder> ANCHOR_SRC=<folder holding their FedALS checkout> ANCHOR_PY=<their python> \
#   ANCHOR_DATA=<folder holding cifar-10-batches-py> ANCHOR_WORK=<scratch folder> \
#       bash simulations/fedals/authors_reduced.sh ALPHA OUT [ITERATIONS]
# ALPHA 1 is their FedAvg, 10 FedALS; L = 19 (all but the fc head), constant lr 2**-5.643856 = 0.02, heavy-ball
# momentum, one thread, evaluated every 100 iterations; ITERATIONS defaults to 2001 (iterations 0..2000).
# Writes OUT/authors-alpha<ALPHA>.json, the harness summary; python -m simulations.fedals.authors turns it into
# rows of the summaries' authors.json.
set -euo pipefail
ALPHA="${1:?alpha (1 = FedAvg, 10 = FedALS)}"
OUT="${2:?folder for the summary}"
ITERS="${3:-2001}"
HARNESS="${ANCHOR_HARNESS:?set ANCHOR_HARNESS to the folder holding run_FedALS.sh}"
export ANCHOR_RESULTS="${ANCHOR_WORK:?set ANCHOR_WORK to a scratch folder}/results" ANCHOR_THREADS=1 ANCHOR_TIMEOUT=9000
export FEDALS_LR_EXP=5.643856 FEDALS_CTE=True
bash "$HARNESS/run_FedALS.sh" "$ALPHA" "$ITERS" 100
mkdir -p "$OUT"
cp "$ANCHOR_RESULTS/FedALS_alpha${ALPHA}_tau5_L19_it${ITERS}.json" "$OUT/authors-alpha${ALPHA}.json"
