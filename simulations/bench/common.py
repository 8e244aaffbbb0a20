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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

# The benchmark settings of issue 8: CIFAR-10, LeNet, 20 clients, 50 steps of 32, 10 rounds.
BASE = {"dataset": "cifar10", "partition": "iid", "model": "lenet", "num-clients": 20, "local-steps": 50,
        "batch-size": 32, "num-server-rounds": 10, "eval-every": 10, "device": "cpu"}


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def stats(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def fmt(s: dict[str, float], unit: str = "s") -> str:
    return f"median {s['median']:.4g}{unit} (min {s['min']:.4g}, max {s['max']:.4g}, n={s['n']})"


def record(out: str | None, **row) -> None:
    row.update(load=os.getloadavg(), time=time.strftime("%H:%M:%S"))
    print(json.dumps(row, default=str), flush=True)
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(row, default=str) + "\n")


def run_config_str(cfg: dict) -> str:
    return " ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in cfg.items())


def flwr_run(cfg: dict, num_cpus: int = 1, num_gpus: float = 0.0, port_base: int = 39590) -> dict:
    """One `flwr run` through fedapp.launch; returns wall time, per-round seconds and the rows."""
    from fedapp.launch import launch

    with tempfile.TemporaryDirectory(prefix="fedapp-bench-") as tmp:
        cfg = {**cfg, "results-dir": f"{tmp}/results", "run-name": "bench"}
        t0 = time.time()
        status = launch(run_config_str(cfg), home=Path(tmp) / "flwr-home", port_base=port_base,
                        num_cpus=num_cpus, num_gpus=num_gpus, stream=False, timeout=3000)
        wall = time.time() - t0
        if status["status"] != "finished:completed":
            raise RuntimeError(f"run failed: {status}")
        rows = json.loads((Path(tmp) / "results/bench/rounds.json").read_text())["rounds"]
    train = [r["train-seconds"] for r in rows if r["round"] > 0]
    return {"wall": wall, "train": train, "in-rounds": rows[-1]["wall-time"],
            # launch -> first round and last round -> exit: Ray and SuperLink start/stop, discovery
            "outside-rounds": wall - rows[-1]["wall-time"], "rows": rows}
