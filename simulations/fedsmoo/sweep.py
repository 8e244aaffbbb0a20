"""Run several methods on one run-config file with the same seeds, in process, and tabulate them.

    python simulations/fedsmoo/sweep.py simulations/fedsmoo/cpu-cifar10-lenet.toml \
        --methods fedavg scaffold feddyn fedsam mofedsam fedspeed fedsmoo --seeds 0 --target 0.4 \
        --out docs/results/fedsmoo-table.md

Every method reads the same file (only ``strategy`` changes), so data partition, initial model
and client sampling are identical across methods for a given seed. Each run's rounds.json goes
to ``<results-dir>/<method>-s<seed>/``; the markdown table goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tomllib
from pathlib import Path

import torch


def summarise(history: list[dict], target: float) -> dict[str, float]:
    """Final/best central accuracy, first evaluated round reaching ``target``, traffic and time per round."""
    evals = [(r["round"], r["central-accuracy"]) for r in history if r["round"] > 0 and "central-accuracy" in r]
    trained = [r for r in history if r["round"] > 0]
    reached = next((rnd for rnd, acc in evals if acc >= target), None)
    return {
        "final": evals[-1][1], "best": max(acc for _, acc in evals), "reached": reached,
        "down": statistics.mean(r["train-bytes-down"] for r in trained),
        "up": statistics.mean(r["train-bytes-up"] for r in trained),
        "seconds": statistics.median(r["train-seconds"] for r in trained),
    }


def table(results: dict[str, list[dict]], target: float) -> str:
    """One row per method: mean (and spread over seeds when several) of each summary."""
    lines = [f"| method | final acc | best acc | rounds to {target:.0%} | MB down/round | MB up/round | s/round (train) |",
             "|---|---|---|---|---|---|---|"]
    for method, runs in results.items():
        def fmt(key, scale=1.0, digits=4):
            vals = [r[key] * scale for r in runs]
            mean = statistics.mean(vals)
            return f"{mean:.{digits}f}" + (f" ± {statistics.stdev(vals):.{digits}f}" if len(vals) > 1 else "")
        reached = [r["reached"] for r in runs]
        reach = ", ".join("not reached" if r is None else str(r) for r in reached)
        lines.append(f"| {method} | {fmt('final')} | {fmt('best')} | {reach} | {fmt('down', 1e-6, 2)} | "
                     f"{fmt('up', 1e-6, 2)} | {fmt('seconds', 1.0, 1)} |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="flat TOML run-config file (as for flwr run --run-config)")
    p.add_argument("--methods", nargs="+", required=True)
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--target", type=float, default=0.5, help="central accuracy for 'rounds to target'")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="overrides, TOML values")
    p.add_argument("--out", help="markdown file for the table (printed too)")
    p.add_argument("--upto-round", type=int, help="tabulate rounds 1..N only (a common horizon)")
    p.add_argument("--tabulate-only", action="store_true",
                   help="read the runs' rounds.json under results-dir instead of running (parallel sweeps)")
    a = p.parse_args()
    torch.set_num_threads(1)
    from fedapp.local import run_local

    with open(a.config, "rb") as f:
        base = tomllib.load(f)
    base.update(tomllib.loads("\n".join(a.set)))
    results: dict[str, list[dict]] = {}
    for method in a.methods:
        for seed in a.seeds:
            name = f"{method}-s{seed}"
            if a.tabulate_only:
                with open(Path(base.get("results-dir", "results")) / name / "rounds.json") as f:
                    history = json.load(f)["rounds"]
            else:
                history = run_local({**base, "strategy": method, "seed": seed, "run-name": name}).history
            if a.upto_round:
                history = [r for r in history if r["round"] <= a.upto_round]
            results.setdefault(method, []).append(summarise(history, a.target))
            print(table(results, a.target), flush=True)
    text = table(results, a.target)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
