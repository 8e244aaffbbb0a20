"""PeFLL's Per-FedAvg, pFedMe and kNN-Per against FedAvg: one client's CPU seconds per round.

The setting is PeFLL's Table 1 CIFAR-10 100-client one (simulations/pefll/table1-cifar10-100c,
LeNet, batches of 32, the methods' files there); one seen client trains one round from the same
model and then evaluates, as the methods' rounds ask of it: FedAvg ``local-steps`` SGD steps and a
plain evaluation; Per-FedAvg one epoch of first-order iterations and an evaluation after one epoch
of fine-tuning; pFedMe one epoch of K personal steps a batch and the evaluation of its theta;
kNN-Per FedAvg's training and an evaluation that builds the datastore of its training features,
cross-validates k and lambda and evaluates the mixture. Each phase is timed in CPU seconds of this
process (one thread), which a loaded machine changes far less than wall time; the median of
``--repeats``, and each method's ratio to FedAvg.

    FEDAPP_DATA=<data folder> python simulations/bench/baselines_round.py --repeats 5 --out results/baselines.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import time
import tomllib

from common import ROOT, load, record

import torch

from fedapp.runtime import registry
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data, model_for

SETTING = ROOT / "simulations" / "pefll" / "table1-cifar10-100c"
METHODS = ("fedavg", "perfedavg", "pfedme", "knnper")


def cpu_seconds(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--pid", type=int, default=0, help="the (seen) client timed")
    p.add_argument("--out")
    a = p.parse_args()
    torch.set_num_threads(1)
    rows = {}
    for name in METHODS:
        cfg = parse_run_config(tomllib.loads((SETTING / f"{name}.toml").read_text()))
        spec = registry.get(name)
        data = client_data(cfg, a.pid)
        model = model_for(cfg, data)
        strategy = spec.strategy(cfg, model)
        payload = strategy.train_payload(a.pid, 1)
        train_config = {**strategy.client_config("train", a.pid, 1), "server-round": 1}
        eval_config = {**strategy.client_config("evaluate", a.pid, 1), "server-round": 1}
        train, evaluate = [], []
        for _ in range(a.repeats + 1):  # the first repeat warms the caches
            client = spec.client(cfg, model_for(cfg, data), data)
            train.append(cpu_seconds(lambda: client.answer_train(payload, train_config)))
            evaluate.append(cpu_seconds(lambda: client.evaluate(strategy.broadcast_payload("evaluate", 1), eval_config)))
        rows[name] = {"train": statistics.median(train[1:]), "evaluate": statistics.median(evaluate[1:])}
    base = rows["fedavg"]
    for name, r in rows.items():
        ratio = {k: r[k] / base[k] for k in r}
        total = (r["train"] + r["evaluate"]) / (base["train"] + base["evaluate"])
        print(f"{name}: train {r['train']:.3f} s ({ratio['train']:.2f}x FedAvg), evaluate {r['evaluate']:.3f} s "
              f"({ratio['evaluate']:.2f}x), round {total:.2f}x; {load()}", flush=True)
        record(a.out, bench="baselines-round", strategy=name, pid=a.pid, repeats=a.repeats, cpu_train=r["train"],
               cpu_evaluate=r["evaluate"], ratio_train=ratio["train"], ratio_evaluate=ratio["evaluate"],
               ratio_round=total)


if __name__ == "__main__":
    main()
