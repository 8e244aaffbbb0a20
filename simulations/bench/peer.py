"""fedapp beside Apple's pfl-research on the same work: FedAvg, CIFAR-10 LeNet, fedapp's 100 IID partitions
(exported to pfl, the same indices), 10 clients a round, 1 local epoch of batch 32 at lr 0.05, central
evaluation every 5 rounds (and at round 0 and after the last), one torch thread per process.

    python -m simulations.bench.peer --quick --out simulations/bench/results/peer.jsonl
    python -m simulations.bench.peer --rounds 20 --repeats 3
    python -m simulations.bench.peer --table simulations/bench/results/peer.jsonl   # docs/performance.md's table

Engines, run one at a time and alternating (fedapp, pfl, fedapp, ...) so a change in the machine's load
falls on both: ``fedapp-serial`` (in process, ``local-workers = 1``), ``pfl`` (one process),
``fedapp-2-workers`` (``local-workers = 2``), ``pfl-2-workers`` (``torchrun --nproc-per-node 2``: pfl's
multi-worker mode, ``torch.distributed`` over gloo on CPU, each worker training half of a round's clients)
and ``fedapp-flwr-run`` (``python -m fedapp.runtime.launch``: SuperLink, Ray, two ClientApp workers).
pfl is fed channels-last batches, fedapp's own layout on CPU (``--engines pfl-nchw pfl-2-workers-nchw``:
pfl with plain NCHW batches). The data is augmented on neither side (``data-augment = false``); both
hold the uint8 images and normalise a batch when it is used, fedapp's ``prepare``'s arithmetic.

Each engine runs in a child process (or process tree) whose command lines carry a marker. The child
writes one event per round boundary, with the tree's CPU seconds read at that moment (``common.tree``)
and the central accuracy and loss where it evaluated; through ``flwr run`` the ServerApp cannot be
reached, so this process notes the tree's CPU when ``rounds.json`` gains a row (0.1 s samples). This
process samples every process's RSS every 0.2 s. Per engine one JSON line:

* ``cpu_round_s`` / ``wall_round_s``: medians over rounds 3..N of each round's CPU seconds of the whole
  process tree and its wall seconds (evaluation rounds included: a median sets them aside while they are
  fewer than half);
* ``peak_rss_process_mib``: the largest RSS any one process of the engine reached; ``peak_rss_tree_mib``:
  the largest sum over its processes (RSS counts the pages forked workers share once per process);
* ``startup_s``: process start to the end of round 0 (imports, data, model, round 0's central evaluation);
* ``sessions``: the process sessions the engine's processes belong to. Where the kernel schedules by autogroup
  (``/proc/sys/kernel/sched_autogroup_enabled``) each session shares the cores as one, so on a loaded machine
  torchrun's workers, each in a session of its own, get more CPU time than forked workers sharing one;
* ``final_accuracy``, ``round0``: the central accuracy and loss after the last round and at round 0.

A last line, ``"bench": "peer-ratios"``, gives each fedapp engine's numbers over the best of the pfl engines
with as many training processes (medians over ``--repeats``): the serial engine against ``pfl`` (and
``pfl-nchw``), the 2 workers and ``flwr run`` against ``pfl-2-workers`` (and its NCHW twin). pfl-research is
the ``bench`` extra (``pip install -e '.[bench]'``); it pins dp-accounting below 0.6, so it does not install
beside the ``dev`` and ``dp`` extras.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import ROOT, load, record, run_config_str, tree  # noqa: E402

#: the work both sides do (fedapp's run config); test-fraction 0: a client trains on its whole partition,
#: the indices pfl gets
WORKLOAD = {"strategy": "fedavg", "dataset": "cifar10", "partition": "iid", "model": "lenet", "num-clients": 100,
            "fraction-train": 0.1, "fraction-evaluate": 0.0, "test-fraction": 0.0, "local-epochs": 1,
            "batch-size": 32, "lr": 0.05, "momentum": 0.0, "weight-decay": 0.0, "data-augment": False,
            "eval-every": 5, "num-server-rounds": 20, "num-threads": 1, "device": "cpu", "seed": 0,
            "checkpoint-every": 0}
EVAL_BATCH = 128  # fedapp's central evaluation batch on CPU (fedapp.core.training.EVAL_BATCH)
ENGINES = ("fedapp-serial", "pfl", "fedapp-2-workers", "pfl-2-workers", "fedapp-flwr-run")
OPTIONAL = ("pfl-nchw", "pfl-2-workers-nchw")


# ---- the data and initial model both sides start from -----------------------------------------------
def export(cfg: dict, folder: Path) -> Path:
    """fedapp's dataset, its partitions and its initial model, as files pfl's side reads with numpy and
    torch alone (``data.npz``, ``init.pt``): the training images and labels, each client's indices into
    them, the test set, the normalisation, and the state fedapp's server starts from."""
    import numpy as np
    import torch

    from fedapp.core.experiment import dataset, model_for, partitions
    from fedapp.runtime.registry import parse_run_config

    rc = parse_run_config(cfg)
    ds = dataset(rc)
    parts = partitions(rc)
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "data.npz", train_x=ds.train_x.numpy(), train_y=ds.train_y.numpy(),
             test_x=ds.test_x.numpy(), test_y=ds.test_y.numpy(), mean=np.asarray(ds.mean, dtype=np.float32),
             std=np.asarray(ds.std, dtype=np.float32), offsets=np.cumsum([0] + [len(p) for p in parts]),
             users=np.concatenate(parts), num_classes=ds.num_classes)
    torch.save(model_for(rc, ds).state_dict(), folder / "init.pt")
    return folder


# ---- the children -------------------------------------------------------------------------------------
class Events:
    """One JSON line per round boundary: round, time, the CPU seconds of the processes whose command line
    holds ``mark`` (and their descendants), and the metrics given."""

    def __init__(self, path: str, mark: str):
        self.path, self.mark = path, mark

    def __call__(self, rnd: int, **metrics) -> None:
        cpu = sum(c for c, _ in tree(self.mark).values())
        with open(self.path, "a") as f:
            f.write(json.dumps({"round": rnd, "t": time.time(), "cpu": cpu, **metrics}) + "\n")


def fedapp_child(cfg: dict, events: Events) -> None:
    """fedapp's in-process engine on ``cfg``; every row the driver records becomes an event."""
    import fedapp.server.loop
    from fedapp.runtime.inprocess import run_local

    record_row = fedapp.server.loop.record

    def counted(driver, row, writer, result=None):
        record_row(driver, row, writer, result)
        events(row["round"], **{k[len("central-"):]: row[k] for k in ("central-accuracy", "central-loss") if k in row})

    fedapp.server.loop.record = counted
    try:
        run_local(cfg)
    finally:
        fedapp.server.loop.record = record_row


def pfl_child(data: Path, rounds: int, every: int, channels_last: bool, events: Events, seed: int = 0) -> None:
    """FedAvg in pfl-research on the exported data (run alone, or by ``torchrun`` once per worker)."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.central_evaluation import CentralEvaluationCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.internal.ops.selector import get_default_framework_module as ops
    from pfl.metrics import Metrics, StringMetricName, Weighted
    from pfl.model.pytorch import PyTorchModel

    from fedapp.core.models import LeNet  # torch only: fedapp.core.models imports nothing else of fedapp

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    z = np.load(data / "data.npz")
    train_x, train_y = torch.from_numpy(z["train_x"]), torch.from_numpy(z["train_y"])
    users = [torch.from_numpy(z["users"][a:b]) for a, b in zip(z["offsets"], z["offsets"][1:])]
    mean, std = torch.from_numpy(z["mean"]).view(-1, 1, 1), torch.from_numpy(z["std"]).view(-1, 1, 1)

    class Net(torch.nn.Module):
        """LeNet on uint8 batches, normalised as fedapp's ``prepare`` does; ``loss`` and ``metrics`` as pfl
        asks of a PyTorch module."""

        def __init__(self):
            super().__init__()
            self.net = LeNet(tuple(train_x.shape[1:]), int(z["num_classes"]))

        def forward(self, x):
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            return self.net((x.float() / 255 - mean) / std)

        def loss(self, x, y, eval=False):
            self.train()
            return F.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y, eval=True):
            self.eval()
            out = self(x)
            n = len(y)
            return {"loss": Weighted(F.cross_entropy(out, y, reduction="sum").item(), n),
                    "accuracy": Weighted((out.argmax(1) == y).sum().item(), n)}

    net = Net()
    net.net.load_state_dict(torch.load(data / "init.pt"))
    shuffle = torch.Generator().manual_seed(seed)

    def user_dataset(uid):  # a client's data in a fresh order each time it is drawn, as fedapp's loader
        idx = users[uid][torch.randperm(len(users[uid]), generator=shuffle)]
        return Dataset(raw_data=[train_x[idx], train_y[idx]], user_id=uid)

    federated = FederatedDataset(user_dataset, get_user_sampler("random", list(range(len(users)))))
    central = Dataset(raw_data=[torch.from_numpy(z["test_x"]), torch.from_numpy(z["test_y"])])
    rank0 = ops().distributed.global_rank == 0
    name = {k: StringMetricName(f"Central val | {k}") for k in ("loss", "accuracy")}

    class Evaluation(CentralEvaluationCallback):
        """Central evaluation at round 0, every ``every`` rounds and after the last, as fedapp's; each
        round's end an event (from the first worker)."""

        def note(self, rnd, metrics=None):
            if rank0:
                events(rnd, **({k: metrics[n].overall_value for k, n in name.items()} if metrics else {}))

        def on_train_begin(self, *, model):  # noted here only: pfl adds these to round 1's, which may evaluate too
            self.note(0, super().on_train_begin(model=model))
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            rnd = central_iteration + 1
            metrics = self._eval(model)[1] if rnd % every == 0 or rnd == rounds else None
            self.note(rnd, metrics)
            return False, metrics or Metrics()

    model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    FederatedAveraging().run(
        # pfl evaluates every trained client before and after its training in the rounds evaluation_frequency
        # divides (round 1 always), which fedapp does not: only in round 1 here
        algorithm_params=NNAlgorithmParams(central_num_iterations=rounds, evaluation_frequency=rounds + 1,
                                           train_cohort_size=10, val_cohort_size=0),
        backend=SimulatedBackend(training_data=federated, val_data=None),
        model=model,
        model_train_params=NNTrainHyperParams(local_learning_rate=0.05, local_num_epochs=1, local_batch_size=32),
        model_eval_params=NNEvalHyperParams(local_batch_size=EVAL_BATCH),
        callbacks=[Evaluation(central, model_eval_params=NNEvalHyperParams(local_batch_size=EVAL_BATCH))])
    if torch.distributed.is_initialized():  # both workers done first, else gloo may abort one at exit
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


# ---- the harness --------------------------------------------------------------------------------------
class Sampler(threading.Thread):
    """Every 0.2 s the RSS and CPU of the processes marked ``mark`` (and descendants): each process's
    largest RSS, the largest sum, the CPU of exited processes kept. With ``rows`` (a ``rounds.json``),
    an event with the tree's CPU each time the file gains a row."""

    def __init__(self, mark: str, rows: Path | None = None):
        super().__init__(daemon=True)
        self.mark, self.rows, self.done = mark, rows, threading.Event()
        self.peak: dict[int, int] = {}
        self.peak_tree, self.cpu = 0, {}
        self.session: dict[int, int] = {}  # pid -> its session id
        self.events: list[dict] = []

    def run(self) -> None:
        while not self.done.wait(0.2 if self.rows is None else 0.1):
            now = tree(self.mark)
            self.peak_tree = max(self.peak_tree, sum(rss for _, rss in now.values()))
            for pid, (cpu, rss) in now.items():
                self.peak[pid] = max(self.peak.get(pid, 0), rss)
                self.cpu[pid] = cpu
                if pid not in self.session:
                    try:
                        self.session[pid] = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[3])
                    except (OSError, ValueError, IndexError):
                        pass
            if self.rows is not None:
                try:
                    rows = json.loads(self.rows.read_text())["rounds"]
                except (OSError, ValueError, KeyError):
                    continue
                for row in rows[len(self.events):]:
                    self.events.append({"round": row["round"], "t": time.time(), "cpu": sum(self.cpu.values()),
                                        "wall-time": row.get("wall-time"),
                                        **{k[len("central-"):]: row[k] for k in ("central-accuracy", "central-loss")
                                           if k in row}})


def child_cmd(engine: str, tmp: Path, cfg: dict) -> list[str]:
    """The command line that runs ``engine``; every process it starts carries ``tmp`` on its command line."""
    me = [str(Path(__file__).resolve())]
    events = ["--events", str(tmp / "events.jsonl")]
    if engine.startswith("fedapp-") and engine != "fedapp-flwr-run":
        workers = 1 if engine == "fedapp-serial" else 2
        run = {**cfg, "local-workers": workers, "results-dir": str(tmp / "results"), "run-name": "peer"}
        return [sys.executable, *me, "--child", "fedapp", "--config", json.dumps(run), *events]
    if engine == "fedapp-flwr-run":
        run = {**cfg, "results-dir": str(tmp / "results"), "run-name": "peer"}
        # a client holds the machine's CPUs over 2: two ClientApp workers at a time
        return [sys.executable, "-m", "fedapp.runtime.launch", "--run-config", run_config_str(run),
                "--flwr-home", str(tmp / "flwr-home"), "--port-base", os.environ.get("PEER_PORT_BASE", "39890"),
                "--num-cpus", str(max(1, (os.cpu_count() or 2) // 2))]
    pfl = [*me, "--child", "pfl", "--data", str(tmp.parent / "export"), "--rounds", str(cfg["num-server-rounds"]),
           "--every", str(cfg["eval-every"]), *events, *(["--nchw"] if engine.endswith("-nchw") else [])]
    if engine.startswith("pfl-2-workers"):
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", *pfl]
    return [sys.executable, *pfl]


def processes(engine: str) -> int:
    """Training processes of ``engine`` (the count the peers are matched on)."""
    return 1 if engine in ("fedapp-serial", "pfl", "pfl-nchw") else 2


def measure(engine: str, cfg: dict, work: Path, timeout: float) -> dict:
    """Run ``engine`` to its end (stopped after ``timeout`` s); its per-round CPU and wall, memory, start-up
    and accuracy, or why it failed."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{engine}-{uuid.uuid4().hex[:8]}-", dir=work))
    rows = tmp / "results/peer/rounds.json" if engine == "fedapp-flwr-run" else None
    sampler = Sampler(str(tmp), rows)
    sampler.start()
    t0 = time.time()
    with open(tmp / "log", "w") as log:
        proc = subprocess.Popen(child_cmd(engine, tmp, cfg), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:  # Ctrl-C first: the launcher then stops its SuperLink and Ray
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc = f"stopped after {timeout:.0f} s"
    sampler.done.set()
    sampler.join()
    if rc:
        print((tmp / "log").read_text()[-3000:], file=sys.stderr)
        return {"engine": engine, "failed": rc}
    events = sampler.events if rows else [json.loads(line) for line in (tmp / "events.jsonl").read_text().splitlines()]
    return summary(engine, events, t0, sampler)


def summary(engine: str, events: list[dict], t0: float, sampler: Sampler) -> dict:
    by_round = {e["round"]: e for e in events}
    last = max(by_round)
    later = [r for r in range(3, last + 1) if r in by_round and r - 1 in by_round]
    cpu = [by_round[r]["cpu"] - by_round[r - 1]["cpu"] for r in later]
    # through `flwr run` the server's own clock (its rows' wall-time), else the child's
    key = "wall-time" if all(e.get("wall-time") is not None for e in events) else "t"
    clock = {r: e[key] for r, e in by_round.items()}
    wall = [clock[r] - clock[r - 1] for r in later]
    evaluated = [e for e in events if "accuracy" in e]
    return {"engine": engine, "processes": processes(engine), "rounds": last,
            "cpu_round_s": statistics.median(cpu) if cpu else None,
            "wall_round_s": statistics.median(wall) if wall else None,
            "peak_rss_process_mib": max(sampler.peak.values(), default=0) / 2**20,
            "peak_rss_tree_mib": sampler.peak_tree / 2**20, "process_count": len(sampler.peak),
            # autogroup scheduling shares the cores per session (the module's docstring)
            "sessions": len(set(sampler.session.values())),
            "startup_s": by_round[0]["t"] - t0 if 0 in by_round else None,
            "final_accuracy": evaluated[-1]["accuracy"] if evaluated else None,
            "round0": {k: by_round[0].get(k) for k in ("accuracy", "loss")} if 0 in by_round else None,
            "cpu_rounds_s": cpu, "wall_rounds_s": wall}


def ratios(results: list[dict]) -> dict:
    """fedapp over the best pfl engine with as many training processes (median over repeats), each number."""
    def med(engine: str, key: str):
        xs = [r[key] for r in results if r["engine"] == engine and r.get(key) is not None]
        return statistics.median(xs) if xs else None

    keys = ("cpu_round_s", "wall_round_s", "peak_rss_process_mib", "peak_rss_tree_mib", "startup_s")
    engines = dict.fromkeys(r["engine"] for r in results)
    out = {}
    for fed in (e for e in engines if e.startswith("fedapp-")):
        peers = [e for e in engines if e.startswith("pfl") and processes(e) == processes(fed)]
        row = {}
        for key in keys:
            best = min((v for e in peers if (v := med(e, key)) is not None), default=None)
            if best and med(fed, key) is not None:
                row[key] = round(med(fed, key) / best, 3)
        out[fed] = row
    return out


def table(path: str) -> str:
    """The markdown table of the last invocation in the JSON lines file ``path``: each engine's medians over
    the repeats and fedapp's ratios to the best pfl engine with as many training processes."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    ends = [i for i, row in enumerate(lines) if row["bench"] == "peer-ratios"]
    start = ends[-2] + 1 if len(ends) > 1 else 0
    runs, ratio = [r for r in lines[start:ends[-1]] if not r.get("failed")], lines[ends[-1]]["ratios"]
    out = ["| engine | CPU s / round | wall s / round | peak RSS per process (tree) | start-up | final accuracy "
           "| fedapp / best pfl: CPU, wall, RSS per process (tree), start-up |", "| --- " * 7 + "|"]
    for engine in dict.fromkeys(r["engine"] for r in runs):
        rows = [r for r in runs if r["engine"] == engine]

        def med(key):
            return statistics.median(r[key] for r in rows)

        q = ratio.get(engine, {})
        vs = (f"{q['cpu_round_s']:.2f}, {q['wall_round_s']:.2f}, {q['peak_rss_process_mib']:.2f} "
              f"({q['peak_rss_tree_mib']:.2f}), {q['startup_s']:.2f}" if q else "")
        out.append(f"| {engine} | {med('cpu_round_s'):.2f} | {med('wall_round_s'):.2f} | "
                   f"{med('peak_rss_process_mib'):.0f} MiB ({med('peak_rss_tree_mib'):.0f} MiB) | "
                   f"{med('startup_s'):.1f} s | {100 * med('final_accuracy'):.2f} % | {vs} |")
    loads = [r["load_before"].split()[1] for r in runs] + [str(round(lines[ends[-1]]["load"][0], 2))]
    counts = sorted({sum(r["engine"] == e for r in runs) for e in {r["engine"] for r in runs}})
    out.append(f"\n{lines[ends[-1]]['rounds']} rounds, {'-'.join(map(str, counts))} run(s) an engine, 1-minute load "
               f"{min(loads, key=float)}-{max(loads, key=float)}, finished {lines[ends[-1]]['time']}.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="8 rounds (evaluated at 0, 5 and 8), one pass")
    p.add_argument("--rounds", type=int, help="rounds (default 20; --quick 8)")
    p.add_argument("--repeats", type=int, default=1, help="passes over the engines")
    p.add_argument("--engines", nargs="*", choices=ENGINES + OPTIONAL, default=list(ENGINES))
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="run-config keys instead of the workload's, as TOML (dataset='imagefolder')")
    p.add_argument("--timeout", type=float, default=900, help="seconds an engine may run before it is stopped")
    p.add_argument("--out", help="append the JSON lines to this file")
    p.add_argument("--table", metavar="JSONL", help="print the markdown table of the last invocation in JSONL and exit")
    # a child: one engine's run (started by this harness; not for direct use)
    p.add_argument("--child", choices=("fedapp", "pfl"), help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--events", help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--every", type=int, help=argparse.SUPPRESS)
    p.add_argument("--nchw", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        events = Events(a.events, str(Path(a.events).parent))
        if a.child == "fedapp":
            fedapp_child(json.loads(a.config), events)
        else:
            pfl_child(a.data, a.rounds, a.every, not a.nchw, events)
        return
    if a.table:
        print(table(a.table))
        return
    import tomllib

    if any(e.startswith("pfl") for e in a.engines):
        try:
            import pfl  # noqa: F401
        except ImportError:
            sys.exit("peer: pfl-research is not installed; pip install -e '.[bench]' (or --engines without pfl)")
    cfg = {**WORKLOAD, "num-server-rounds": a.rounds or (8 if a.quick else 20)}
    cfg.update(tomllib.loads("\n".join(a.set)))
    with tempfile.TemporaryDirectory(prefix="fedapp-peer-") as work:
        export(cfg, Path(work) / "export")
        # both sides' modules read once from disk before any engine is timed, so the first starts no colder
        subprocess.run([sys.executable, "-c", "import fedapp.runtime.inprocess, fedapp.runtime.launch, strategies.fedavg"
                        + (", pfl.algorithm, pfl.model.pytorch, torch.distributed.run" if "pfl" in str(a.engines) else "")],
                       cwd=ROOT, check=True)
        results = []
        for rep in range(a.repeats):
            for engine in a.engines:
                before = load()
                row = measure(engine, cfg, Path(work), a.timeout)
                results.append(row)
                record(a.out, bench="peer", repeat=rep, load_before=before, **row)
        record(a.out, bench="peer-ratios", rounds=cfg["num-server-rounds"], repeats=a.repeats,
               workload={k: cfg[k] for k in WORKLOAD}, ratios=ratios(results))


if __name__ == "__main__":
    main()
