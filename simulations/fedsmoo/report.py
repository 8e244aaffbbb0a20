"""FedSMOO's summary of a run and its table (``python -m simulations.run ... --methods ...``): final and
best central accuracy, the first evaluated round reaching ``--target``, traffic and time per round;
one table row per method, mean (and spread over seeds when several)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def summarize(history: list[dict], config: dict, args) -> dict:
    """Final/best central accuracy, first evaluated round reaching ``args.target``, traffic and time per round."""
    if args.upto_round:
        history = [r for r in history if r["round"] <= args.upto_round]
    evals = [(r["round"], r["central-accuracy"]) for r in history if r["round"] > 0 and "central-accuracy" in r]
    trained = [r for r in history if r["round"] > 0]
    reached = next((rnd for rnd, acc in evals if acc >= args.target), None)
    return {
        "final": evals[-1][1], "best": max(acc for _, acc in evals), "reached": reached,
        "down": statistics.mean(r["train-bytes-down"] for r in trained),
        "up": statistics.mean(r["train-bytes-up"] for r in trained),
        "seconds-per-round": statistics.median(r["train-seconds"] for r in trained),
    }


def table(out: Path, rows: list[dict], methods: list[str], args) -> str:
    """One row per method, from the runs' rounds.json (so ``--target`` and ``--upto-round`` may change)."""
    results: dict[str, list[dict]] = {}
    for r in rows:
        if r["method"] in methods:
            history = json.loads((out / r["run"] / "rounds.json").read_text())["rounds"]
            results.setdefault(r["method"], []).append(summarize(history, {}, args))
    target = args.target
    lines = [f"| method | final acc | best acc | rounds to {target:.0%} | MB down/round | MB up/round "
             "| s/round (train) |",
             "|---|---|---|---|---|---|---|"]
    for method, runs in results.items():
        def fmt(key, scale=1.0, digits=4):
            vals = [r[key] * scale for r in runs]
            mean = statistics.mean(vals)
            return f"{mean:.{digits}f}" + (f" ± {statistics.stdev(vals):.{digits}f}" if len(vals) > 1 else "")
        reach = ", ".join("not reached" if r["reached"] is None else str(r["reached"]) for r in runs)
        lines.append(f"| {method} | {fmt('final')} | {fmt('best')} | {reach} | {fmt('down', 1e-6, 2)} | "
                     f"{fmt('up', 1e-6, 2)} | {fmt('seconds-per-round', 1.0, 1)} |")
    return "\n".join(lines)
