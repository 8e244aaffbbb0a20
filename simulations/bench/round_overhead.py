"""Benchmarks 1 and 2: seconds per round through `flwr run` (Ray) against the floor.

Runs benchmark 1 (CIFAR-10, LeNet, 20 clients, 50 steps of 32, 10 rounds) for one
strategy ``--repeats`` times, then once more with 1 local step to get the fixed cost per
client message. Seconds per round are the median of rounds 2..R ``train-seconds`` of each
run (round 1 also pays each Ray worker's first import of torch models and data);
CPU per round is the CPU seconds of the run's whole process tree
(SuperLink, simulation with the ServerApp, Ray, workers) per round, which a loaded machine
changes far less than wall time. "Outside rounds" is launch wall time minus the rounds: SuperLink + Ray start-up, workers
loading the data, discovery, shut-down.

    python simulations/bench/round_overhead.py --strategy fedavg --repeats 3 --out bench.jsonl
    python simulations/bench/round_overhead.py --strategy fedavg --rounds 3 --num-clients 4 --local-steps 5  # smoke
"""

from __future__ import annotations

import argparse
import statistics

from common import BASE, fmt, flwr_run, load, record, stats


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--strategy", default="fedavg")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=BASE["num-server-rounds"])
    p.add_argument("--num-clients", type=int, default=BASE["num-clients"])
    p.add_argument("--local-steps", type=int, default=BASE["local-steps"])
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs per simulated client (Ray resources)")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPU share per client, e.g. 0.25")
    p.add_argument("--extra", default="", help="more run-config overrides, e.g. \"num-threads=1\"")
    p.add_argument("--skip-one-step", action="store_true")
    p.add_argument("--out")
    a = p.parse_args()
    from fedapp.core.compat import parse_config_args

    cfg = {**BASE, "strategy": a.strategy, "num-server-rounds": a.rounds, "num-clients": a.num_clients,
           "local-steps": a.local_steps, "eval-every": a.rounds, **parse_config_args([a.extra] if a.extra else [])}
    per_round, cpu, outside, first = [], [], [], []
    for i in range(a.repeats):
        r = flwr_run(cfg, a.num_cpus, a.num_gpus)
        per_round.append(statistics.median(r["train"][1:] or r["train"]))
        cpu.append(statistics.median(r["cpu"][1:-1] or r["cpu"]))  # not round 1 (warm-up), not the last (eval)
        outside.append(r["outside-rounds"])
        first.append(r["train"][0])
        print(f"run {i}: rounds {[round(t, 2) for t in r['train']]} s, CPU {[round(t, 2) for t in r['cpu']]} s, "
              f"outside rounds {r['outside-rounds']:.1f} s, wall {r['wall']:.1f} s; {load()}", flush=True)
    s, c, o = stats(per_round), stats(cpu), stats(outside)
    print(f"{a.strategy}: {fmt(s)} per round, CPU {fmt(c)} per round; outside rounds {fmt(o)}")
    record(a.out, bench="round", strategy=a.strategy, clients=a.num_clients, steps=a.local_steps,
           num_cpus=a.num_cpus, extra=a.extra, per_round=per_round, cpu_per_round=cpu, cpu=c, outside=outside,
           first_round=first, **s)
    if not a.skip_one_step:
        ones = []
        for _ in range(a.repeats):
            r = flwr_run({**cfg, "local-steps": 1}, a.num_cpus, a.num_gpus)
            ones.append(statistics.median(r["train"][1:] or r["train"]))
        s1 = stats(ones)
        print(f"{a.strategy} at 1 local step: {fmt(s1)} per round = "
              f"{1000 * s1['median'] / a.num_clients:.1f} ms per client message (wall, all workers); {load()}")
        record(a.out, bench="round-1step", strategy=a.strategy, clients=a.num_clients, num_cpus=a.num_cpus,
               extra=a.extra, per_round=ones, **s1)


if __name__ == "__main__":
    main()
