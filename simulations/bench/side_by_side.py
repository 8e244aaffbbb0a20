"""fedapp beside the authors' code on one paper's small setting: seconds per round with training and
evaluation timed apart, and the peak memory of each run's whole process tree, for the authors' code,
fedapp in process and fedapp through `flwr run`, one after the other. One JSON line per engine.

    python -m simulations.bench.side_by_side hcct --rounds 2
    python -m simulations.bench.side_by_side pefll --rounds 20 --out simulations/bench/results/side_by_side.jsonl
    python -m simulations.bench.side_by_side fedsmoo --rounds 3
    python -m simulations.bench.side_by_side fedals --rounds 10

The authors' code runs unmodified from a scratch copy through the anchors' harness
(``../shared/anchors``: its venv and shim, ``ANCHOR_PY``, ``ANCHOR_SRC``, ``ANCHOR_DATA``, ``ANCHOR_WORK``
as its README sets them; ``--no-authors`` leaves it out). The settings are the ones the paper's
reproduction uses: HCCT, Table III's CIFAR-10 (``simulations/hcct/cifar10/hcct.toml``, the authors'
``main_cluster.py`` with the same flags); PeFLL, the authors' CIFAR-10 configuration
(``simulations/pefll/cifar10-100c-authors/pefll.toml``, their ``train.py`` defaults); FedSMOO, the anchors'
FL-Simulator configuration (the paper's CIFAR-10 Dirichlet-0.1 column, ``paper-cifar10-dir0.1-10pct-of-100.toml``:
ResNet-18-GN, 100 clients, 10 % a round, batch 50, with 1 local epoch for 5; their ``train.py`` with the same
flags, partition built untimed); FedALS, the reduced ResNet-20 setting (``cpu-cifar10-resnet20.toml``: 5
clients, labels sorted, tau 5, alpha 10, L 19; their ``main_fed_layer.py`` through the anchors'
``run_FedALS.sh`` with the lr of ``authors_reduced.sh``). Both codes use the
two cores: the authors' with two torch threads, fedapp with two clients at a time of one thread each
(``local-workers = 2`` in process, two Ray workers through `flwr run`). ``--cores 1`` gives each one core
(one torch thread; fedapp's serial engine, one Ray worker), for a machine whose other core is busy.

* ``train_round_s``: median over rounds 2.. of a round's training (fedapp: ``train-seconds``; HCCT's
  code: an epoch up to its last client's update; PeFLL's code: a step, from its progress bar; FL-Simulator: its
  round time less its ``_test_``; FedALS's code: tau = 5 iterations, its training loop less its evaluations
  over the iterations, times 5). ``train_client_s``: the same per client that trained (FL-Simulator draws each
  client with probability 0.1, so its rounds differ in size).
* ``eval_s``: median time of one evaluation (fedapp: the round's seconds beyond its training; HCCT's
  code: the epoch's local evaluation; PeFLL's code: the evaluating step beyond the median step;
  FL-Simulator: ``_test_``, the global model on the 50,000 training and 10,000 test images; FedALS's code:
  its ``loss``, the training loss on the 50,000 and the test accuracy on the 10,000). fedapp's FedSMOO and
  FedALS settings evaluate the 10,000 test images only; ``eval_images`` says how many each engine evaluated.
* ``peak_pss_mib``: the largest sum over the run's processes of their proportional set size (PSS: resident
  memory with each shared page divided among its sharers, so forked workers are not counted twice), sampled
  every 0.2 s; every process a run starts inherits a marker in its environment (Ray's workers, the
  SuperLink, the simulation).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, run_config_str  # noqa: E402
from startup import sample  # noqa: E402

from simulations.run import overrides, read  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ANCHORS = ROOT.parent / "shared" / "anchors"
MARK = "FEDAPP_SIDE_BY_SIDE"

#: paper -> fedapp's setting file
SETTINGS = {
    "hcct": "simulations/hcct/cifar10/hcct.toml",
    "pefll": "simulations/pefll/cifar10-100c-authors/pefll.toml",
    "fedsmoo": "simulations/fedsmoo/paper-cifar10-dir0.1-10pct-of-100.toml",
    "fedals": "simulations/fedals/cpu-cifar10-resnet20.toml",
}
#: paper -> what the measured run changes in its setting beyond rounds and evaluation (the anchors' configuration)
OVERRIDES = {"fedsmoo": {"local-epochs": 1}}
#: paper -> whether the authors' code evaluates every round (else once, after the last)
EVAL_EVERY_ROUND = {"hcct": True, "fedsmoo": True, "pefll": False, "fedals": False}
#: images one evaluation covers in fedapp's setting (the settings' test set, or every client's local test set)
TEST_IMAGES = {"fedsmoo": 10_000, "fedals": 10_000}


def measured(cmd: list[str], env: dict | None = None, cwd: Path = ROOT, log: Path | None = None) -> dict:
    """Run ``cmd`` to its end; its wall seconds, exit status and the peak PSS of its process tree."""
    token = uuid.uuid4().hex
    env = {**(env or os.environ), MARK: token}
    ours, seen, peak, at_peak = {}, {}, 0, {}
    t0 = time.time()
    with open(log or os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        ours[proc.pid] = True
        while proc.poll() is None:
            total = sample(f"{MARK}={token}".encode(), ours, seen, t0, pss=True)
            if total > peak:  # who held it: the processes of this sample (the latest stamp), by role
                peak, at_peak, now = total, {}, max(r["last"] for r in seen.values())
                for r in seen.values():
                    if r["last"] == now:
                        at_peak[r["role"]] = at_peak.get(r["role"], 0) + r["mem"] / 2**20
            time.sleep(0.2)
    return {"wall_s": time.time() - t0, "rc": proc.returncode, "peak_pss_mib": peak / 2**20,
            "peak_pss_by_process_mib": {k: round(v, 1) for k, v in sorted(at_peak.items(), key=lambda kv: -kv[1])}}


def fedapp_rounds(rows: list[dict]) -> dict:
    """Training seconds per round (rounds 2..), per client that trained, and the seconds of each evaluation,
    from rounds.json."""
    from fedapp.runtime.results import ACCURACIES

    later = [r for r in rows if r["round"] > 1]
    train = [r["train-seconds"] for r in later]
    per_client = [r["train-seconds"] / r["replies"] for r in later if r.get("replies")]
    evals = [r["round-seconds"] - r["train-seconds"] for r in rows
             if r["round"] > 0 and any(k in ACCURACIES for k in r)]
    return {"train_round_s": statistics.median(train) if train else None,
            "train_client_s": statistics.median(per_client) if per_client else None,
            "eval_s": statistics.median(evals) if evals else None, "train_rounds_s": train, "evals_s": evals}


def fedapp_config(paper: str, rounds: int, seed: int, extra: dict | None = None) -> dict:
    """The setting, the measured run's changes, and ``extra`` (``--set``, fedapp's engines only)."""
    every = 1 if EVAL_EVERY_ROUND[paper] else rounds
    return {**read(ROOT / SETTINGS[paper]), **OVERRIDES.get(paper, {}), "num-server-rounds": rounds,
            "eval-every": every, "seed": seed, "checkpoint-every": 0, "num-threads": 1, **(extra or {})}


def setting_seed(paper: str) -> int:
    """The seed a paper's setting file names (fedapp's default 0 where it names none)."""
    return int(read(ROOT / SETTINGS[paper]).get("seed", 0))


def fedapp_measured(cmd: list[str], tmp: Path, name: str) -> dict:
    """One fedapp run writing results-dir ``tmp``, run-name ``name``: its measurement and its rounds."""
    run = measured(cmd, log=tmp / f"{name}.log")
    return {**run, **fedapp_rounds(json.loads((tmp / name / "rounds.json").read_text())["rounds"])}


def fedapp_in_process(paper: str, rounds: int, seed: int, tmp: Path, cores: int, extra: dict) -> dict:
    cfg = {**fedapp_config(paper, rounds, seed, extra), "local-workers": cores, "results-dir": str(tmp), "run-name": "inproc"}
    code = "import json, sys; from fedapp.runtime.inprocess import run_local; run_local(json.loads(sys.argv[1]))"
    return fedapp_measured([sys.executable, "-c", code, json.dumps(cfg)], tmp, "inproc")


def fedapp_flwr_run(paper: str, rounds: int, seed: int, tmp: Path, cores: int, extra: dict) -> dict:
    cfg = {**fedapp_config(paper, rounds, seed, extra), "results-dir": str(tmp), "run-name": "flwr"}
    return fedapp_measured([sys.executable, "-m", "fedapp.runtime.launch", "--run-config", run_config_str(cfg),
                            "--flwr-home", str(tmp / "flwr-home"), "--port-base", "39690",
                            # CPUs a client holds: the machine's over ``cores`` runs that many clients at a time
                            "--num-cpus", str(max(1, (os.cpu_count() or 2) // cores))], tmp, "flwr")


def anchor_env(threads: int = 2) -> dict:
    env = dict(os.environ)
    missing = [k for k in ("ANCHOR_PY", "ANCHOR_SRC", "ANCHOR_DATA", "ANCHOR_WORK") if not env.get(k)]
    if missing:
        raise SystemExit(f"side_by_side: the authors' code needs {', '.join(missing)} (../shared/anchors/README.md); "
                         "--no-authors leaves it out")
    return {**env, "ANCHOR_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}


def link_cifar10(env: dict, folder: Path) -> None:
    """``folder/cifar-10-batches-py``: the anchors' converted CIFAR-10, where an authors' code looks for it."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "cifar-10-batches-py").exists():
        (folder / "cifar-10-batches-py").symlink_to(Path(env["ANCHOR_DATA"]) / "cifar-10-batches-py")


def authors_hcct(rounds: int, seed: int, tmp: Path, cores: int) -> dict:
    """main_cluster.py on Table III's CIFAR-10 setting (the flags of simulations/hcct/README.md), timestamped."""
    from simulations.hcct.authors_log import summarise

    env = anchor_env(cores)
    work = tmp / "HCCT"
    subprocess.run(["cp", "-a", f"{env['ANCHOR_SRC']}/HCCT/.", str(work)], check=True)
    link_cifar10(env, work / "data" / "cifar10")
    run_cmd = (f"{env['ANCHOR_PY']} {ANCHORS}/shim_run.py --repo {work} --script main_cluster.py "
               "--stub models.Resnet --stub models.test --stub utils.language_utils "
               "--stub-attr utils.dataset:FEMNIST --stub-attr utils.dataset:ShakeSpeare -- "
               f"--seed {seed} --dataset cifar --model cnn4 --gpu -1 --epochs {rounds} --num_users 10 "
               f"--imb_type halfnormal --strategy hcct --alpha 1 --train_ratio 0.2 --data_dir {work}/data/ "
               f"2>&1 | {env['ANCHOR_PY']} {ANCHORS}/tslog.py")
    log = tmp / "authors-hcct.log"
    run = measured(["bash", "-c", run_cmd], env=env, cwd=work, log=log)
    s = summarise(str(log))
    return {**run, "train_round_s": s.get("train-seconds-per-epoch"), "eval_s": s.get("eval-seconds-per-epoch"),
            "epochs": s["rounds"], "error": round(100 * s["value"], 4)}


def authors_pefll(rounds: int, seed: int, tmp: Path, cores: int) -> dict:
    """train.py with the repo's defaults (the anchors' run_PeFLL.sh), ``rounds`` steps, evaluated at the last."""
    env = {**anchor_env(cores), "ANCHOR_RESULTS": str(tmp), "ANCHOR_TIMEOUT": "3600"}
    run = measured(["bash", str(ANCHORS / "run_PeFLL.sh"), str(rounds), str(rounds)], env=env,
                   log=tmp / "authors-pefll.out")
    summary = json.loads(next(tmp.glob("PeFLL_*.json")).read_text())
    return {**run, **pefll_step_times(Path(env["ANCHOR_WORK"]) / f"PeFLL_c100_seen90_steps{rounds}.log"),
            "final_accuracy": summary.get("final_accuracy")}


def authors_fedsmoo(rounds: int, seed: int, tmp: Path, cores: int) -> dict:
    """FL-Simulator's ``train.py`` on the anchors' configuration (``run_FL-Simulator.sh``'s flags, the paper's
    Dirichlet-0.1 column with 1 local epoch), ``rounds`` rounds, its ``_test_`` timed by the shim."""
    env = anchor_env(cores)
    work, droot = tmp / "FL-Simulator", Path(env["ANCHOR_WORK"]) / "flsim-data"
    subprocess.run(["cp", "-a", f"{env['ANCHOR_SRC']}/FL-Simulator/.", str(work)], check=True)
    link_cifar10(env, droot / "Data" / "Raw")
    shim = [env["ANCHOR_PY"], str(ANCHORS / "shim_run.py"), "--repo", str(work)]
    # the partition, with the repo's own DatasetObject, untimed and cached as the anchors' script does
    subprocess.run([*shim, "--code", "from dataset import DatasetObject\n"
                    f"DatasetObject(dataset='CIFAR10', n_client=100, seed={seed}, unbalanced_sgm=0, "
                    f"rule='Dirichlet', rule_arg=0.1, data_path='{droot}/')"],
                   env=env, cwd=work, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    args = ("--non-iid --dataset CIFAR10 --model ResNet18 --split-rule Dirichlet --split-coef 0.1 --active-ratio 0.1 "
            f"--total-client 100 --comm-rounds {rounds} --local-epochs 1 --batchsize 50 --weight-decay 0.001 "
            "--local-learning-rate 0.1 --global-learning-rate 1.0 --lr-decay 0.998 "
            f"--seed {seed} --method FedSMOO --data-file {droot}/ --out-file {work}/out/")
    log = tmp / "authors-fedsmoo.log"
    run_cmd = (f"{' '.join(shim)} --script train.py --time-func server.server:Server._test_ -- {args} "
               f"2>&1 | {env['ANCHOR_PY']} {ANCHORS}/tslog.py")
    run = measured(["bash", "-c", run_cmd], env=env, cwd=work, log=log)
    return {**run, **fl_simulator_rounds(log), "eval_images": 60_000}


def fl_simulator_rounds(log: Path) -> dict:
    """Per round of FL-Simulator's log: its clients (``Selected Clients``), its ``Time``, and the shim's timer
    of ``Server._test_``; a round's training is its time less its test, medians over rounds 2.."""
    rounds: list[dict] = []
    for line in log.read_text(errors="replace").splitlines():
        text = line.partition("\t")[2]
        if re.search(r"Communication Round \d+", text):
            rounds.append({})
        elif rounds and text.startswith("Selected Clients:"):
            rounds[-1]["clients"] = len(text.split(":", 1)[1].split(","))
        elif rounds and (m := re.search(r"Server\._test_ dt=([\d.]+)", text)):
            rounds[-1]["test"] = float(m.group(1))
        elif rounds and (m := re.search(r"----\s+Time: ([\d.]+)s", text)):
            rounds[-1]["time"] = float(m.group(1))
    done = [r for r in rounds if {"clients", "test", "time"} <= set(r)]
    later = done[1:]
    train = [r["time"] - r["test"] for r in later]
    return {"train_round_s": statistics.median(train) if train else None,
            "train_client_s": statistics.median([t / r["clients"] for t, r in zip(train, later)]) if later else None,
            "eval_s": statistics.median([r["test"] for r in done]) if done else None,
            "train_rounds_s": train, "clients_per_round": [r["clients"] for r in done]}


def authors_fedals(rounds: int, seed: int, tmp: Path, cores: int) -> dict:
    """FedALS's ``main_fed_layer.py`` through the anchors' ``run_FedALS.sh`` (alpha 10, L 19, tau 5, the
    constant lr of ``simulations/fedals/authors_reduced.sh``): ``5 * rounds`` iterations, evaluated at
    iteration 0 and after the last. Their code draws its own seed; ``seed`` is unused."""
    iters = 5 * rounds
    env = {**anchor_env(cores), "ANCHOR_RESULTS": str(tmp), "ANCHOR_TIMEOUT": "3600",
           "FEDALS_LR_EXP": "5.643856", "FEDALS_CTE": "True"}
    run = measured(["bash", str(ANCHORS / "run_FedALS.sh"), "10", str(iters + 1), str(iters)], env=env,
                   log=tmp / "authors-fedals.out")
    summary = json.loads(next(tmp.glob("FedALS_*.json")).read_text())
    per_iteration, evals = summary.get("sec_per_round_median"), summary.get("eval_sec_each") or []
    train_round = 5 * per_iteration if per_iteration else None  # a round is tau = 5 iterations of all 5 nodes
    return {**run, "train_round_s": train_round, "train_client_s": train_round / 5 if train_round else None,
            "eval_s": statistics.median(evals) if evals else None, "evals_s": evals,
            "final_accuracy": summary.get("final_accuracy"), "eval_images": 60_000}


def pefll_step_times(log: Path) -> dict:
    """Seconds per step from the first time each step count shows in the progress bar (tslog stamps);
    the steps that evaluated stand out, and their excess over the median is an evaluation's time."""
    first: dict[int, float] = {}
    for line in log.read_text(errors="replace").splitlines():
        t, _, text = line.partition("\t")
        if m := re.search(r"\|\s*(\d+)/(\d+) \[", text):
            first.setdefault(int(m.group(1)), float(t))
    ks = sorted(first)
    steps = [first[b] - first[a] for a, b in zip(ks, ks[1:]) if b == a + 1]
    if not steps:
        return {"train_round_s": None, "eval_s": None}
    med = statistics.median(steps)
    return {"train_round_s": med, "eval_s": max(steps) - med if max(steps) > 3 * med else None}


AUTHORS = {"hcct": authors_hcct, "pefll": authors_pefll, "fedsmoo": authors_fedsmoo, "fedals": authors_fedals}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paper", choices=sorted(SETTINGS))
    p.add_argument("--rounds", type=int, default=2, help="rounds (HCCT: epochs; PeFLL: steps)")
    p.add_argument("--seed", type=int, help="default: the setting file's seed (0 where it names none)")
    p.add_argument("--cores", type=int, choices=(1, 2), default=2, help="cores each engine uses (default 2)")
    p.add_argument("--no-authors", action="store_true", help="fedapp only")
    p.add_argument("--engines", nargs="+", choices=("authors", "in-process", "flwr-run"),
                   default=["authors", "in-process", "flwr-run"], help="which engines run (default: all three)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE",
                   help="run-config changes for fedapp's engines (Flower's key=value syntax), e.g. reply-memory-mb=1")
    p.add_argument("--out", help="also append the JSON lines to this file")
    a = p.parse_args(argv)
    seed = setting_seed(a.paper) if a.seed is None else a.seed
    extra = overrides(a.set)
    chosen = [e for e in a.engines if not (a.no_authors and e == "authors")]
    if "authors" in chosen:
        anchor_env()  # the one-line error before anything runs
    engines = {"authors": lambda paper, rounds, seed, tmp, cores: AUTHORS[paper](rounds, seed, tmp, cores),
               "in-process": lambda *args: fedapp_in_process(*args, extra),
               "flwr-run": lambda *args: fedapp_flwr_run(*args, extra)}
    for engine in chosen:
        with tempfile.TemporaryDirectory(prefix=f"side-{a.paper}-") as tmp:
            out = engines[engine](a.paper, a.rounds, seed, Path(tmp), a.cores)
        if engine != "authors" and a.paper in TEST_IMAGES:
            out["eval_images"] = TEST_IMAGES[a.paper]
        emit({"paper": a.paper, "engine": engine, "rounds": a.rounds, "seed": seed, "cores": a.cores,
              "setting": SETTINGS[a.paper], "overrides": {**OVERRIDES.get(a.paper, {}),
                                                          **(extra if engine != "authors" else {})},
              **out, "load": os.getloadavg(), "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}, a.out)


if __name__ == "__main__":
    main()
