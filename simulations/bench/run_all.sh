#!/usr/bin/env bash
# All benchmarks of docs/performance.md in sequence, one JSON line per measurement to $OUT.
# ROUNDS/REPEATS shrink the run for a loaded machine (the numbers in docs/performance.md say
# which were used); the defaults are the benchmarks' full settings.
set -uo pipefail
cd "$(dirname "$0")"
. ../../.venv/bin/activate
OUT=${OUT:-results/measure.jsonl}
ROUNDS=${ROUNDS:-10}
REPEATS=${REPEATS:-3}
SMALL_ROUNDS=${SMALL_ROUNDS:-$ROUNDS}
SCALE_ROUNDS=${SCALE_ROUNDS:-3}
step() { echo "== $* ($(date +%T), $(cut -d' ' -f1-3 /proc/loadavg))"; "$@"; }
step python floor.py --repeats "$REPEATS" --threads 1 --out "$OUT"
step python data_path.py --steps 300 --repeats 5 --threads 1 --out "$OUT"
step python round_overhead.py --strategy fedavg --rounds "$ROUNDS" --repeats "$REPEATS" --skip-one-step --out "$OUT"
step python round_overhead.py --strategy fedavg --rounds "$SMALL_ROUNDS" --repeats 1 --local-steps 1 --skip-one-step --out "$OUT"
step python round_overhead.py --strategy fedavg --rounds "$SMALL_ROUNDS" --repeats 1 --num-cpus 2 --skip-one-step --out "$OUT"
step python scale.py --strategy fedavg --rounds "$SCALE_ROUNDS" --repeats 1 --out "$OUT"
step python scale.py --strategy scaffold --rounds "$SCALE_ROUNDS" --repeats 1 --out "$OUT"
step python round_overhead.py --strategy fedsmoo --rounds "$SMALL_ROUNDS" --repeats 1 --skip-one-step --out "$OUT"
step python round_overhead.py --strategy pefll --rounds "$SMALL_ROUNDS" --repeats 1 --skip-one-step --out "$OUT"
