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

A method with a second learning rate is searched over both: ``--grid2 KEY V1 V2 ...`` (a key under the
method's prefix, as Per-FedAvg's outer step ``perfedavg.beta``) runs every lr of ``--grid`` at every
value of KEY, for the methods whose key it is; each probe records its KEY value (probes stored before,
without one, ran at the setting file's value), and the winner is the best pair, flagged at the edge
when either coordinate is.

    python simulations/pefll/tune_lr.py simulations/pefll/cifar10-100c-authors \
        --methods fedavg perfedavg fedrep pfedme knnper --rounds 100
    python simulations/pefll/tune_lr.py simulations/pefll/cifar10-100c-authors --methods perfedavg \
        --rounds 100 --grid2 perfedavg.beta 0.001 0.01 0.1
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


RECORD = {"method", "lr", "score", "seconds", "stopped"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("setting", type=Path, help="a folder of <method>.toml files")
    ap.add_argument("--methods", nargs="+", default=["fedavg", "perfedavg", "fedrep", "pfedme", "knnper"])
    ap.add_argument("--grid", nargs="+", type=float, default=[0.003, 0.01, 0.03])
    ap.add_argument("--grid2", nargs="+", metavar=("KEY", "VALUE"), default=[],
                    help="a second learning rate of a method (a key under its prefix) and its values")
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
        base = read(args.setting / f"{method}.toml") | overrides(args.set)
        key = args.grid2[0] if args.grid2 and args.grid2[0].startswith(f"{method}.") else None
        values = [float(v) for v in args.grid2[1:]] if key else [None]
        scores = stored_scores(doc["probes"], method, base, key)
        for lr in args.grid:
            for v in values:
                if (lr, v) not in scores:
                    scores[lr, v] = probe(args, out, doc, method, base, lr, key, v)
        best = max((p for p in sorted(scores) if scores[p] is not None), key=scores.get)
        lrs, vs = {p[0] for p in scores}, {p[1] for p in scores}
        doc["winner"][method] = {"lr": best[0], **({key: best[1]} if key else {}),
                                 "at-edge": best[0] in (min(lrs), max(lrs)) or bool(key) and best[1] in (min(vs), max(vs))}
        out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["winner"]))


def stored_scores(probes: list, method: str, base: dict, key: str | None) -> dict:
    """The stored probes of ``method`` by (lr, value of ``key``): a probe without a value of a key ran at
    the setting's; without ``key``, only probes at the setting's values of every such key count."""
    scores = {}
    for p in probes:
        extra = {k: v for k, v in p.items() if k not in RECORD}
        at = {k: extra.get(k, base.get(k)) for k in set(extra) | ({key} if key else set())}
        if p["method"] == method and all(at[k] == base.get(k) for k in at if k != key):
            scores[p["lr"], at[key] if key else None] = p["score"]
    return scores


def probe(args, out: Path, doc: dict, method: str, base: dict, lr: float, key: str | None, v) -> float | None:
    """One probe: the method at ``lr`` (and ``key`` = ``v``) for ``--rounds`` rounds, stored as it ends."""
    second = {key: v} if key else {}
    cfg = base | second | {
        "lr": lr, "seed": args.seed, "num-server-rounds": args.rounds, "eval-every": args.rounds,
        "checkpoint-every": 0, "results-dir": str(out.parent / "lr-probes"),
        "run-name": f"{method}-lr{lr:g}" + (f"-{key}{v:g}" if key else "") + f"-s{args.seed}"}
    t0 = time.time()
    try:
        last = run_local(cfg).history[-1]
    except RuntimeError as exc:  # diverged: every reply non-finite, the run stopped
        last, stopped = {SCORE: None}, str(exc).splitlines()[0]
    else:
        stopped = None
    if SCORE not in last:
        sys.exit(f"{method}: the probe reports no {SCORE} (a setting without validation splits?)")
    doc["probes"].append({"method": method, "lr": lr, **second, "score": last[SCORE],
                          "seconds": round(time.time() - t0, 1), **({"stopped": stopped} if stopped else {})})
    out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc["probes"][-1]), flush=True)
    return last[SCORE]


if __name__ == "__main__":
    main()
