"""The attack matrix of docs/reliability.md: each strategy's final accuracy under each attack of
``fedapp.runtime.faults`` (30% and 60% of the clients), on IID, Dirichlet(0.1) and natural data, at two
run lengths, under ``defence = "robust"`` (and, on request, the other robust options), against the
fair reference: the same run with the attackers offline (their replies errors, the plain mean).
Every cell also has its honest runs, plain mean and robust, and the sweep one long honest run
(SCAFFOLD, 200 rounds on 5 natural clients).

    OMP_NUM_THREADS=1 PYTHONPATH=. python simulations/attacks.py --small --out attacks.json --results-dir OUT
    PYTHONPATH=. python simulations/attacks.py --table --out attacks.json  # its tables for the page

Every run is in process (``fedapp.runtime.inprocess``), one after the other, single-threaded; the JSON is
rewritten after each run, so a stopped sweep keeps what it measured, and the same command resumes it
(rows already measured are not run again). ``--small`` is the CI scale (synthetic data); its committed
sweep is CI_SWEEP, a slice of which ``tests/test_security_robust.py`` runs.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import torch

from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.faults import faulty_partitions
from fedapp.runtime.inprocess import run_local

#: the committed CI-scale sweep whose tables docs/reliability.md shows (``--small``)
CI_SWEEP = Path(__file__).parent / "reliability" / "attacks-ci.json"
#: the page's setting: MNIST, 10 clients, every client every round; an MLP, 20 local steps of
#: batch 32 at lr 0.05 (PeFLL: k = local-steps on the MLP it generates)
SETTING = {"dataset": "mnist", "model": "mlp", "num-clients": 10, "local-steps": 20, "batch-size": 32,
           "lr": 0.05, "fraction-train": 1.0, "fraction-evaluate": 1.0, "checkpoint-every": 0, "seed": 0,
           "num-threads": 1, "central-eval": True,
           "max-empty-rounds": 0}  # a diverged model's NaN replies are dropped: the matrix records, not stops
#: the CI scale: the offline synthetic data, 5 local steps
SMALL = {**SETTING, "dataset": "synthetic", "local-steps": 5}
#: the data axis (natural: Synthetic(1, 1)'s own clients; MNIST has none, so the page's setting skips it)
DATA = {"iid": {"partition": "iid"}, "dirichlet": {"partition": "dirichlet", "partition-alpha": 0.1},
        "natural": {"partition": "natural"}}
#: the length axis, in rounds (times ROUNDS for the strategies listed there)
LENGTHS = (8, 16)
#: per strategy: what it needs of the setting (FedALS averages its body every 2 rounds)
EXTRA = {"fedals": {"fedals.alpha": 2},
         # PeFLL with the server optimiser of its settings files (the authors' code: Adam, joint clip 50,
         # inner clip 50): the default delta rule diverges on this setting without attackers
         "pefll": {"pefll.server-opt": "adam", "pefll.server-clip": 50.0, "pefll.clip": 50.0}}
#: rounds as a multiple of the length, so that the personalised strategies leave chance (set before
#: any run): HCCT groups its clients first, PeFLL's hypernetwork learns from one step a round
ROUNDS = {"hcct": 2, "pefll": 3}
#: strategies measured on the clients' own models (HCCT's central model exists only while it keeps one group)
PERSONAL = ("hcct", "pefll")
STRATEGIES = ("fedavg", "scaffold", "fedsmoo", "fedals", "hcct", "pefll")
ATTACKS = ("negate", "sign-flip", "noise", "scale", "alie", "collude", "honest-noise")
#: the options an attacked cell can be run with: "none" is the default (the algorithm exactly),
#: "robust" the one-setting defence; the trim fraction 0.4 and Multi-Krum's f (the true attacker
#: count) and m = n - f (set per fraction below) were set before any run
OPTIONS = {
    "none": {},
    "robust": {"defence": "robust"},
    "median": {"aggregation": "median"},
    "trimmed-mean": {"aggregation": "trimmed-mean", "trim-fraction": 0.4},
    "multi-krum": {"aggregation": "krum"},
}
#: the long honest run the defence must leave within a point of the plain mean's
LONG = {"strategy": "scaffold", "dataset": "synthetic", "partition": "natural", "num-clients": 5,
        "num-server-rounds": 200, "local-steps": 2, "batch-size": 16, "seed": 4, "num-threads": 1,
        "central-eval": True, "checkpoint-every": 0, "max-empty-rounds": 0}


def accuracy(strategy, attackers=()) -> float | None:
    """The final central accuracy, or for the PERSONAL strategies the mean of the last evaluation's
    client accuracies over the clients that are not ``attackers``."""
    last = strategy.history[-1]
    value = None if strategy.cfg.strategy in PERSONAL else last.get("central-accuracy")
    if value is None:
        per_client = last.get("fed-client-accuracy") or last_client_accuracies(strategy)
        accs = [a for pid, a in per_client.items() if int(pid) not in attackers]
        value = sum(accs) / len(accs) if accs else None
    return None if value is None or not math.isfinite(value) else round(float(value), 4)


def last_client_accuracies(strategy) -> dict[int, float]:
    """partition id -> accuracy in the run's last evaluation, from its clients.csv (the results
    writer takes ``client_evals`` as it writes them)."""
    path = getattr(strategy, "results_path", None)
    if path is None or not (Path(path) / "clients.csv").exists():
        return {pid: m["accuracy"] for pid, _, m in strategy.client_evals}
    with open(Path(path) / "clients.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = max((int(r["round"]) for r in rows), default=None)
    return {int(r["partition-id"]): float(r["accuracy"]) for r in rows if int(r["round"]) == last}


def run_config(setting: dict, strategy: str, data: str, rounds: int, option: str, attack: str | None,
               fraction: float) -> dict:
    """One cell's run config; ``attack`` "offline" makes the attackers' replies errors (the fair
    reference), None runs without attackers."""
    cfg = {**setting, **DATA[data], **EXTRA.get(strategy, {}), **OPTIONS[option], "strategy": strategy,
           "num-server-rounds": rounds * ROUNDS.get(strategy, 1),
           "fault-fraction": fraction if attack else 0.0,
           "fault-kind": "raise" if attack in (None, "offline") else attack,
           "run-name": f"{strategy}-{data}-{rounds}-{option}-{attack}-{fraction}"}
    if strategy == "pefll":
        cfg["pefll.k"] = setting["local-steps"]
    if cfg.get("aggregation") == "krum":  # f at most what Krum tolerates of n: n > 2 f + 2
        f = min(int(round(fraction * cfg["num-clients"])), (cfg["num-clients"] - 3) // 2)
        cfg.update({"krum-byzantine": f, "krum-select": cfg["num-clients"] - f})
    return cfg


def measure(cfg: dict, results_dir: str, honest: set[int]) -> dict:
    """One run's row values: its accuracy over the ``honest`` clients, dropped and clipped replies,
    seconds, or the first line of the error it raised."""
    t0 = time.time()
    try:
        run = run_local({**cfg, "results-dir": results_dir})
    except Exception as exc:  # a run that cannot go on (no valid reply) is a row too
        row = {"accuracy": None, "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    else:
        row = {"accuracy": accuracy(run, honest), **counts(run)}
    return {**row, "seconds": round(time.time() - t0, 1)}


def sweep(setting: dict, results_dir: str, strategies=STRATEGIES, data=tuple(DATA), lengths=LENGTHS,
          attacks=ATTACKS, fractions=(0.3, 0.6), options=("robust",), long: bool = True,
          out: Path | None = None) -> list[dict]:
    """Rows of (strategy, data, rounds, option, attack, attackers): per cell, the honest runs (attack
    None, options none and robust: accuracy over every client), per fraction the attackers-offline
    run (attack "offline", option none) and each attack under each of ``options``, all measured over
    the fraction's honest clients; ``drop`` is the offline run's accuracy less the row's. With
    ``long``, the LONG honest run under none and robust (data "long"). An ``out`` of the same
    setting from a stopped sweep is resumed: its rows are kept, and only the missing ones run."""
    done: dict[tuple, dict] = {}
    if out is not None and out.exists():
        old = json.loads(out.read_text())
        if old.get("setting") == setting:
            done = {key(r): r for r in old["rows"]}
    rows: list[dict] = []

    def row(strategy, data_name, rounds, option, attack, fraction, cfg, honest, ref=None):
        k = (strategy, data_name, rounds, option, attack, fraction)
        r = done.get(k) or {"strategy": strategy, "data": data_name, "rounds": rounds, "option": option,
                            "attack": attack, "attackers": fraction, **measure(cfg, results_dir, honest)}
        if ref is not None:
            r["drop"] = None if r["accuracy"] is None or ref is None else round(ref - r["accuracy"], 4)
        rows.append(r)
        if out is not None and k not in done:
            write()
            print(r, flush=True)
        return r

    def write():  # the rows of an earlier sweep that this one does not reach stay in the file
        kept = {**done, **{key(x): x for x in rows}}
        out.write_text(json.dumps({"setting": setting, "rows": list(kept.values())}, indent=1) + "\n")

    for data_name in data:
        for rounds in lengths:
            for strategy in strategies:
                for option in ("none", "robust"):
                    row(strategy, data_name, rounds, option, None, 0.0,
                        run_config(setting, strategy, data_name, rounds, option, None, 0.0), set())
                for fraction in fractions:
                    cfg = run_config(setting, strategy, data_name, rounds, "none", "offline", fraction)
                    bad = faulty_partitions(parse_run_config(cfg))
                    ref = row(strategy, data_name, rounds, "none", "offline", fraction, cfg, bad)["accuracy"]
                    for attack in attacks:
                        for option in options:
                            row(strategy, data_name, rounds, option, attack, fraction,
                                run_config(setting, strategy, data_name, rounds, option, attack, fraction), bad, ref)
    if long:
        for option in ("none", "robust"):
            row("scaffold", "long", LONG["num-server-rounds"], option, None, 0.0, {**LONG, **OPTIONS[option],
                "run-name": f"long-{option}"}, set())
    if out is not None:
        write()
    return rows


def key(r: dict) -> tuple:
    return r["strategy"], r["data"], r["rounds"], r["option"], r["attack"], r["attackers"]


def cell(value: float | None, error: bool = False) -> str:
    return "err" if error else "div" if value is None else f"{100 * value:.1f}"


def page_table(rows: list[dict], fraction: float = 0.3, option: str = "robust") -> str:
    """docs/reliability.md's table of ``rows`` (``sweep``'s) at one attacker ``fraction``: per strategy,
    data and length, the attackers-offline accuracy, each attack's drop in points below it under
    ``option`` ("err": the run raised, "div": no finite accuracy), and the honest runs' accuracy under
    the plain mean and under robust."""
    by = {key(r): r for r in rows}
    lines = ["| strategy | data | rounds | offline | " + " | ".join(ATTACKS) + " | honest: none / robust |",
             "|---|---|---|---|" + "---|" * (len(ATTACKS) + 1)]
    cells = sorted({(r["strategy"], r["data"], r["rounds"]) for r in rows if r["attackers"] == fraction},
                   key=lambda c: (STRATEGIES.index(c[0]), list(DATA).index(c[1]), c[2]))
    for s, d, n in cells:
        off = by.get((s, d, n, "none", "offline", fraction), {})
        drops = [by.get((s, d, n, option, a, fraction)) for a in ATTACKS]
        honest = [by.get((s, d, n, o, None, 0.0), {}).get("accuracy") for o in ("none", "robust")]
        lines.append(f"| {s} | {d} | {n} | {cell(off.get('accuracy'))} | " + " | ".join(
            "-" if r is None else cell(r.get("drop"), bool(r.get("error"))) for r in drops)
            + f" | {cell(honest[0])} / {cell(honest[1])} |")
    return "\n".join(lines)


def option_table(rows: list[dict], fraction: float = 0.3) -> str:
    """docs/reliability.md's comparison of the options: each cell and attack run under more than one
    option, its drops under each ("robust / median / multi-krum"), in OPTIONS' order."""
    by = {key(r): r for r in rows}
    runs: dict[tuple, list[str]] = {}
    for r in rows:
        if r["attack"] not in (None, "offline") and r["attackers"] == fraction:
            runs.setdefault((r["strategy"], r["data"], r["rounds"], r["attack"]), []).append(r["option"])
    runs = {k: [o for o in OPTIONS if o in v] for k, v in runs.items() if len(v) > 1}
    if not runs:
        return ""
    names = next(iter(runs.values()))
    attacked = list(dict.fromkeys(k[3] for k in runs))
    lines = ["| strategy | data | rounds | " + " | ".join(f"{a}: {' / '.join(names)}" for a in attacked) + " |",
             "|---|---|---|" + "---|" * len(attacked)]
    for s, d, n in dict.fromkeys(k[:3] for k in runs):
        lines.append(f"| {s} | {d} | {n} | " + " | ".join(" / ".join(
            cell(by[s, d, n, o, a, fraction].get("drop"), bool(by[s, d, n, o, a, fraction].get("error")))
            if (s, d, n, o, a, fraction) in by else "-" for o in names) for a in attacked) + " |")
    return "\n".join(lines)


def long_line(rows: list[dict]) -> str:
    """The long honest run's line on the page: final accuracy under none and robust, robust's drops."""
    got = {r["option"]: r for r in rows if r["data"] == "long"}
    if set(got) != {"none", "robust"}:
        return ""
    none, robust = got["none"], got["robust"]
    return (f"SCAFFOLD, {none['rounds']} rounds on 5 natural synthetic clients without attackers: plain mean "
            f"{cell(none['accuracy'])}, robust {cell(robust['accuracy'])} ({robust.get('dropped', 0)} replies "
            f"dropped, {robust.get('clipped', 0)} clipped).")


def counts(strategy) -> dict[str, int]:
    """The run's dropped and clipped replies over all its rounds."""
    return {"dropped": sum(r.get("dropped-replies", 0) for r in strategy.history),
            "clipped": sum(r.get("clipped-replies", 0) for r in strategy.history)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--results-dir", help="where the runs' results go (required to run)")
    p.add_argument("--small", action="store_true", help="the CI scale (synthetic data)")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--data", default=",".join(DATA))
    p.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    p.add_argument("--attacks", default=",".join(ATTACKS))
    p.add_argument("--options", default="robust", help="comma-separated names of OPTIONS for the attacked runs")
    p.add_argument("--fractions", default="0.3,0.6")
    p.add_argument("--no-long", action="store_true", help="leave out the long honest SCAFFOLD run")
    p.add_argument("--table", action="store_true", help="print the page's tables of --out and run nothing")
    a = p.parse_args()
    if a.table:
        rows = json.loads(a.out.read_text())["rows"]
        for fraction in sorted({r["attackers"] for r in rows} - {0.0}):
            print(f"{round(100 * fraction)}% attackers:\n\n{page_table(rows, fraction)}\n")
            print(option_table(rows, fraction) + "\n")
        print(long_line(rows))
        return
    if not a.results_dir:
        p.error("--results-dir is required to run the matrix")
    torch.set_num_threads(1)
    sweep(SMALL if a.small else SETTING, a.results_dir, a.strategies.split(","), a.data.split(","),
          [int(n) for n in a.lengths.split(",")], a.attacks.split(","), [float(f) for f in a.fractions.split(",")],
          a.options.split(","), not a.no_long, a.out)


if __name__ == "__main__":
    main()
