"""NCHW against channels-last (NHWC) image batches on CPU: a client's local training (run config
``channels-last``) and ``fedapp.core.training.evaluate`` (always channels-last on CPU), per model, one
torch thread, the two layouts alternated, one JSON line per model.

Training is ``FedClient.train`` (the app's loader: gather, crop/flip, normalise, then the SGD steps)
on random CIFAR-sized uint8 images, batch 32; evaluation is ``evaluate`` over 512 of them. Medians of
``--repeats`` alternations.

    python -m simulations.bench.layout --out simulations/bench/results/layout.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, also under -m

from common import record  # noqa: E402

#: SGD steps a training measurement takes, per model (a few seconds each on one core)
STEPS = {"lenet": 100, "hcct-cnn": 20, "resnet20": 8, "resnet18gn-cifar": 4}
MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


def train_seconds(model_name: str, nhwc: bool, x: torch.Tensor, y: torch.Tensor) -> float:
    from clients.base import FedClient
    from fedapp.runtime.registry import parse_run_config
    from fedapp.core.experiment import ClientData
    from fedapp.core.models import build_model

    cfg = parse_run_config({"strategy": "fedavg", "dataset": "cifar10", "partition": "iid", "model": model_name,
                            "channels-last": nhwc})
    torch.manual_seed(0)
    client = FedClient(cfg, build_model(model_name, (3, 32, 32), 10),
                       ClientData(0, x, y, x[:0], y[:0], 10, MEAN, STD, True), device="cpu")
    client.config = {"batch-size": 32, "momentum": 0.9, "weight-decay": 0.0, "grad-clip": 0.0,
                     "augment-recipe": "standard"}
    t = time.perf_counter()
    client.local_sgd(STEPS[model_name], 0.01, seed=1)
    return time.perf_counter() - t


def eval_seconds(model_name: str, nhwc: bool, x: torch.Tensor, y: torch.Tensor) -> float:
    import fedapp.core.training as training
    from fedapp.core.models import build_model

    model = build_model(model_name, (3, 32, 32), 10)
    saved = training.CHANNELS_LAST
    training.CHANNELS_LAST = {"cpu"} if nhwc else set()
    try:
        t = time.perf_counter()
        training.evaluate(model, x, y, mean=MEAN, std=STD)
        return time.perf_counter() - t
    finally:
        training.CHANNELS_LAST = saved


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", default=list(STEPS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", help="also append the lines to this file")
    args = p.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (512, 3, 32, 32), dtype=torch.uint8, generator=g)
    y = torch.randint(0, 10, (512,), generator=g)
    for name in args.models:
        times = {(kind, nhwc): [] for kind in ("train", "eval") for nhwc in (False, True)}
        for _ in range(args.repeats):
            for nhwc in (False, True):
                times["train", nhwc].append(train_seconds(name, nhwc, x, y))
                times["eval", nhwc].append(eval_seconds(name, nhwc, x, y))
        med = {k: statistics.median(v) for k, v in times.items()}
        record(args.out, bench="layout", date=time.strftime("%Y-%m-%d"), **{"model": name, "threads": 1, "train_steps": STEPS[name], "batch": 32,
              "train_nchw_s": round(med["train", False], 4), "train_nhwc_s": round(med["train", True], 4),
              "train_speedup": round(med["train", False] / med["train", True], 3),
              "eval_images": len(y), "eval_nchw_s": round(med["eval", False], 4),
              "eval_nhwc_s": round(med["eval", True], 4),
              "eval_speedup": round(med["eval", False] / med["eval", True], 3),
              "repeats": args.repeats})


if __name__ == "__main__":
    main()
