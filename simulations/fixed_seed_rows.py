"""Behaviour check for refactorings: a fixed-seed run of every registered strategy, its rows as JSON.

2 rounds, 6 clients of which 2 new (unseen-fraction 0.34), a 4-class 28x28 grey image tree made
here (class = bright quadrant), LeNet, 3 local steps, every round evaluated. The rows are written
without their timings, so two checkouts compare with a plain diff:

    PYTHONPATH=/path/to/checkout-a python simulations/fixed_seed_rows.py a.json
    PYTHONPATH=/path/to/checkout-b python simulations/fixed_seed_rows.py b.json
    diff a.json b.json

About a minute on one core. A strategy that refuses the setting is recorded with its error line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image

TIMINGS = {"train-seconds", "round-seconds", "wall-time"}


def image_tree(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for split, n in (("train", 30), ("test", 5)):
        for c in range(4):
            (root / split / str(c)).mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 80, (28, 28), dtype=np.uint8)
                img[14 * (c // 2):14 * (c // 2) + 14, 14 * (c % 2):14 * (c % 2) + 14] += 150
                Image.fromarray(img).save(root / split / str(c) / f"{i}.png")
    return root


def main(out: str) -> None:
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp())
    os.environ["FEDAPP_CACHE"] = str(tmp / "cache")
    tree = image_tree(tmp / "tree")

    from fedapp.runtime.inprocess import run_local
    from fedapp.runtime.registry import algorithms

    rows: dict[str, list | str] = {}
    for name in sorted(algorithms()):
        rc = {"strategy": name, "dataset": "imagefolder", "data-dir": str(tree), "model": "lenet",
              "partition": "pathological", "partition-classes": 2, "num-clients": 6, "unseen-fraction": 0.34,
              "num-server-rounds": 2, "batch-size": 8, "local-steps": 3, "seed": 1, "fraction-evaluate": 1.0,
              "results-dir": str(tmp / "results"), "run-name": name,
              "pefll.k": 3, "pefll.embed-dim": 3, "pefll.descriptor-batch": 8, "pfedhn.k": 3, "pfedhn.embed-dim": 3,
              "pfedhn.new-client-rounds": 2, "fedrep.head-steps": 3, "fedals.alpha": 2}
        try:
            rows[name] = [{k: v for k, v in r.items() if k not in TIMINGS} for r in run_local(rc).history]
        except Exception as exc:  # the same refusal on both checkouts compares equal
            rows[name] = f"{type(exc).__name__}: {exc}"
        print(name, "ok" if isinstance(rows[name], list) else rows[name], file=sys.stderr, flush=True)
    Path(out).write_text(json.dumps(rows, default=float, indent=0, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
