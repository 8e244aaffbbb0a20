"""Benchmark 4: 1,000 simulated clients, 5% sampled per round, through `flwr run`.

Peak memory is the largest sum of resident set sizes, sampled every 0.5 s, over the run's
process tree (the local SuperLink with its ServerApp, simulation, Ray and worker processes).
RSS counts shared library pages once per process, so the sum is an upper bound.

    python simulations/bench/scale.py --strategy fedavg --repeats 3 --out bench.jsonl
    python simulations/bench/scale.py --strategy scaffold --model resnet18gn --state-memory-mb 512  # spills
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
from pathlib import Path

from common import BASE, fmt, flwr_run, load, record, stats


def tree_rss(marker: str) -> tuple[int, int]:
    """(sum of RSS in bytes, process count) of processes whose command line holds ``marker``
    and all their descendants."""
    parent, rss, roots = {}, {}, []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            parent[int(d.name)] = int(stat.rpartition(")")[2].split()[1])
            rss[int(d.name)] = int((d / "statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                roots.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += children.get(pid, [])
    return sum(rss.get(p, 0) for p in seen), len(seen)


class PeakMemory(threading.Thread):
    def __init__(self, marker: str):
        super().__init__(daemon=True)
        self.marker, self.peak, self.procs, self.done = marker, 0, 0, threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            total, n = tree_rss(self.marker)
            if total > self.peak:
                self.peak, self.procs = total, n


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
    per_round, peaks, outside = [], [], []
    for i in range(a.repeats):
        mon = PeakMemory("fedapp-bench-")  # the temporary FLWR_HOME of common.flwr_run
        mon.start()
        try:
            r = flwr_run(cfg)
        finally:
            mon.done.set()
            mon.join()
        per_round.append(statistics.median(r["train"][1:] or r["train"]))
        peaks.append(mon.peak / 2**20)
        outside.append(r["outside-rounds"])
        print(f"run {i}: rounds {[round(t, 2) for t in r['train']]}, peak {mon.peak / 2**20:.0f} MiB over "
              f"{mon.procs} processes, outside rounds {r['outside-rounds']:.1f} s; {load()}", flush=True)
    print(f"{a.strategy} x{a.num_clients} at {a.fraction}: {fmt(stats(per_round))} per round, peak "
          f"{fmt(stats(peaks), ' MiB')}, outside rounds {fmt(stats(outside))}")
    record(a.out, bench="scale", strategy=a.strategy, model=a.model, clients=a.num_clients, fraction=a.fraction,
           steps=a.local_steps, per_round=stats(per_round), peak_mib=stats(peaks), outside=stats(outside),
           state_memory_mb=a.state_memory_mb)


if __name__ == "__main__":
    main()
