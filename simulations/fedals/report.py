"""FedALS's summary of a run and its table: the mean central accuracy of the averaged model over the
last 5 evaluations and the traffic per client; the table compares every run of the results folder
(also runs still going or stopped) up to the last evaluated round all of them completed."""

from __future__ import annotations

import json
from pathlib import Path


def summarize(history: list[dict], config: dict, args=None) -> dict:
    evals = [r for r in history if r["round"] > 0 and "central-accuracy" in r][-5:]
    last = history[-1]
    params = last.get("total-train-params-down", 0) + last.get("total-train-params-up", 0)
    params /= config.get("num-clients", 10)
    return {"rounds": last["round"], "acc-last5": sum(r["central-accuracy"] for r in evals) / len(evals),
            "acc-last": evals[-1]["central-accuracy"], "train-params-per-client": params,
            "train-bytes": last.get("total-train-bytes-down", 0) + last.get("total-train-bytes-up", 0),
            "eval-bytes": last.get("total-eval-bytes-down", 0) + last.get("total-eval-bytes-up", 0)}


def table(out: Path, rows: list[dict], methods: list[str], args=None) -> str:
    runs = {p.parent.name: json.loads(p.read_text()) for p in sorted(out.glob("*/rounds.json"))}
    upto = min(max(r["round"] for r in doc["rounds"] if "central-accuracy" in r) for doc in runs.values())
    if upto == 0:
        return "No run has been evaluated after training yet."
    lines = [f"Up to round {upto}.", "",
             "| run | rounds | acc. last 5 evals | last acc. | params sent per client | train MB | eval MB |",
             "|---|---|---|---|---|---|---|"]
    for name, doc in runs.items():
        r = summarize([row for row in doc["rounds"] if row["round"] <= upto], doc["config"])
        lines.append(f"| {name} | {r['rounds']} | {r['acc-last5']:.4f} | {r['acc-last']:.4f} | "
                     f"{r['train-params-per-client'] / 1e6:.3f}M | {r['train-bytes'] / 1e6:.1f} | "
                     f"{r['eval-bytes'] / 1e6:.1f} |")
    return "\n".join(lines)
