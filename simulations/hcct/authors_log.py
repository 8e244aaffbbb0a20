"""Summarise logs of the HCCT authors' main_cluster.py into the rows of a table's ``authors.json``.

    python -m simulations.hcct.authors_log --seed 0 hcct:LOG ... > rows.json
    python -m simulations.hcct.authors_log --seed 0 --into simulations/hcct/summaries/table4/cifar10/authors.json \
        hcct:HCCT_LOG local:LOCAL_LOG global:GLOBAL_LOG

(LOG: the output of ``python main_cluster.py ...`` in the authors' checkout, with their venv; their
scheme ``local`` is our ``independent``.) Their log prints after every epoch "Model performance: mean
..." and the dict of each client's local test accuracy (%), then "Best performance" and the dict of
each client's best so far; "Cluster Result" lines carry HCCT's groups (one per epoch from the second
on). Errors here are 1 - accuracy, as fractions like our summary rows. A log whose lines are
prefixed by the seconds since start and a tab also gives
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

from simulations.tables import dumps

METHODS = {"local": "independent"}  # their scheme names that are not ours


def summarise(path: str) -> dict:
    stamped = [line.split("\t", 1) if re.match(r"\d+\.\d+\t", line) else [None, line]
               for line in open(path).read().splitlines()]
    lines = [line for _, line in stamped]
    now = [ast.literal_eval(lines[i + 1]) for i, l in enumerate(lines) if l.startswith("Model performance")]
    best = [ast.literal_eval(lines[i + 1]) for i, l in enumerate(lines) if l.startswith("Best performance")]
    groups = [l for l in lines if l.startswith("Cluster Result")]
    final = {str(p): round(1 - a / 100, 6) for p, a in now[-1].items()}
    curve = [[e, round(float(np.mean([1 - a / 100 for a in acc.values()])), 6)] for e, acc in enumerate(now, 1)]
    # their best-so-far dict holds every client of the split, 0 for one not yet arrived (--goal n_new):
    # the mean is over the clients present at the end, as the error's is
    out = {"value": curve[-1][1], "rounds": len(now), "curve": curve,
           "error-best": round(float(np.mean([1 - best[-1][int(p)] / 100 for p in final])), 6),
           "client-error": final}
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
    """``authors.json`` of summaries/<table>/<column>/ (its folder names the table and column)."""
    path.write_text(dumps({"paper": "hcct", "table": path.parent.parent.name, "column": path.parent.name,
                           "code": "hiyuchang/HCCT 5c5b4d53 main_cluster.py", "rows": rows}))


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
        rows.append({"method": METHODS.get(method, method), **seed, **summarise(path)})
    if a.into is None:
        print(dumps(rows), end="")
    else:
        stored = json.loads(a.into.read_text())["rows"] if a.into.exists() else []
        write_rows(a.into, merge(stored, rows))


if __name__ == "__main__":
    main()
