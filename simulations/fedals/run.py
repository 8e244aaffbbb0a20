"""Run FedALS experiments in process from a run-config TOML file, one run per method.

    nice -n 10 python simulations/fedals/run.py simulations/fedals/cpu-cifar10-lenet.toml
    nice -n 10 python simulations/fedals/run.py simulations/fedals/table2-cifar10-noniid.toml \
        --methods fedals --sweep fedals.alpha=1,5,10,25,50,100
    python simulations/fedals/run.py simulations/fedals/cpu-cifar10-lenet.toml --table   # markdown

``--table`` reads every run's rounds.json (also of runs still going or stopped) and compares them
up to the last evaluated round that all of them completed.

The TOML file is a plain run config (the same file works with ``flwr run . --run-config FILE``);
each method below overrides its strategy keys. Results go to results/fedals/<file stem>/<run>/,
and one JSON line per run (also appended to summary.jsonl there) gives the mean central accuracy
of the averaged model over the last 5 evaluations and the traffic per client.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedapp.local import run_local  # noqa: E402

METHODS = {
    "fedavg": {"strategy": "fedals", "fedals.alpha": 1},  # alpha = 1 is FedAvg (clients keep momentum)
    "fedals": {"strategy": "fedals"},
    "scaffold": {"strategy": "fedals-scaffold", "fedals.alpha": 1},
    "fedals-scaffold": {"strategy": "fedals-scaffold"},
}


def flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def summarize(history: list[dict], num_clients: int) -> dict:
    evals = [r for r in history if r["round"] > 0 and "central-accuracy" in r][-5:]
    last = history[-1]
    params = (last.get("total-train-params-down", 0) + last.get("total-train-params-up", 0)) / num_clients
    return {"rounds": last["round"], "acc-last5": sum(r["central-accuracy"] for r in evals) / len(evals),
            "acc-last": evals[-1]["central-accuracy"], "train-params-per-client": params,
            "train-bytes": last.get("total-train-bytes-down", 0) + last.get("total-train-bytes-up", 0),
            "eval-bytes": last.get("total-eval-bytes-down", 0) + last.get("total-eval-bytes-up", 0)}


def table(out: Path) -> str:
    runs = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/rounds.json"))}
    upto = min(max(r["round"] for r in doc["rounds"] if "central-accuracy" in r) for doc in runs.values())
    if upto == 0:
        return "No run has been evaluated after training yet."
    lines = [f"Up to round {upto}.", "",
             "| run | rounds | acc. last 5 evals | last acc. | params sent per client | train MB | eval MB |",
             "|---|---|---|---|---|---|---|"]
    for name, doc in runs.items():
        r = summarize([row for row in doc["rounds"] if row["round"] <= upto], doc["config"]["num-clients"])
        lines.append(f"| {name} | {r['rounds']} | {r['acc-last5']:.4f} | {r['acc-last']:.4f} | "
                     f"{r['train-params-per-client'] / 1e6:.3f}M | {r['train-bytes'] / 1e6:.1f} | {r['eval-bytes'] / 1e6:.1f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--methods", nargs="+", default=["fedavg", "fedals", "fedals-scaffold"], choices=METHODS)
    ap.add_argument("--sweep", default="", help="KEY=V1,V2,...: one run per value (e.g. fedals.alpha=1,10)")
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE overrides (TOML values)")
    ap.add_argument("--lr-from", type=Path, help="lr-tuning.json of tune_lr.py: each method at its tuned lr")
    ap.add_argument("--table", action="store_true", help="print the markdown comparison of the runs and stop")
    args = ap.parse_args()
    if args.table:
        print(table(ROOT / "results" / "fedals" / args.config.stem))
        return
    torch.set_num_threads(1)
    base = flat(tomllib.loads(args.config.read_text()))
    base.update(flat(tomllib.loads("\n".join(args.set))))
    out = ROOT / "results" / "fedals" / args.config.stem
    key, _, values = args.sweep.partition("=")
    sweep = [tomllib.loads(f"v = {v}")["v"] for v in values.split(",")] if key else [None]
    for method in args.methods:
        for value in sweep:
            name = method if value is None else f"{method}-{key}={value}"
            config = {**base, **METHODS[method], "results-dir": str(out), "run-name": name}
            if args.lr_from:
                config["lr"] = json.loads(args.lr_from.read_text())["winner"][method]["lr"]
            if value is not None:
                config[key] = value
            t0 = time.time()
            strategy = run_local(config)
            row = {"run": name, **summarize(strategy.history, config.get("num-clients", 10)),
                   "seconds": round(time.time() - t0, 1)}
            print(json.dumps(row), flush=True)
            with open(out / "summary.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
