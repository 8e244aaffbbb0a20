"""Fault sweep of docs/reliability.md ("Measured fault sweep"): every fault kind that makes a reply
invalid (``fedapp.runtime.faults.KINDS``: raise, stall, wrong-shape, nan, inf) on 30% of 10 MNIST
clients, each run compared with the same run where those clients are offline.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. python simulations/fault_sweep.py --out rows.json

Setting: MNIST (decoded in ``~/.cache/fedapp``), Dirichlet(0.5) partition, LeNet, 3 rounds of 5 local
steps, seed 1; SCAFFOLD and FedSMOO without federated evaluation. For each strategy and kind the script
prints and stores one row: strategy, kind, faulty partitions, rounds done, rounds skipped, dropped
replies by reason over all rounds, whether the server state is finite, the largest absolute difference
of the server's checkpointed state from the offline run's, whether every per-round metric equals the
offline run's (timing and ``dropped-reasons`` aside, and the bytes uploaded where the faulty replies
did arrive) and the final accuracy.
"""

from __future__ import annotations

import argparse
import json
import tempfile

import torch

from fedapp.runtime.checkpoint import _pack, attrs_of
from fedapp.runtime.client_app import app
from fedapp.runtime.faults import KINDS, faulty_partitions
from fedapp.runtime.inprocess import InProcessGrid
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.server_app import build_strategy

BASE = {"num-clients": 10, "num-server-rounds": 3, "dataset": "mnist", "partition": "dirichlet", "model": "lenet",
        "local-steps": 5, "batch-size": 32, "seed": 1, "checkpoint-every": 0, "run-name": "sweep"}
#: the strategies swept, with their own settings
EXTRA = {"fedavg": {}, "scaffold": {"fraction-evaluate": 0.0}, "fedsmoo": {"fraction-evaluate": 0.0},
         "fedals": {"fedals.alpha": 2}, "hcct": {}, "pefll": {"pefll.k": 5}}
#: row keys that differ between two runs of the same computation
SKIP = ("wall-time", "train-seconds", "round-seconds", "dropped-reasons")


def run(rc: dict, offline=()):
    """The finished strategy of an in-process run of ``rc``, the partitions ``offline`` answering
    discovery only (connected clients that never reply)."""
    cfg = parse_run_config(rc)
    grid = InProcessGrid(app, cfg.num_clients, rc)
    grid.offline = {101 + p for p in offline}
    s = build_strategy(cfg)
    s.start(grid)
    return s


def state(s) -> torch.Tensor:
    """The server's model and algorithm state (what a checkpoint holds, less the rows) as one flat tensor."""
    out = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            out.append(v.double().reshape(-1))
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk({a: _pack(getattr(s, a)) for a in attrs_of(s) if a != "history"})
    return torch.cat(out)


def comparable(row: dict, uploads_differ: bool) -> dict:
    return {k: v for k, v in row.items() if k not in SKIP and not (uploads_differ and "-up" in k)}


def sweep(results_dir: str, strategies) -> list[tuple]:
    rows = []
    for name in strategies:
        rc = {**BASE, "results-dir": results_dir, "strategy": name, **EXTRA[name]}
        bad = faulty_partitions(parse_run_config({**rc, "fault-fraction": 0.3}))
        ref = run(rc, offline=bad)
        for kind in KINDS:
            s = run({**rc, "fault-fraction": 0.3, "fault-kind": kind})
            reasons: dict[str, int] = {}
            for r in s.history[1:]:
                for k, v in r["dropped-reasons"].items():
                    reasons[k] = reasons.get(k, 0) + v
            # these replies arrived (and were dropped), so their bytes count as uploaded
            up = kind in ("wrong-shape", "nan", "inf")
            same = all(comparable(a, up) == comparable(b, up) for a, b in zip(s.history, ref.history))
            last = s.history[-1]
            rows.append((name, kind, sorted(bad), len(s.history) - 1, sum(r.get("skipped", 0) for r in s.history),
                         reasons, bool(torch.isfinite(state(s)).all()), float((state(s) - state(ref)).abs().max()),
                         same, last.get("central-accuracy", last.get("fed-accuracy"))))
            print(rows[-1], flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="rows.json", help="where the rows go (JSON)")
    p.add_argument("--results-dir", default="", help="the runs' results folders ('' a temporary folder)")
    p.add_argument("--strategies", nargs="+", default=list(EXTRA), choices=list(EXTRA))
    args = p.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rows = sweep(args.results_dir or tmp, args.strategies)
    with open(args.out, "w") as f:
        json.dump(rows, f)


if __name__ == "__main__":
    main()
