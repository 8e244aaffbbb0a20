"""Seconds per round of FedAvg, PeFLL and FedSMOO: the bare-loop floor, the in-process engine and
`flwr run`, all measured in one invocation, one JSON line per strategy.

The floor is the clients' local SGD steps of one round as a bare torch loop (``floor.one_round``:
the same clients' tensors, model, batch size and number of steps, no Flower) on the two cores the
simulation uses, both ways: two processes of one thread splitting the clients (as the two Ray
workers do), and one process with two threads; the faster is the floor. It is measured before and
after the app's runs, and its rounds pooled, so a change in the machine's load during the
invocation shows in its spread. For PeFLL the floor is the k SGD steps of the sampled clients;
the descriptors, the hypernetwork's forward and VJP on the server and the embedding backprop are
not in it (they are the algorithm's, counted against the app). For FedSMOO a floor step is a SAM
step (the gradient, the perturbation rho g/||g||, the gradient there); its dual variables and
their correction terms are the algorithm's.

In process is ``fedapp.runtime.inprocess`` (no Ray, no SuperLink), in the floor's two layouts: two worker
processes x 1 thread (``local-workers=2``), and the clients one after the other in this process with two
torch threads (``num-threads=2``), the faster counting; ``flwr run`` goes through ``fedapp.runtime.launch``
(local SuperLink, Ray) in the layout that was faster in process: 2 Ray workers x 1 thread, or 1 worker
x 2 threads (``--num-cpus 2``). Per-round figures are medians of the training time of rounds 2.. (round 1 carries
each worker's first message). ``startup_s`` is launch to the first round (SuperLink, Ray, the
workers importing and loading their data, discovery); ``shutdown_s`` the last round to exit.

    python -m simulations.bench.overhead --quick            # FedAvg and PeFLL, under 5 minutes on a quiet 2-core machine
    python -m simulations.bench.overhead --quick --strategies fedavg,pefll,fedsmoo   # about 6 minutes
    python -m simulations.bench.overhead --out results.jsonl
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # floor.py and common.py, also under -m

from common import BASE, emit, flwr_run  # noqa: E402

#: the benchmark settings; ``--quick`` shortens the runs, never the work of a round
SETTINGS = {
    # benchmark 1 at 10 clients: CIFAR-10, LeNet, 50 SGD steps of 32 per client and round
    "fedavg": {**BASE, "strategy": "fedavg", "num-clients": 10, "central-eval": False, "fraction-evaluate": 0.0,
               "checkpoint-every": 0},
    # PeFLL's CIFAR-10 setting (simulations/pefll/cifar10-100c-authors.toml) at 20 clients: 18 seen, 5 per
    # step, k = 50 SGD steps of 32 on the generated LeNet, no augmentation
    "pefll": {**BASE, "strategy": "pefll", "partition": "pfedhn", "partition-classes": 2, "num-clients": 20,
              "unseen-fraction": 0.1, "fraction-train": 0.278, "data-augment": False, "central-eval": False,
              "fraction-evaluate": 0.0, "checkpoint-every": 0, "pefll.k": 50, "pefll.server-opt": "adam",
              "pefll.momentum": 0.9},
    # FedAvg's setting with FedSMOO's clients: SAM steps, two model-sized duals per client in its context
    "fedsmoo": {**BASE, "strategy": "fedsmoo", "num-clients": 10, "central-eval": False, "fraction-evaluate": 0.0,
                "checkpoint-every": 0},
}
ROUNDS = {"fedavg": 10, "pefll": 12, "fedsmoo": 8}
QUICK_ROUNDS = {"fedavg": 5, "pefll": 6, "fedsmoo": 4}
#: in-process layouts on the two cores, the floor's two: (worker processes, torch threads per client);
#: 1 worker is the serial engine. Its one-thread layout (one core) was never the faster one.
INPROCESS = {"2x1": (2, 1), "1x2": (1, 2)}
#: the floor's layouts on the two cores: two one-thread processes, one process with two threads
FLOOR = {"2p": (2, 1), "2t": (1, 2)}
#: seconds a `--before` run may take before it is stopped (its finished rounds still count)
BEFORE_TIMEOUT = 300.0


def floor_plan(cfg: dict, rounds: int) -> list[list[int]]:
    """The partition ids whose local steps make each round of the floor: every client for FedAvg
    (full participation), PeFLL's seeded sample of the seen clients (the strategy's own)."""
    from fedapp.runtime.registry import parse_run_config
    from fedapp.runtime.server_app import build_strategy
    from fedapp.server.discovery import ClientInfo

    strategy = build_strategy(parse_run_config(cfg))
    # as discovery finds them: every partition connected
    strategy.clients = {pid: ClientInfo(pid, 0, 0, pid in strategy.unseen) for pid in range(cfg["num-clients"])}
    return [strategy.driver.round_sample("train", r) for r in range(1, rounds + 1)]


def local_steps(cfg: dict) -> int:
    return int(cfg.get("pefll.k", cfg["local-steps"])) if cfg["strategy"] == "pefll" else int(cfg["local-steps"])


def sam_rho(cfg: dict) -> float:
    """The SAM radius of the floor's steps: FedSMOO's ``fedsmoo.rho``, else 0 (plain SGD)."""
    from fedapp.runtime.registry import parse_run_config

    run = parse_run_config(cfg)
    return float(run.algo("rho")) if run.strategy == "fedsmoo" else 0.0


def split(pids: list[int], parts: int) -> list[list[int]]:
    """Clients dealt out to ``parts`` workers in turn (the Ray pool takes them as workers free up)."""
    return [pids[i::parts] for i in range(parts)]


# ---- the floor in worker processes --------------------------------------------------------------
_CLIENTS: dict = {}


def _init_worker(cfg: dict, threads: int) -> None:
    import torch

    from fedapp.runtime.registry import parse_run_config
    from fedapp.core.experiment import client_data

    torch.set_num_threads(threads)
    run = parse_run_config({**cfg, "local-steps": local_steps(cfg)})
    _CLIENTS.update(cfg=run, rho=sam_rho(cfg), data={pid: client_data(run, pid) for pid in range(run.num_clients)})


def _train(pids: list[int]) -> float:
    """Wall seconds of the bare loop over ``pids`` (floor.one_round)."""
    import torch
    from floor import one_round

    if not pids:
        return 0.0
    g = torch.Generator().manual_seed(pids[0])
    return one_round([_CLIENTS["data"][p] for p in pids], _CLIENTS["cfg"], False, g, _CLIENTS["rho"])[0]


def floor_rounds(cfg: dict, plan: list[list[int]], procs: int, threads: int) -> list[float]:
    """Seconds of each round of ``plan`` as a bare loop in ``procs`` processes of ``threads`` torch
    threads (``FLOOR``'s layouts). The first round is a warm-up, not returned."""
    ctx = mp.get_context("spawn")
    with ctx.Pool(procs, initializer=_init_worker, initargs=(cfg, threads)) as pool:
        pool.map(_train, split(plan[0][:procs], procs))  # warm-up: imports, allocator, first batches
        out = []
        for pids in plan[1:]:
            t0 = time.perf_counter()
            pool.map(_train, split(pids, procs), chunksize=1)
            out.append(time.perf_counter() - t0)
    return out


# ---- the app ---------------------------------------------------------------------------------------
def inprocess_rounds(cfg: dict, rounds: int, workers: int, threads: int) -> list[float]:
    """Training seconds of rounds 2.. through fedapp.runtime.inprocess, ``workers`` processes x
    ``threads`` torch threads."""
    from fedapp.runtime.inprocess import run_local

    with tempfile.TemporaryDirectory(prefix="fedapp-overhead-") as tmp:
        strategy = run_local({**cfg, "num-server-rounds": rounds, "eval-every": rounds, "num-threads": threads,
                              "local-workers": workers, "results-dir": tmp, "run-name": "inprocess"})
    return [r["train-seconds"] for r in strategy.history if r["round"] > 1]


def flwr_run_as_before(cfg: dict, tree: str, timeout: float) -> dict:
    """``common.flwr_run`` of the app in ``tree``, a checkout of the code before the overhead
    changes (fedapp, strategies, clients from there; Ray's default worker niceness), stopped
    after ``timeout`` s (on a loaded machine its workers at nice 15 may hardly run)."""
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import common\n"
            f"sys.path.insert(0, {tree!r})\n"
            f"r = common.flwr_run(json.loads(sys.argv[1]), port_base=39690, timeout={timeout})\n"
            "r.pop('rows'); print(json.dumps(r))")
    env = {k: v for k, v in os.environ.items() if k != "RAY_worker_niceness"}
    env["PYTHONPATH"] = tree
    out = subprocess.run([sys.executable, "-c", code, json.dumps(cfg)], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(strategy: str, rounds: int, local: int | None = None, before: str | None = None,
            quick: bool = False, flwr: bool = True) -> dict:
    """One strategy's line. ``quick``: the one-process, two-thread floor (two to three times the
    two-process one in every measurement so far) gets one timed round, before the app's runs only.
    ``flwr`` False: no `flwr run` (its fields are None)."""
    cfg = {**SETTINGS[strategy], "num-server-rounds": rounds, "eval-every": rounds}
    if local:
        cfg.update({"local-steps": local, "pefll.k": local})
    plan = floor_plan(cfg, rounds)
    floor_before = {layout: floor_rounds(cfg, plan[:2] if quick and layout == "2t" else plan, *FLOOR[layout])
                    for layout in FLOOR}
    inproc = {layout: inprocess_rounds(cfg, rounds, *INPROCESS[layout]) for layout in INPROCESS}
    # `flwr run` in the faster layout: a client's CPUs are its torch threads (num-threads 0)
    run = flwr_run(cfg, num_cpus=INPROCESS[fastest_layout(inproc)][1]) if flwr else None
    old = flwr_run_as_before(cfg, before, BEFORE_TIMEOUT) if before else None
    floor_after = {layout: floor_rounds(cfg, plan, *FLOOR[layout]) for layout in FLOOR if not quick or layout == "2p"}
    floors = {k: statistics.median(floor_before[k] + floor_after.get(k, [])) for k in floor_before}
    layout = min(floors, key=floors.get)
    out = row(strategy, cfg, floors[layout], layout, floor_before, floor_after, inproc, run)
    if old is not None:
        steady = old["train"][1:]
        out.update(before_flwr_run_round_s=statistics.median(steady) if steady else None,
                   before_startup_s=old["to-first-round"],
                   before_flwr_run_ratio=statistics.median(steady) / floors[layout] if steady else None,
                   before_flwr_run_rounds=old["train"], before_worker_nice=old["worker-nice"],
                   before_stopped_after_s=BEFORE_TIMEOUT if old["stopped"] else None)
    return out


def fastest_layout(inproc: dict[str, list[float]]) -> str:
    return min(inproc, key=lambda t: statistics.median(inproc[t]))


def row(strategy: str, cfg: dict, floor_s: float, layout: str, floor_before: dict, floor_after: dict,
        inproc: dict[str, list[float]], run: dict | None) -> dict:
    """One JSON line: the medians, their ratios to the floor, and what they were taken from
    (the floor's and the in-process engine's faster layout)."""
    fastest = fastest_layout(inproc)
    inprocess_s = statistics.median(inproc[fastest])
    workers, threads = INPROCESS[fastest]
    flwr_s = statistics.median(run["train"][1:]) if run else None
    run = run or dict.fromkeys(("train", "cpu", "to-first-round", "worker-nice"))
    return {"strategy": strategy, "floor_round_s": floor_s, "inprocess_round_s": inprocess_s,
            "flwr_run_round_s": flwr_s, "startup_s": run["to-first-round"], "load": os.getloadavg(),
            "inprocess_ratio": inprocess_s / floor_s, "flwr_run_ratio": flwr_s and flwr_s / floor_s,
            "floor_layout": {"2p": "2 processes x 1 thread", "2t": "1 process x 2 threads"}[layout],
            "floor_rounds_before": floor_before, "floor_rounds_after": floor_after,
            "inprocess_layout": f"{workers} worker processes x 1 thread" if workers > 1
            else f"1 process x {threads} threads",
            "inprocess_rounds": inproc,
            "flwr_run_layout": (f"{2 // threads} Ray workers x 1 thread" if threads == 1 else
                                f"1 Ray worker x {threads} threads") if flwr_s else None,
            "flwr_run_rounds": run["train"], "flwr_run_cpu_rounds": run["cpu"],
            "shutdown_s": run["wall"] - run["to-first-round"] - run["in-rounds"] if flwr_s else None,
            "worker_nice": run["worker-nice"],
            "clients": cfg["num-clients"], "local_steps": local_steps(cfg), "rounds": cfg["num-server-rounds"],
            "time": time.strftime("%Y-%m-%d %H:%M:%S")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true",
                   help="fewer rounds (5 FedAvg, 6 PeFLL steps, 4 FedSMOO), one round of the two-thread floor")
    p.add_argument("--strategies",
                   help="comma-separated (default: fedavg,pefll,fedsmoo; with --quick fedavg,pefll, which keeps it "
                        "under 5 minutes on the quiet machine: FedSMOO's line took 2.6 of the 6 minutes of all three)")
    p.add_argument("--rounds", type=int,
                   help="rounds of every run (default: 10 FedAvg, 12 PeFLL, 8 FedSMOO; --quick 5, 6, 4)")
    p.add_argument("--local-steps", type=int, help="local SGD steps instead of 50 (a smoke test)")
    p.add_argument("--before", metavar="TREE",
                   help="also `flwr run` the app of TREE, a checkout of the code before the overhead changes "
                        "(e.g. git worktree add ../before <commit>): before_* fields")
    p.add_argument("--no-flwr-run", action="store_true", help="the floor and the in-process engine only")
    p.add_argument("--out", help="also append the JSON lines to this file")
    a = p.parse_args(argv)
    for strategy in (a.strategies or ("fedavg,pefll" if a.quick else "fedavg,pefll,fedsmoo")).split(","):
        rounds = a.rounds or (QUICK_ROUNDS if a.quick else ROUNDS)[strategy]
        emit(measure(strategy, rounds, a.local_steps, a.before, a.quick, not a.no_flwr_run), a.out)


if __name__ == "__main__":
    main()
