"""fedapp beside the authors' code on one paper's small setting: seconds per round with training and
evaluation timed apart, and the peak memory of each run's whole process tree, for the authors' code,
fedapp in process and fedapp through `flwr run`, one after the other. One JSON line per engine.

    python -m simulations.bench.side_by_side hcct --rounds 2
    python -m simulations.bench.side_by_side pefll --rounds 20 --out simulations/bench/results/side_by_side.jsonl

The authors' code runs unmodified from a scratch copy through the anchors' harness
(``../shared/anchors``: its venv and shim, ``ANCHOR_PY``, ``ANCHOR_SRC``, ``ANCHOR_DATA``, ``ANCHOR_WORK``
as its README sets them; ``--no-authors`` leaves it out). The settings are the ones the paper's
reproduction uses: HCCT, Table III's CIFAR-10 (``simulations/hcct/cifar10/hcct.toml``, the authors'
``main_cluster.py`` with the same flags); PeFLL, the authors' CIFAR-10 configuration
(``simulations/pefll/cifar10-100c-authors/pefll.toml``, their ``train.py`` defaults). Both codes use the
two cores: the authors' with two torch threads, fedapp with two clients at a time of one thread each
(``local-workers = 2`` in process, two Ray workers through `flwr run`).

* ``train_round_s``: median over rounds 2.. of a round's training (fedapp: ``train-seconds``; HCCT's
  code: an epoch up to its last client's update; PeFLL's code: a step, from its progress bar).
* ``eval_s``: median time of one evaluation (fedapp: the round's seconds beyond its training; HCCT's
  code: the epoch's local evaluation; PeFLL's code: the evaluating step beyond the median step).
* ``peak_pss_mib``: the largest sum over the run's processes of their proportional set size (PSS: resident
  memory with each shared page divided among its sharers, so forked workers are not counted twice), sampled
  every 0.2 s; every process a run starts inherits a marker in its environment (Ray's workers, the
  SuperLink, the simulation).
"""

from __future__ import annotations

import argparse
import json
import os
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

ROOT = Path(__file__).resolve().parents[2]
ANCHORS = ROOT.parent / "shared" / "anchors"
MARK = "FEDAPP_SIDE_BY_SIDE"

#: paper -> fedapp's setting file, the overrides of a measured run, the authors' command
SETTINGS = {
    "hcct": "simulations/hcct/cifar10/hcct.toml",
    "pefll": "simulations/pefll/cifar10-100c-authors/pefll.toml",
}


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
    """Training seconds per round (rounds 2..) and the seconds of each evaluation, from rounds.json."""
    train = [r["train-seconds"] for r in rows if r["round"] > 1]
    evals = [r["round-seconds"] - r["train-seconds"] for r in rows
             if r["round"] > 0 and any(k.startswith("fed-") and "accuracy" in k for k in r)]
    return {"train_round_s": statistics.median(train) if train else None,
            "eval_s": statistics.median(evals) if evals else None, "train_rounds_s": train, "evals_s": evals}


def fedapp_config(paper: str, rounds: int, seed: int) -> dict:
    from simulations.run import read

    every = 1 if paper == "hcct" else rounds  # HCCT's code evaluates every epoch, PeFLL's at the end here
    return {**read(ROOT / SETTINGS[paper]), "num-server-rounds": rounds, "eval-every": every, "seed": seed,
            "checkpoint-every": 0, "num-threads": 1}


def fedapp_measured(cmd: list[str], tmp: Path, name: str) -> dict:
    """One fedapp run writing results-dir ``tmp``, run-name ``name``: its measurement and its rounds."""
    run = measured(cmd, log=tmp / f"{name}.log")
    return {**run, **fedapp_rounds(json.loads((tmp / name / "rounds.json").read_text())["rounds"])}


def fedapp_in_process(paper: str, rounds: int, seed: int, tmp: Path) -> dict:
    cfg = {**fedapp_config(paper, rounds, seed), "local-workers": 2, "results-dir": str(tmp), "run-name": "inproc"}
    code = "import json, sys; from fedapp.inprocess import run_local; run_local(json.loads(sys.argv[1]))"
    return fedapp_measured([sys.executable, "-c", code, json.dumps(cfg)], tmp, "inproc")


def fedapp_flwr_run(paper: str, rounds: int, seed: int, tmp: Path) -> dict:
    cfg = {**fedapp_config(paper, rounds, seed), "results-dir": str(tmp), "run-name": "flwr"}
    return fedapp_measured([sys.executable, "-m", "fedapp.launch", "--run-config", run_config_str(cfg),
                            "--flwr-home", str(tmp / "flwr-home"), "--port-base", "39690"], tmp, "flwr")


def anchor_env(threads: int = 2) -> dict:
    env = dict(os.environ)
    missing = [k for k in ("ANCHOR_PY", "ANCHOR_SRC", "ANCHOR_DATA", "ANCHOR_WORK") if not env.get(k)]
    if missing:
        raise SystemExit(f"side_by_side: the authors' code needs {', '.join(missing)} (../shared/anchors/README.md); "
                         "--no-authors leaves it out")
    return {**env, "ANCHOR_THREADS": str(threads), "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}


def authors_hcct(rounds: int, seed: int, tmp: Path) -> dict:
    """main_cluster.py on Table III's CIFAR-10 setting (the flags of docs/results/hcct.md), timestamped."""
    from simulations.hcct.authors_log import summarise

    env = anchor_env()
    work = tmp / "HCCT"
    subprocess.run(["cp", "-a", f"{env['ANCHOR_SRC']}/HCCT/.", str(work)], check=True)
    (work / "data" / "cifar10").mkdir(parents=True)
    (work / "data" / "cifar10" / "cifar-10-batches-py").symlink_to(Path(env["ANCHOR_DATA"]) / "cifar-10-batches-py")
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
            "epochs": s["epochs"], "error": s["error"]}


def authors_pefll(rounds: int, seed: int, tmp: Path) -> dict:
    """train.py with the repo's defaults (the anchors' run_PeFLL.sh), ``rounds`` steps, evaluated at the last."""
    env = {**anchor_env(), "ANCHOR_RESULTS": str(tmp), "ANCHOR_TIMEOUT": "3600"}
    run = measured(["bash", str(ANCHORS / "run_PeFLL.sh"), str(rounds), str(rounds)], env=env,
                   log=tmp / "authors-pefll.out")
    summary = json.loads(next(tmp.glob("PeFLL_*.json")).read_text())
    return {**run, **pefll_step_times(Path(env["ANCHOR_WORK"]) / f"PeFLL_c100_seen90_steps{rounds}.log"),
            "final_accuracy": summary.get("final_accuracy")}


def pefll_step_times(log: Path) -> dict:
    """Seconds per step from the first time each step count shows in the progress bar (tslog stamps);
    the steps that evaluated stand out, and their excess over the median is an evaluation's time."""
    import re

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


AUTHORS = {"hcct": authors_hcct, "pefll": authors_pefll}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paper", choices=sorted(SETTINGS))
    p.add_argument("--rounds", type=int, default=2, help="rounds (HCCT: epochs; PeFLL: steps)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-authors", action="store_true", help="fedapp only")
    p.add_argument("--out", help="also append the JSON lines to this file")
    a = p.parse_args(argv)
    engines = {"in-process": fedapp_in_process, "flwr-run": fedapp_flwr_run}
    if not a.no_authors:
        anchor_env()  # the one-line error before anything runs
        engines = {"authors": lambda paper, *args: AUTHORS[paper](*args), **engines}
    for engine, fn in engines.items():
        with tempfile.TemporaryDirectory(prefix=f"side-{a.paper}-") as tmp:
            out = fn(a.paper, a.rounds, a.seed, Path(tmp))
        emit({"paper": a.paper, "engine": engine, "rounds": a.rounds, "seed": a.seed, "setting": SETTINGS[a.paper],
              **out, "load": os.getloadavg(), "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}, a.out)


if __name__ == "__main__":
    main()
