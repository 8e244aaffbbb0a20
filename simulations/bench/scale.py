"""Benchmark 4: 1,000 simulated clients, 5% sampled per round, through `flwr run`.

Peak memory is the largest sum of resident set sizes, sampled every 0.5 s, over the run's
process tree (the local SuperLink, the simulation process with the ServerApp, Ray and its
workers; common.Monitor). RSS counts shared library pages once per process, so the sum is an
upper bound.

    python simulations/bench/scale.py --strategy fedavg --repeats 3 --out bench.jsonl
    python simulations/bench/scale.py --strategy scaffold --model resnet18gn --state-memory-mb 512  # spills
"""

from __future__ import annotations

import argparse
import statistics

from common import BASE, fmt, flwr_run, load, record, stats


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", default="fedavg")
    p.add_argument("--num-clients", type=int, default=1000)
    p.add_argument("--fraction", type=float, default=0.05)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--local-steps", type=int, default=BASE["local-steps"])
    p.add_argument("--model", default=BASE["model"])
    p.add_argument("--state-memory-mb", type=float, default=None)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    cfg = {**BASE, "strategy": a.strategy, "num-clients": a.num_clients, "fraction-train": a.fraction,
           "fraction-evaluate": a.fraction, "num-server-rounds": a.rounds, "eval-every": a.rounds,
           "local-steps": a.local_steps, "model": a.model, "node-wait-timeout": 600.0}
    if a.state_memory_mb is not None:
        cfg["state-memory-mb"] = a.state_memory_mb
    per_round, cpu, peaks, outside = [], [], [], []
    for i in range(a.repeats):
        r = flwr_run(cfg)
        per_round.append(statistics.median(r["train"][1:] or r["train"]))
        cpu.append(statistics.median(r["cpu"][1:-1] or r["cpu"]))
        peaks.append(r["peak-mib"])
        outside.append(r["outside-rounds"])
        print(f"run {i}: rounds {[round(t, 2) for t in r['train']]} s, CPU {[round(t, 2) for t in r['cpu']]} s, "
              f"peak {r['peak-mib']:.0f} MiB, outside rounds {r['outside-rounds']:.1f} s; {load()}", flush=True)
    print(f"{a.strategy} x{a.num_clients} at {a.fraction}: {fmt(stats(per_round))} per round, peak "
          f"{fmt(stats(peaks), ' MiB')}, outside rounds {fmt(stats(outside))}")
    record(a.out, bench="scale", strategy=a.strategy, model=a.model, clients=a.num_clients, fraction=a.fraction,
           steps=a.local_steps, per_round=stats(per_round), cpu=stats(cpu), peak_mib=stats(peaks), outside=stats(outside),
           state_memory_mb=a.state_memory_mb)


if __name__ == "__main__":
    main()
