"""Shared pieces of the performance benchmarks: machine load, statistics, one `flwr run`.

Every number is printed with the load average at the time it was taken, because the
benchmark machine is shared; a JSON line per measurement goes to ``--out`` for the docs.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# Benchmark 1 of docs/performance.md: CIFAR-10, LeNet, 20 clients, 50 steps of 32, 10 rounds.
BASE = {"dataset": "cifar10", "partition": "iid", "model": "lenet", "num-clients": 20, "local-steps": 50,
        "batch-size": 32, "num-server-rounds": 10, "eval-every": 10, "device": "cpu"}


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s: dict[str, float], unit: str = "s") -> str:
    return f"median {s['median']:.4g}{unit} (min {s['min']:.4g}, max {s['max']:.4g}, n={s['n']})"


def emit(row: dict, out: str | None) -> None:
    """Print ``row`` as one JSON line and append it to ``out``."""
    line = json.dumps(row, default=str)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def record(out: str | None, **row) -> None:
    row.update(load=os.getloadavg(), time=time.strftime("%H:%M:%S"))
    emit(row, out)


def run_config_str(cfg: dict) -> str:
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in cfg.items())


def tree(marker: str) -> dict[int, tuple[float, int]]:
    """{pid: (CPU seconds, RSS bytes)} of the processes whose command line holds ``marker``
    (the run's SuperLink) and all their descendants: simulation, Ray, workers."""
    parent, usage, roots = {}, {}, []
    tick, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rpartition(")")[2].split()
            pid = int(d.name)
            parent[pid] = int(fields[1])
            usage[pid] = ((int(fields[11]) + int(fields[12])) / tick, int(fields[21]) * page)
            if marker in (d / "cmdline").read_bytes().decode(errors="replace"):
                roots.append(pid)
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
    return {p: usage[p] for p in seen if p in usage}


def actor_nice(pid: int) -> int | None:
    """The niceness of ``pid`` when it is a Ray worker running a ClientApp, else None."""
    try:
        if b"ClientAppActor" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])
    except (OSError, ValueError, IndexError):
        return None


class Monitor(threading.Thread):
    """Samples the run's process tree every 0.5 s: peak summed RSS, and the tree's CPU seconds
    each time rounds.json gains a round, so CPU per round is known even on a loaded machine
    (wall time there depends on everyone else; the CPU a run uses does not, much)."""

    def __init__(self, marker: str, rounds_json: Path):
        super().__init__(daemon=True)
        self.marker, self.rounds_json, self.done = marker, rounds_json, threading.Event()
        self.peak_rss, self.cpu = 0, {}  # cpu: pid -> last CPU seconds seen (exited ones kept)
        self.round_cpu: list[float] = []  # tree CPU seconds when round i's row appeared
        self.round_at: list[float] = []  # time.time() when round i's row appeared
        self.worker_nice: set[int] = set()  # niceness of the Ray workers (ray::ClientAppActor)

    def run(self) -> None:
        while not self.done.wait(0.5):
            now = tree(self.marker)
            self.peak_rss = max(self.peak_rss, sum(rss for _, rss in now.values()))
            self.cpu.update({p: c for p, (c, _) in now.items()})
            self.worker_nice |= {n for p in now if (n := actor_nice(p)) is not None}
            try:
                rows = len(json.loads(self.rounds_json.read_text())["rounds"])
            except (OSError, ValueError, KeyError):
                continue
            while len(self.round_cpu) < rows:
                self.round_cpu.append(sum(self.cpu.values()))
                self.round_at.append(time.time())


def flwr_run(cfg: dict, num_cpus: int = 1, num_gpus: float = 0.0, port_base: int = 39590,
             timeout: float = 3000) -> dict:
    """One `flwr run` through fedapp.runtime.launch; returns wall time, per-round seconds (wall and
    the process tree's CPU), peak memory and the rows. A run stopped at ``timeout`` s returns
    the rounds it finished, with ``"stopped": True``."""
    from fedapp.runtime.launch import RunStopped, launch

    with tempfile.TemporaryDirectory(prefix="fedapp-bench-") as tmp:
        cfg = {**cfg, "results-dir": f"{tmp}/results", "run-name": "bench"}
        mon = Monitor(tmp, Path(tmp) / "results/bench/rounds.json")
        mon.start()
        t0 = time.time()
        stopped = False
        try:
            status = launch(run_config_str(cfg), home=Path(tmp) / "flwr-home", port_base=port_base,
                            num_cpus=num_cpus, num_gpus=num_gpus, stream=False, timeout=timeout)
        except RunStopped as stop:  # timed out: the rounds so far count
            if stop.exit_code != 124:
                raise
            status, stopped = None, True
        finally:
            mon.done.set()
            mon.join()
        wall = time.time() - t0
        if not stopped and status["status"] != "finished:completed":
            raise RuntimeError(f"run failed: {status}")
        try:
            rows = json.loads((Path(tmp) / "results/bench/rounds.json").read_text())["rounds"]
        except OSError:  # stopped before its first round
            rows = [{"round": 0, "wall-time": 0.0}]
    train = [r["train-seconds"] for r in rows if r["round"] > 0]
    cpu = [b - a for a, b in zip(mon.round_cpu, mon.round_cpu[1:])]  # rounds 1.., as sampled
    return {"wall": wall, "train": train, "cpu": cpu, "in-rounds": rows[-1]["wall-time"],
            # launch -> round 0's row (SuperLink, Ray, workers importing and loading data, discovery)
            "to-first-round": mon.round_at[0] - t0 if mon.round_at else None,
            "worker-nice": sorted(mon.worker_nice),
            "peak-mib": mon.peak_rss / 2**20,
            # launch -> first round and last round -> exit: Ray and SuperLink start/stop, discovery
            "outside-rounds": wall - rows[-1]["wall-time"], "rows": rows, "stopped": stopped}
