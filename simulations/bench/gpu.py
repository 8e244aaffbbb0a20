"""fedapp on a CUDA GPU, one JSON line per measurement.

* ``device``: what ``device='auto'`` resolves to, and the card.
* ``syncs``: for each strategy's client, the times one training and one evaluation message make
  the host wait for the GPU (``torch.cuda.set_sync_debug_mode``: every synchronising call,
  ``.item()``, ``.cpu()``, a copy to the host, a boolean index), at 4 and at 16 local steps, with
  the source lines that made them. Equal counts: nothing waits per step.
* ``timing`` (FedAvg and PeFLL, the settings of ``overhead.py``): seconds per round of the bare
  loop on the GPU (one process, and four processes sharing the card), of the in-process engine
  (one process, four worker processes) and of ``flwr run`` with ``num-gpus 0.25`` (Ray gives each
  simulated client a quarter of the card, so four clients train on it at a time), with the
  processes nvidia-smi saw on the card during that run and its peak memory. The server's own
  work stays on the CPU.

Every measurement that touches CUDA runs in a fresh process (the in-process engine forks its
workers, which a process that has used CUDA cannot do).

    python -m simulations.bench.gpu --out gpu.jsonl          # on an H200: the waits 2.5 min, each timed strategy 1.5 min at --rounds 4
    python -m simulations.bench.gpu --device cpu --rounds 2 --local-steps 2   # the same code path, no GPU
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # floor.py, common.py, overhead.py, also under -m

from common import emit, flwr_run  # noqa: E402
from overhead import SETTINGS, floor_plan, floor_rounds, inprocess_rounds  # noqa: E402

#: the strategies whose clients' waits are counted, with what their client needs beyond the basics
SYNC_STRATEGIES = {
    "fedavg": {},
    # FedSMOO's setting trains with the authors' simulator's augmentation (its random centring)
    "fedsmoo": {"augment-recipe": "fl-simulator"},
    "scaffold": {},
    "pefll": {"partition": "pfedhn", "partition-classes": 2, "num-clients": 4},
}
#: workers sharing the card: processes of the floor and the in-process engine, Ray's 1 / num-gpus
SHARING = 4


def _call(queue, fn, args) -> None:
    queue.put(fn(*args))


def isolated(fn, *args):
    """``fn(*args)`` in a fresh spawned process (this one never initialises CUDA), not a daemon, so
    that the in-process engine can start its workers."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    proc = ctx.Process(target=_call, args=(queue, fn, args))
    proc.start()
    proc.join()
    if proc.exitcode or queue.empty():
        raise RuntimeError(f"{fn.__name__} failed in its process (exit code {proc.exitcode})")
    return queue.get()


def device_line(device: str) -> dict:
    import torch

    from fedapp.runtime.registry import parse_run_config
    from fedapp.core.experiment import device_of

    dev = device_of(parse_run_config({"device": device}))
    return {"check": "device", "asked": device, "resolved": str(dev), "torch": torch.__version__,
            "cuda": torch.version.cuda, "card": torch.cuda.get_device_name(dev) if dev.type == "cuda" else None}


def count_syncs(run_config: dict) -> list[dict]:
    """Per client message of a one-round in-process run: its type and the synchronising calls,
    counted by source line."""
    import torch

    from fedapp.runtime.client_app import app
    from fedapp.runtime.inprocess import InProcessGrid, run_local

    seen = []

    def counted(msg, context):
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                reply = app(msg, context)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        if msg.metadata.message_type != "query":
            where = Counter(f"{Path(w.filename).name}:{w.lineno}" for w in caught
                            if "synchroniz" in str(w.message))
            seen.append({"message": msg.metadata.message_type, "syncs": sum(where.values()), "where": dict(where)})
        return reply

    run_local(run_config, grid=InProcessGrid(counted, run_config["num-clients"], run_config))
    return seen


def sync_line(strategy: str, device: str, tmp: str) -> dict:
    base = {"strategy": strategy, "num-clients": 2, "num-server-rounds": 1, "batch-size": 32, "device": device,
            "dataset": "cifar10", "partition": "iid", "model": "lenet", "fraction-evaluate": 1.0, "central-eval": False,
            "checkpoint-every": 0, "results-dir": tmp, "seed": 0}
    out = {"check": "syncs", "strategy": strategy}
    for steps in (4, 16):  # PeFLL's local steps are its k
        cfg = {**base, **SYNC_STRATEGIES[strategy], "local-steps": steps, "pefll.k": steps,
               "run-name": f"syncs-{strategy}-{steps}"}
        out[f"steps_{steps}"] = isolated(count_syncs, cfg)
    per = {s: [m["syncs"] for m in out[f"steps_{s}"]] for s in (4, 16)}
    out["per_step"] = [(b - a) / 12 for a, b in zip(per[4], per[16])]
    return out


class GpuWatch(threading.Thread):
    """nvidia-smi every half second: the compute processes on the card and its memory in use."""

    def __init__(self):
        super().__init__(daemon=True)
        self.done = threading.Event()
        self.pids: list[set[int]] = []
        self.mem_mib: list[int] = []

    def _query(self, what: str) -> list[str]:
        out = subprocess.run(["nvidia-smi", f"--query-{what}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return [line.strip() for line in out.stdout.splitlines() if line.strip()]

    def run(self):
        while not self.done.wait(0.5):
            try:
                self.pids.append({int(p.split(",")[0]) for p in self._query("compute-apps=pid")})
                self.mem_mib.append(int(self._query("gpu=memory.used")[0]))
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass

    def summary(self) -> dict:
        return {"gpu_processes_max": max(map(len, self.pids), default=None),
                "gpu_processes_seen": len(set().union(*self.pids)) if self.pids else None,
                "gpu_memory_peak_mib": max(self.mem_mib, default=None)}


def timing_line(strategy: str, device: str, rounds: int, local: int | None, flwr: bool) -> dict:
    cfg = {**SETTINGS[strategy], "device": device, "num-server-rounds": rounds, "eval-every": rounds}
    if local:
        cfg.update({"local-steps": local, "pefll.k": local})
    plan = floor_plan(cfg, rounds)
    threads = max(1, (os.cpu_count() or 1) // SHARING)
    floor = {"1 process": floor_rounds(cfg, plan, 1, threads),
             f"{SHARING} processes": floor_rounds(cfg, plan, SHARING, threads)}
    inproc = {"1 process": isolated(inprocess_rounds, cfg, rounds, 1, threads),
              f"{SHARING} worker processes": isolated(inprocess_rounds, cfg, rounds, SHARING, threads)}
    run, watch, gpus = None, GpuWatch(), 1 / SHARING if device != "cpu" else 0.0
    if flwr:
        if gpus:
            watch.start()
        run = flwr_run(cfg, num_cpus=threads, num_gpus=gpus)
        watch.done.set()
    floor_s = min(map(statistics.median, floor.values()))
    inproc_s = min(map(statistics.median, inproc.values()))
    flwr_s = statistics.median(run["train"][1:]) if run else None
    return {"check": "timing", "strategy": strategy, "device": device,
            "floor_round_s": floor_s, "inprocess_round_s": inproc_s, "flwr_run_round_s": flwr_s,
            "inprocess_ratio": inproc_s / floor_s, "flwr_run_ratio": flwr_s and flwr_s / floor_s,
            "startup_s": run and run["to-first-round"], "peak_host_mib": run and run["peak-mib"],
            "floor_rounds": floor, "inprocess_rounds": inproc, "flwr_run_rounds": run and run["train"],
            "flwr_run_layout": f"num-gpus {gpus}, num-cpus {threads}",
            **watch.summary(), "clients": cfg["num-clients"], "rounds": rounds, "load": os.getloadavg(),
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def main(argv: list[str] | None = None) -> None:
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="auto", help="auto (the GPU where torch finds one), cuda or cpu")
    p.add_argument("--strategies", default="fedavg,pefll", help="timed strategies (overhead.py's settings)")
    p.add_argument("--rounds", type=int, default=6, help="rounds of each timed run; round 1 is not counted")
    p.add_argument("--local-steps", type=int, help="local SGD steps instead of 50 (a smoke test)")
    p.add_argument("--no-flwr-run", action="store_true", help="no `flwr run` (no Ray)")
    p.add_argument("--out", help="also append the JSON lines to this file")
    a = p.parse_args(argv)
    dev = isolated(device_line, a.device)
    emit(dev, a.out)
    with tempfile.TemporaryDirectory(prefix="fedapp-gpu-") as tmp:
        if dev["resolved"].startswith("cuda"):
            for strategy in SYNC_STRATEGIES:
                emit(sync_line(strategy, a.device, tmp), a.out)
    for strategy in a.strategies.split(","):
        emit(timing_line(strategy, a.device, a.rounds, a.local_steps, not a.no_flwr_run), a.out)


if __name__ == "__main__":
    main()
