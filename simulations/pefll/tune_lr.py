"""The baselines' client learning rate by PeFLL's procedure: a grid, scored on held-out validation data.

PeFLL (Section 4): "The hyperparameters for all methods are tuned using validation data that was held
out from the training set (10,000 samples for CIFAR10 and CIFAR100, spread across the clients)" and
the client SGD's "learning rate chosen via grid search"; the grid itself is not given. Here each
method of a setting folder (its ``<method>.toml``) runs one probe per lr of ``--grid`` (default 0.003,
0.01, 0.03: the settings' 0.01 and a factor of about 3 each way), cut to ``--rounds`` rounds and
evaluated once at the end; a probe's score is the seen clients' pooled accuracy on their validation
splits (``fed-seen-val-accuracy``: the ``pfedhn`` partition's held-out 100 images a client, never
trained on; masked as the setting evaluates). The winner of each method is the highest score (ties:
the smaller lr); a probe that stops (every reply non-finite: it diverged) is stored with score null
and the reason, and bounds the grid as a probe that lost. Probes and winners go to ``--out`` (default results/pefll/<setting>/lr-grid.json) as
they end; a probe already there with the same probe settings is not run again.

    python simulations/pefll/tune_lr.py simulations/pefll/cifar10-100c-authors \
        --methods fedavg perfedavg fedrep pfedme knnper --rounds 100
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedapp.runtime.inprocess import run_local  # noqa: E402
from simulations.run import overrides, read  # noqa: E402

SCORE = "fed-seen-val-accuracy"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting", type=Path, help="a folder of <method>.toml files")
    ap.add_argument("--methods", nargs="+", default=["fedavg", "perfedavg", "fedrep", "pfedme", "knnper"])
    ap.add_argument("--grid", nargs="+", type=float, default=[0.003, 0.01, 0.03])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE overrides (TOML values)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = args.out or ROOT / "results" / "pefll" / args.setting.name / "lr-grid.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    probe_settings = {"rounds": args.rounds, "seed": args.seed, "score": SCORE, "set": args.set}
    doc = {"setting": str(args.setting), "grid": args.grid, "probe": probe_settings, "probes": [], "winner": {}}
    if out.exists() and json.loads(out.read_text())["probe"] == probe_settings:
        stored = json.loads(out.read_text())
        doc = stored | {"grid": sorted(set(stored["grid"]) | set(args.grid))}
    for method in args.methods:
        scores = {p["lr"]: p["score"] for p in doc["probes"] if p["method"] == method}
        for lr in args.grid:
            if lr in scores:
                continue
            cfg = read(args.setting / f"{method}.toml") | overrides(args.set) | {
                "lr": lr, "seed": args.seed, "num-server-rounds": args.rounds, "eval-every": args.rounds,
                "checkpoint-every": 0, "results-dir": str(out.parent / "lr-probes"),
                "run-name": f"{method}-lr{lr:g}-s{args.seed}"}
            t0 = time.time()
            try:
                last = run_local(cfg).history[-1]
            except RuntimeError as exc:  # diverged: every reply non-finite, the run stopped
                last, stopped = {SCORE: None}, str(exc).splitlines()[0]
            else:
                stopped = None
            if SCORE not in last:
                sys.exit(f"{method}: the probe reports no {SCORE} (a setting without validation splits?)")
            scores[lr] = last[SCORE]
            doc["probes"].append({"method": method, "lr": lr, "score": scores[lr],
                                  "seconds": round(time.time() - t0, 1), **({"stopped": stopped} if stopped else {})})
            out.write_text(json.dumps(doc, indent=1) + "\n")
            print(json.dumps(doc["probes"][-1]), flush=True)
        best = max((lr for lr in sorted(scores) if scores[lr] is not None), key=scores.get)
        doc["winner"][method] = {"lr": best, "at-edge": best in (min(scores), max(scores))}
        out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["winner"]))


if __name__ == "__main__":
    main()
