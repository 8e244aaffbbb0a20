"""Benchmark 3: images per second of the client training loop against pure compute.

``loop``: ``FedClient.train`` (BatchLoader: gather, crop/flip, normalise; SGD hooks) on one
CIFAR-10 client's data. ``compute``: forward, backward and step of the same model on
batches built beforehand and held in memory. The ratio loop/compute is the data path's
efficiency; ``batch`` times the loader alone. Timed in CPU seconds of this one-thread
process (``time.process_time``), so other load on the machine changes little.

    python simulations/bench/data_path.py --steps 300 --repeats 5 --threads 1
"""

from __future__ import annotations

import argparse
import time

from common import BASE, fmt, load, record, stats

import torch
import torch.nn.functional as F

from clients.base import FedClient
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data
from fedapp.core.models import build_model
from strategies.fedavg import FedAvg


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--model", default=BASE["model"])
    p.add_argument("--out")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    cfg = parse_run_config({**BASE, "model": a.model})
    data = client_data(cfg, 0)
    model = build_model(cfg.model, tuple(data.train_x.shape[1:]), data.num_classes)
    client = FedClient(cfg, model, data)
    client.config = FedAvg.client_settings(cfg)  # the settings a training message carries
    bs = cfg.batch_size
    loader = client.loader(0)
    batches = [loader.next_batch() for _ in range(a.steps)]
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr)

    def compute() -> float:
        t0 = time.process_time()
        for x, y in batches:
            opt.zero_grad(set_to_none=False)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return time.process_time() - t0

    def loop() -> float:
        t0 = time.process_time()
        client.local_sgd(a.steps, cfg.lr, seed=1)
        return time.process_time() - t0

    def batch() -> float:
        ld = client.loader(2)
        t0 = time.process_time()
        for _ in range(a.steps):
            ld.next_batch()
        return time.process_time() - t0

    compute(), loop()  # warm-up
    res = {name: [] for name in ("compute", "loop", "batch")}
    for _ in range(a.repeats):  # interleaved, so load changes hit both alike
        for name, fn in (("compute", compute), ("loop", loop), ("batch", batch)):
            res[name].append(a.steps * bs / fn())
    ratios = [lp / c for lp, c in zip(res["loop"], res["compute"])]
    for name, xs in res.items():
        print(f"{name}: {fmt(stats(xs), ' img/s')}")
    print(f"loop/compute: {fmt(stats(ratios), '')}; {a.threads} threads; {load()}")
    record(a.out, bench="data-path", model=cfg.model, threads=a.threads, steps=a.steps,
           **{f"{k}-img-s": stats(v) for k, v in res.items()}, ratio=stats(ratios), ratios=ratios)


if __name__ == "__main__":
    main()
