"""Accuracy under poisoned replies: FedAvg with 30% and 60% of the clients scaling their updates
by 1e30 (fault-kind scale), for each robust-aggregation option (docs/reliability.md).

    OMP_NUM_THREADS=1 PYTHONPATH=. python simulations/security/attack_table.py \\
        --out docs/results/robustness.json --results-dir OUT

Every run is in process (fedapp.inprocess), one after the other, single-threaded; the summary is
rewritten after each run, so a stopped sweep keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from fedapp.inprocess import run_local

#: the setting: MNIST, 10 IID clients, MLP, 10 rounds of 20 local steps, every client every round
SETTING = {"strategy": "fedavg", "dataset": "mnist", "partition": "iid", "model": "mlp", "num-clients": 10,
           "num-server-rounds": 10, "local-steps": 20, "batch-size": 32, "lr": 0.05, "fraction-train": 1.0,
           "fraction-evaluate": 0.0, "checkpoint-every": 0, "seed": 0, "num-threads": 1,
           "max-empty-rounds": 0}  # a diverged model's NaN replies are dropped: the table records, not stops
#: robust options, each on its own (the screen off, except in "screen"); clip-norm 1.0 was set before
#: any run, not tuned
OPTIONS = {
    "none (plain mean)": {"screen-factor": 0.0},
    "screen (default)": {},
    "clip-norm 1.0": {"screen-factor": 0.0, "clip-norm": 1.0},
    "median": {"screen-factor": 0.0, "aggregation": "median"},
    "trimmed-mean 0.4": {"screen-factor": 0.0, "aggregation": "trimmed-mean", "trim-fraction": 0.4},
    "multi-krum f=attackers": {"screen-factor": 0.0, "aggregation": "krum"},  # f and m set per fraction below
}


def summary(strategy) -> dict:
    last = strategy.history[-1]
    biggest = max(float(t.abs().max()) for t in strategy.global_state.values() if t.is_floating_point())
    finite = all(torch.isfinite(t).all() for t in strategy.global_state.values())
    return {"accuracy": last.get("central-accuracy"), "max-abs-weight": biggest if math.isfinite(biggest) else None,
            "finite": bool(finite), "skipped-rounds": sum(1 for r in strategy.history[1:] if r.get("skipped")),
            "dropped": sum(r.get("dropped-replies", 0) for r in strategy.history[1:])}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--results-dir", required=True)
    p.add_argument("--fractions", default="0.3,0.6")
    a = p.parse_args()
    torch.set_num_threads(1)
    doc = {"setting": SETTING, "attack": "fault-kind scale (updates x 1e30)", "runs": []}
    runs = [("no attackers", 0.0, {})] + [(name, float(f), opt) for f in a.fractions.split(",")
                                          for name, opt in OPTIONS.items()]
    for name, fraction, option in runs:
        cfg = {**SETTING, **option, "results-dir": a.results_dir, "fault-fraction": fraction, "fault-kind": "scale",
               "run-name": f"{name.split()[0]}-{fraction}"}
        if option.get("aggregation") == "krum":
            f = int(round(fraction * SETTING["num-clients"]))
            cfg.update({"krum-byzantine": f, "krum-select": SETTING["num-clients"] - f})
        t0 = time.time()
        strategy = run_local(cfg)
        doc["runs"].append({"option": name, "attackers": fraction,  # the run's own keys, not where it wrote
                            "config": {k: v for k, v in cfg.items() if k not in SETTING and k != "results-dir"},
                            **summary(strategy), "seconds": round(time.time() - t0, 1)})
        a.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(doc["runs"][-1], flush=True)


if __name__ == "__main__":
    main()
