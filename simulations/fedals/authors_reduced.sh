#!/bin/bash
# The authors' FedALS code, unmodified, on the cpu setting of Table 1 / Table 2 (non-IID CIFAR-10, ResNet-20,
# 5 nodes, tau = 5), through an anchor harness (run_FedALS.sh, which copies their repository to a scratch folder
# and edits only the settings block at the top of main_fed_layer.py):
#   ANCHOR_HARNESS=<harness folder> ANCHOR_SRC=<folder holding their FedALS checkout> ANCHOR_PY=<their python> \
#   ANCHOR_DATA=<folder holding cifar-10-batches-py> ANCHOR_WORK=<scratch folder> \
#       bash simulations/fedals/authors_reduced.sh ALPHA OUT [ITERATIONS] [MODE] [SPLIT] [EVERY]
# ALPHA 1 is their FedAvg, 10 FedALS; L = 19 (all but the fc head), constant lr 2**-5.643856 = 0.02, heavy-ball
# momentum, one thread, evaluated every EVERY iterations (default 100); ITERATIONS defaults to 2001 (0..2000).
# MODE is their settings line's mode: "sgd" (the default: FedAvg / FedALS) or "sca" (their SCAFFOLD); SPLIT
# its split: "noniid" (the default: sorted by label, 2 classes a node) or "iid" (shuffled). The harness fixes
# "sgd" and "noniid", so another value runs a copy of run_FedALS.sh with that word changed.
# Writes OUT/authors-alpha<ALPHA>[-<MODE>][-iid].json, the harness summary; python -m simulations.fedals.authors
# turns it into rows of the summaries' authors.json.
set -euo pipefail
ALPHA="${1:?alpha (1 = FedAvg, 10 = FedALS)}"
OUT="${2:?folder for the summary}"
ITERS="${3:-2001}"
MODE="${4:-sgd}"
SPLIT="${5:-noniid}"
EVERY="${6:-100}"
HARNESS="${ANCHOR_HARNESS:?set ANCHOR_HARNESS to the folder holding run_FedALS.sh}"
export ANCHOR_RESULTS="${ANCHOR_WORK:?set ANCHOR_WORK to a scratch folder}/results" ANCHOR_THREADS=1 ANCHOR_TIMEOUT=9000
export FEDALS_LR_EXP=5.643856 FEDALS_CTE=True
SUFFIX=""
[ "$MODE" != sgd ] && SUFFIX="-$MODE"
case "$SPLIT" in
  noniid) ;;
  iid) SUFFIX="$SUFFIX-iid" ;;
  *) echo "SPLIT: noniid or iid, not \"$SPLIT\"" >&2; exit 2 ;;
esac
if [ -n "$SUFFIX" ]; then
  # the harness's other files stay where they are (linked); the summary records mode and split
  EDITED="$ANCHOR_WORK/harness$SUFFIX"
  rm -rf "$EDITED" && mkdir -p "$EDITED"
  ln -s "$HARNESS"/* "$EDITED"/ && rm "$EDITED/run_FedALS.sh"
  SPLIT_NOTE="sorted-labels(2 classes\/node)"
  [ "$SPLIT" = iid ] && SPLIT_NOTE="iid(shuffled)"
  sed -e 's/\\"sgd\\"\]/\\"'"$MODE"'\\"]/' \
      -e 's/\[None, \\"5\\", \\"noniid\\"/[None, \\"5\\", \\"'"$SPLIT"'\\"/' \
      -e "s/split=sorted-labels(2 classes\/node)/split=$SPLIT_NOTE/" \
      -e "s/--config \"algo=/--config \"mode=$MODE,algo=/" "$HARNESS/run_FedALS.sh" > "$EDITED/run_FedALS.sh"
  grep -qF "\\\"$SPLIT\\\", \\\"\$H\\\"" "$EDITED/run_FedALS.sh" && grep -qF "\\\"$MODE\\\"]" "$EDITED/run_FedALS.sh" \
    || { echo "run_FedALS.sh: no settings line with split \"noniid\" and mode \"sgd\" to change" >&2; exit 2; }
  HARNESS="$EDITED"
fi
bash "$HARNESS/run_FedALS.sh" "$ALPHA" "$ITERS" "$EVERY"
mkdir -p "$OUT"
cp "$ANCHOR_RESULTS/FedALS_alpha${ALPHA}_tau5_L19_it${ITERS}.json" "$OUT/authors-alpha${ALPHA}${SUFFIX}.json"
