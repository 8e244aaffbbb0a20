"""A tabular and a text client's local step against a bare PyTorch loop over the same batches, on
the same thread: the overhead of fedapp's client (its hooks, BatchLoader, setting reads) on the
data of docs/own-model-and-data.md.

Tabular: the example's plants table (examples/own-model) with its own model ``mynet:build``, batch
32. Text: LEAF's Shakespeare (the raw plays in ../shared/data, or ``--data-dir``) with ``lstm``,
batch 10, one role's windows. Each trial times ``FedClient.train`` (FedAvg's local SGD: the client's
loader draws the batches) and the bare loop over the same batch indices (gather, forward,
cross-entropy, backward, SGD step), alternately; the ratio of the medians is printed with the load.

    python -m simulations.bench.own_data_step                 # about a minute on a quiet 2-core machine
    python -m simulations.bench.own_data_step --out results.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, also under -m

from common import ROOT, emit, load  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

EXAMPLE = ROOT / "examples" / "own-model"
SETTINGS = {
    "tabular": ({"model": "mynet:build", "dataset": "table", "data-dir": str(EXAMPLE / "data"),
                 "label-column": "kind", "client-column": "site", "partition": "natural", "num-clients": 4,
                 "batch-size": 32}, 200),
    "text": ({"model": "lstm", "dataset": "shakespeare", "partition": "natural", "num-clients": 2,
              "batch-size": 10}, 10),
}


def client_for(run_config: dict):
    from fedapp.runtime import registry
    from fedapp.runtime.registry import parse_run_config
    from fedapp.core.experiment import client_data, model_for
    from strategies.fedavg import FedAvg

    cfg = parse_run_config({**run_config, "device": "cpu", "seed": 0})
    data = client_data(cfg, 0)
    client = registry.get("fedavg").client(cfg, model_for(cfg, data), data, {}, "cpu")
    client.config = FedAvg.client_settings(cfg)
    return client


def bare_seconds(client, steps: int, seed: int, lr: float) -> float:
    """The same batches as ``client.local_sgd(steps, lr, seed)`` draws, through a bare loop."""
    loader = client.loader(seed)
    perms = []
    while sum(len(p) for p in perms) < steps * loader.batch_size:
        perms.append(loader._randperm())
    idx = torch.cat(perms)
    x, y, model = client.data.train_x, client.data.train_y, client.model
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    model.train()
    t0 = time.perf_counter()
    for i in range(steps):
        b = idx[i * loader.batch_size:(i + 1) * loader.batch_size]
        xb, yb = x[b], y[b]
        xb = xb.long() if not xb.is_floating_point() else xb
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
    return time.perf_counter() - t0


def client_seconds(client, steps: int, seed: int, lr: float) -> float:
    t0 = time.perf_counter()
    client.local_sgd(steps, lr, seed)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7)
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sys.path.insert(0, str(EXAMPLE))  # the example's model package
    import os

    os.environ.setdefault("FEDAPP_CACHE", tempfile.mkdtemp(prefix="fedapp-bench-"))
    for task, (run_config, steps) in SETTINGS.items():
        if task == "text":
            run_config = {**run_config, "data-dir": args.data_dir}
            if not any((Path(args.data_dir) / n).exists() for n in ("shakespeare.tar.gz", "shakespeare")):
                print(f"{task}: skipped, no raw plays in {args.data_dir}")
                continue
        client = client_for(run_config)
        client_seconds(client, 3, 0, 0.01)  # warm-up: first calls allocate
        fed, bare = [], []
        for trial in range(args.trials):  # alternately, so a change of the machine's load hits both
            fed.append(client_seconds(client, steps, trial, 0.01))
            bare.append(bare_seconds(client, steps, trial, 0.01))
        row = {"task": task, "steps": steps, "client_step_s": statistics.median(fed) / steps,
               "bare_step_s": statistics.median(bare) / steps,
               "ratio": statistics.median(fed) / statistics.median(bare), "trials": args.trials, "load": load()}
        emit(row, args.out)


if __name__ == "__main__":
    main()
