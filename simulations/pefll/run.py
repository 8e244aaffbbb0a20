"""Run PeFLL's Table 1 experiments (a TOML file of methods) in process and tabulate seen/unseen accuracy.

    nice -n 10 python simulations/pefll/run.py simulations/pefll/cifar10-100c-2cls-cpu.toml
    python simulations/pefll/run.py simulations/pefll/cifar10-100c-2cls-cpu.toml --methods pefll fedavg
    python simulations/pefll/run.py simulations/pefll/cifar10-100c-2cls-cpu.toml --table

A TOML file holds ``[base]`` (the run config all methods share) and one ``[methods.<name>]`` table
per method (its own keys). Each run writes results/pefll/<file stem>/<method>/rounds.json; the last
round of each run goes to <method>/summary.json.
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

KEYS = ("fed-seen-accuracy", "fed-unseen-accuracy", "fed-accuracy", "fed-seen-acc-client-std",
        "fed-unseen-acc-client-std", "fed-seen-acc-client-min", "fed-unseen-acc-client-min",
        "fed-seen-unmasked-accuracy", "fed-unseen-unmasked-accuracy", "fed-seen-val-accuracy")


def run_all(spec: dict, out: Path, methods: list[str] | None, seed: int | None = None) -> None:
    """Run the methods one after the other; each one's last round goes to <method>/summary.json
    (one file per method, so that several runners may share ``out``); with ``seed`` the run is
    <method>-s<seed>. Rows go to <run>/rounds.json as each round ends."""
    for method, keys in spec["methods"].items():
        if methods and method not in methods:
            continue
        name = method if seed is None else f"{method}-s{seed}"
        config = {**spec["base"], **keys, "results-dir": str(out), "run-name": name,
                  **({} if seed is None else {"seed": seed})}
        t0 = time.time()
        strategy = run_local(config)
        rounds = [r for r in strategy.history if r["round"] > 0]
        last = rounds[-1]
        evals = [r for r in rounds if "fed-seen-accuracy" in r]
        best = max(evals, key=lambda r: r.get("fed-seen-val-accuracy", -1.0))  # the authors' model selection
        summary = {
            "best-val-step": best["round"], **{f"best-val-{k}": best[k] for k in KEYS if k in best},
            **{k: last[k] for k in KEYS if k in last}, "steps": last["round"], "seconds": time.time() - t0,
            "train-seconds-per-step": sum(r["train-seconds"] for r in rounds) / len(rounds),
            "train-bytes-per-step": (last["total-train-bytes-down"] + last["total-train-bytes-up"]) / len(rounds),
            "sampled-per-step": sum(r.get("replies", 0) for r in rounds) / len(rounds),
        }
        print(name, json.dumps(summary), flush=True)
        (out / name / "summary.json").write_text(json.dumps(summary, indent=1))


def table(out: Path) -> str:
    summary = {f.parent.name: json.loads(f.read_text()) for f in sorted(out.glob("*/summary.json"))}
    lines = ["| method | steps | seen acc | unseen acc | seen client std | unseen client std | "
             "MB / step | s / step |", "|---|---|---|---|---|---|---|---|"]
    for method, r in summary.items():
        lines.append(f"| {method} | {r['steps']} | {100 * r['fed-seen-accuracy']:.1f} | "
                     f"{100 * r['fed-unseen-accuracy']:.1f} | {100 * r['fed-seen-acc-client-std']:.1f} | "
                     f"{100 * r['fed-unseen-acc-client-std']:.1f} | {r['train-bytes-per-step'] / 1e6:.2f} | "
                     f"{r['train-seconds-per-step']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", type=Path)
    parser.add_argument("--methods", nargs="*")
    parser.add_argument("--table", action="store_true", help="print the markdown table of summary.json")
    parser.add_argument("--seed", type=int, help="run seed (the run is named <method>-s<seed>)")
    parser.add_argument("--steps", type=int, help="override num-server-rounds")
    parser.add_argument("--out", type=Path, help="results folder (default results/pefll/<file stem>)")
    args = parser.parse_args()
    out = args.out or ROOT / "results" / "pefll" / args.spec.stem
    if args.table:
        print(table(out))
        return
    torch.set_num_threads(1)
    with open(args.spec, "rb") as f:
        spec = tomllib.load(f)
    if args.steps:
        spec["base"]["num-server-rounds"] = args.steps
    out.mkdir(parents=True, exist_ok=True)
    run_all(spec, out, args.methods, args.seed)


if __name__ == "__main__":
    main()
