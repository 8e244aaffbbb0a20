"""Summarise logs of the HCCT authors' main_cluster.py into the summary rows of simulations/hcct/report.py.

    python simulations/hcct/authors_log.py hcct:/work/runs/hcct/authors-fmnist-hcct-s0.log ... > out.json
    python simulations/hcct/authors_log.py --seed 0 hcct:/work/runs/hcct/authors-hcct-cifar10-s0.log > out.json
    python simulations/hcct/authors_log.py --seed 0 --into simulations/hcct/summaries/authors-cifar10.json \
        local:/work/runs/hcct/authors-local-cifar10-s0.log global:/work/runs/hcct/authors-global-cifar10-s0.log

Their log prints after every epoch "Model performance: mean ..." and the dict of each client's
local test accuracy (%), then "Best performance" and the dict of each client's best so far;
"Cluster Result" lines carry HCCT's groups (one per epoch from the second on). Errors here are 100 - accuracy, in %. A log written
through the anchors' ``tslog.py`` (each line prefixed by the seconds since start and a tab) also gives
the seconds per epoch: the median interval between successive "Model performance" lines, split into
training (up to the epoch's last "Client i local loss" line) and the local evaluation after it.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from pathlib import Path

import numpy as np


def summarise(path: str) -> dict:
    stamped = [line.split("\t", 1) if re.match(r"\d+\.\d+\t", line) else [None, line]
               for line in open(path).read().splitlines()]
    lines = [line for _, line in stamped]
    now = [ast.literal_eval(lines[i + 1]) for i, l in enumerate(lines) if l.startswith("Model performance")]
    best = [ast.literal_eval(lines[i + 1]) for i, l in enumerate(lines) if l.startswith("Best performance")]
    groups = [l for l in lines if l.startswith("Cluster Result")]
    final = {int(p): 100 - a for p, a in now[-1].items()}
    # their best-so-far dict holds every client of the split, 0 for one not yet arrived (--goal n_new):
    # the mean is over the clients present at the end, as the error's is
    out = {"epochs": len(now), "error": float(np.mean(list(final.values()))),
           "error-best": float(np.mean([100 - best[-1][p] for p in final])),
           "error-std": float(np.std(list(final.values()))), "error-min": min(final.values()),
           "error-max": max(final.values()), "client-error": final,
           "curve": [round(float(np.mean([100 - a for a in e.values()])), 4) for e in now]}
    # one pass: each "Model performance" stamp, and the last "Client i local loss" stamp before it
    stamps, last_client, client = [], [], None
    for t, line in stamped:
        if t is None:
            continue
        if line.startswith("Client "):
            client = float(t)
        elif line.startswith("Model performance"):
            stamps.append(float(t))
            last_client.append(client)
            client = None
    if len(stamps) > 1:
        out["seconds-per-epoch"] = round(float(np.median(np.diff(stamps))), 2)
        # within an epoch: training (up to its last client line), then the local evaluation
        split = [(c - a, b - c) for a, b, c in zip(stamps, stamps[1:], last_client[1:]) if c is not None]
        if split:
            out["train-seconds-per-epoch"] = round(float(np.median([x for x, _ in split])), 2)
            out["eval-seconds-per-epoch"] = round(float(np.median([y for _, y in split])), 2)
    if groups:
        per_epoch = [sorted(sorted(g) for g in ast.literal_eval(line.split("groups are ", 1)[1]).values() if g)
                     for line in groups]
        out["groups"], out["groups-per-epoch"] = per_epoch[-1], per_epoch
    return out


def merge(stored: list[dict], new: list[dict]) -> list[dict]:
    """``stored`` rows with each of ``new`` in place of the stored row of its method and seed."""
    key = lambda r: (r["method"], r.get("seed"))  # noqa: E731
    fresh = {key(r) for r in new}
    return [*(r for r in stored if key(r) not in fresh), *new]


def write_rows(path: Path, rows: list[dict]) -> None:
    """A summary file, one run per line: the per-epoch groups and client errors would take thousands of
    lines indented."""
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, help="the --seed the runs were given, recorded in every row")
    p.add_argument("--into", type=Path, help="a summary file to merge the rows into, instead of printing them")
    p.add_argument("logs", nargs="+", metavar="METHOD:LOG")
    a = p.parse_args()
    seed = {} if a.seed is None else {"seed": a.seed}
    rows = []
    for arg in a.logs:
        method, path = arg.split(":", 1)
        rows.append({"method": method, "code": "authors", **seed, **summarise(path)})
    if a.into is None:
        print(json.dumps(rows, indent=1))
    else:
        stored = json.loads(a.into.read_text()) if a.into.exists() else []
        write_rows(a.into, merge(stored, rows))


if __name__ == "__main__":
    main()
