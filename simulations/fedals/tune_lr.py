"""Learning-rate search of the FedALS paper (Appendix E.3) on short probes, one per (method, lr).

    python simulations/fedals/tune_lr.py simulations/fedals/cpu-cifar10-resnet20.toml \
        --methods simulations/fedals/methods/fedavg.toml simulations/fedals/methods/fedals.toml \
        --rounds 10 --eval-every 5 --test-subset 1000

E.3: start at 0.01, multiply and divide by powers of two, stop at a local optimum (a learning rate
better than both neighbours). Here each method first probes 0.005, 0.01, 0.02; while the best is at
an edge of the probed grid the grid is extended by one factor of two in that direction, at most
``--max-extend`` times. A probe is the run config cut to ``--rounds`` rounds, evaluated every
``--eval-every`` rounds on a fixed ``--test-subset`` images of the test set (the first ones of a
seeded permutation); its score is the mean accuracy of the averaged model over its evaluations
after round 0. A method is a run-config file layered on the setting file, as in ``simulations/run.py``.
Results, one row per probe as it ends, go to results/fedals/<stem>/<name>.json (``--name``, default
lr-tuning) together with each method's winner (written into the method's setting, cpu/<column>/<method>.toml). A probe
already in that file with the same probe settings is not run again (so ``--max-extend`` can be raised on a
finished search, or methods added to it); another setting (``--set partition="iid"``) or probe length
needs its own ``--name``, since a file with other probe settings is started afresh.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import fedapp.server.rounds  # noqa: E402
from fedapp.runtime.inprocess import run_local  # noqa: E402
from simulations.run import overrides, read  # noqa: E402


@contextmanager
def subset_evaluation(n: int, seed: int = 0):
    """The central evaluation (``fedapp.server.rounds.evaluate``) restricted to a fixed subset of n test images
    while the probes run, and the full one again after: a run that follows in the same process (a test's)
    evaluates on the whole test set."""
    full = fedapp.server.rounds.evaluate

    def evaluate(model, x, y, **kw):
        idx = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed))[:n]
        return full(model, x[idx], y[idx], **kw)
    fedapp.server.rounds.evaluate = evaluate
    try:
        yield
    finally:
        fedapp.server.rounds.evaluate = full


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", type=Path)
    ap.add_argument("--methods", nargs="+", type=Path, help="method files (simulations/fedals/methods/*.toml)",
                    default=[ROOT / "simulations/fedals/methods" / f"{m}.toml" for m in ("fedavg", "fedals")])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=10)
    ap.add_argument("--test-subset", type=int, default=2000)
    ap.add_argument("--max-extend", type=int, default=1)
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE overrides (TOML values)")
    ap.add_argument("--name", default="lr-tuning", help="results file stem under results/fedals/<setting stem>/")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with subset_evaluation(args.test_subset):
        search(args)


def search(args: argparse.Namespace) -> None:
    """Appendix E.3's search for each method: lr 0.005, 0.01, 0.02, extended by halving or doubling while the best
    is at an end of the grid (at most ``--max-extend`` times); each probe's score and the winners in a results file
    that a rerun with the same probe settings resumes."""
    base = read(args.config) | overrides(args.set)
    base.update({"num-server-rounds": args.rounds, "eval-every": args.eval_every, "checkpoint-every": 0})
    out = ROOT / "results" / "fedals" / args.config.stem
    out.mkdir(parents=True, exist_ok=True)
    doc = {"config": str(args.config), "probe": {"rounds": args.rounds, "eval-every": args.eval_every,
                                                 "test-subset": args.test_subset, "seed": base.get("seed", 0)},
           "probes": [], "winner": {}}
    if args.set:
        doc["probe"]["set"] = args.set
    path = out / f"{args.name}.json"
    if path.exists() and json.loads(path.read_text())["probe"] == doc["probe"]:
        doc = json.loads(path.read_text())
    for method_file in args.methods:
        method, layer = method_file.stem, read(method_file)
        scores = {p["lr"]: p["score"] for p in doc["probes"] if p["method"] == method}

        def probe(lr: float) -> None:
            if lr in scores:
                return
            name = f"probe-{method}-lr{lr:g}"
            t0 = time.time()
            strategy = run_local({**base, **layer, "lr": lr, "results-dir": str(out / "probes"),
                                  "run-name": name})
            accs = [r["central-accuracy"] for r in strategy.history if r["round"] > 0 and "central-accuracy" in r]
            scores[lr] = sum(accs) / len(accs)
            doc["probes"].append({"method": method, "lr": lr, "accuracies": accs, "score": scores[lr],
                                  "seconds": round(time.time() - t0, 1)})
            path.write_text(json.dumps(doc, indent=1))
            print(json.dumps(doc["probes"][-1]), flush=True)

        for lr in (0.005, 0.01, 0.02):
            probe(lr)
        for _ in range(args.max_extend):
            grid = sorted(scores)
            best = max(grid, key=scores.get)
            if best not in (grid[0], grid[-1]):
                break
            probe(best / 2 if best == grid[0] else best * 2)
        grid = sorted(scores)
        best = max(grid, key=scores.get)
        doc["winner"][method] = {"lr": best, "local-optimum": best not in (grid[0], grid[-1])}
        path.write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
