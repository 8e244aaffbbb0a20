"""The attack table of docs/reliability.md: final accuracy of each strategy under each attack of
``fedapp.runtime.faults`` (30% and 60% of the clients), for each robust-aggregation option, against the
same strategy's run without attackers.

    OMP_NUM_THREADS=1 PYTHONPATH=. python simulations/attacks.py --out attacks.json --results-dir OUT
    PYTHONPATH=. python simulations/attacks.py --table --out attacks.json  # its table for the page

Every run is in process (``fedapp.runtime.inprocess``), one after the other, single-threaded; the JSON is
rewritten after each run, so a stopped sweep keeps what it measured, and the same command resumes it.
``--small`` is the CI scale (synthetic data, a few rounds; ``tests/test_security_robust.py``); its
sweep of the page is CI_SWEEP.
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

#: the CI-scale sweep whose table docs/reliability.md shows (``--small``, every strategy, attack and option)
CI_SWEEP = Path(__file__).parent / "reliability" / "attacks-ci.json"
#: the page's setting: MNIST, 10 IID clients, every client every round; an MLP, 20 local steps of
#: batch 32 at lr 0.05 (PeFLL: k = local-steps on the MLP it generates)
SETTING = {"dataset": "mnist", "partition": "iid", "model": "mlp", "num-clients": 10, "num-server-rounds": 10,
           "local-steps": 20, "batch-size": 32, "lr": 0.05, "fraction-train": 1.0, "fraction-evaluate": 1.0,
           "checkpoint-every": 0, "seed": 0, "num-threads": 1, "central-eval": True,
           "max-empty-rounds": 0}  # a diverged model's NaN replies are dropped: the table records, not stops
#: the CI scale: the offline synthetic data split IID as the page's MNIST (its natural clients differ, so
#: 3 silent clients alone would cost points), 4 rounds of 5 steps
SMALL = {**SETTING, "dataset": "synthetic", "num-server-rounds": 4, "local-steps": 5}
#: per strategy: what it needs of the setting (FedALS averages its body every 2 rounds)
EXTRA = {"fedals": {"fedals.alpha": 2},
         # PeFLL with the server optimiser of its settings files (the authors' code: Adam, joint clip 50,
         # inner clip 50): the default delta rule diverges on this setting without attackers
         "pefll": {"pefll.server-opt": "adam", "pefll.server-clip": 50.0, "pefll.clip": 50.0}}
#: rounds as a multiple of the setting's, so that the personalised strategies leave chance (set
#: before any run): HCCT groups its clients first, PeFLL's hypernetwork learns from one step a round
ROUNDS = {"hcct": 2, "pefll": 3}
#: strategies measured on the clients' own models (HCCT's central model exists only while it keeps one group)
PERSONAL = ("hcct", "pefll")
STRATEGIES = ("fedavg", "scaffold", "fedsmoo", "fedals", "hcct", "pefll")
ATTACKS = ("negate", "sign-flip", "noise", "scale", "alie")
#: robust options, each on its own: "default" is the run config's default (the norm bound, a clip at 3
#: times the lower median, and the direction screen), "none" the plain mean (the papers' setting). The trim
#: fraction 0.4 and Multi-Krum's f (the true attacker count) and m = n - f (set per fraction below)
#: were set before any run.
PLAIN = {"screen-factor": 0.0, "screen-direction": False}
OPTIONS = {
    "default": {},
    "none": PLAIN,
    "median": {**PLAIN, "aggregation": "median"},
    "trimmed-mean": {**PLAIN, "aggregation": "trimmed-mean", "trim-fraction": 0.4},
    "multi-krum": {**PLAIN, "aggregation": "krum"},
}


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


def run_config(setting: dict, strategy: str, option: str, attack: str | None, fraction: float) -> dict:
    cfg = {**setting, **EXTRA.get(strategy, {}), **OPTIONS[option], "strategy": strategy,
           "fault-fraction": fraction if attack else 0.0, "fault-kind": attack or "raise",
           "run-name": f"{strategy}-{option}-{attack}-{fraction}"}
    cfg["num-server-rounds"] = setting["num-server-rounds"] * ROUNDS.get(strategy, 1)
    if strategy == "pefll":
        cfg["pefll.k"] = setting["local-steps"]
    if cfg.get("aggregation") == "krum":
        f = int(round(fraction * cfg["num-clients"]))
        cfg.update({"krum-byzantine": f, "krum-select": cfg["num-clients"] - f})
    return cfg


def table(setting: dict, results_dir: str, strategies=STRATEGIES, attacks=ATTACKS, options=tuple(OPTIONS),
          fractions=(0.3, 0.6), out: Path | None = None) -> list[dict]:
    """One row per (strategy, option, attack, fraction), plus each strategy's runs without attackers
    (attack None) with the plain mean and with the default options; ``clean`` is the latter's accuracy
    over the row's honest clients (the global test set where there is one model), ``drop`` it less
    the row's accuracy over the same clients; ``dropped`` and ``clipped`` count the run's dropped and
    clipped replies, ``error`` is the first line of a run that raised. An ``out`` of the same setting
    from a stopped sweep is resumed: its attacked rows are kept and not run again (the runs without
    attackers are, as the rows' ``clean`` needs their clients' accuracies)."""
    done: dict[tuple, dict] = {}
    if out is not None and out.exists():
        old = json.loads(out.read_text())
        if old.get("setting") == setting:
            done = {(r["strategy"], r["option"], r["attack"], r["attackers"]): r for r in old["rows"] if r["attack"]}
    rows: list[dict] = []
    clean: dict[tuple[str, str], object] = {}  # the runs without attackers
    for fraction in fractions:  # every strategy at one fraction before the next fraction
        for strategy in strategies:
            if (strategy, "default") not in clean:
                for option in ("none", "default"):
                    clean[strategy, option] = run_local({**run_config(setting, strategy, option, None, 0.0),
                                                         "results-dir": results_dir})
                    rows.append({"strategy": strategy, "option": option, "attack": None, "attackers": 0.0,
                                 "accuracy": accuracy(clean[strategy, option]), **counts(clean[strategy, option])})
            for attack in attacks:
                cfg = run_config(setting, strategy, "default", attack, fraction)
                bad = faulty_partitions(parse_run_config(cfg))
                base = accuracy(clean[strategy, "default"], bad)  # over the same honest clients
                for option in options:
                    if (strategy, option, attack, fraction) in done:
                        rows.append(done[strategy, option, attack, fraction])
                        continue
                    t0 = time.time()
                    row = {"strategy": strategy, "option": option, "attack": attack, "attackers": fraction}
                    try:
                        run = run_local({**run_config(setting, strategy, option, attack, fraction),
                                         "results-dir": results_dir})
                    except Exception as exc:  # a run that cannot go on (no valid reply) is a row too
                        row.update({"accuracy": None, "clean": base, "drop": None,
                                    "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"})
                    else:
                        acc = accuracy(run, bad)
                        drop = None if acc is None or base is None else round(base - acc, 4)
                        row.update({"accuracy": acc, "clean": base, "drop": drop, **counts(run)})
                    row["seconds"] = round(time.time() - t0, 1)
                    rows.append(row)
                    if out is not None:
                        out.write_text(json.dumps({"setting": setting, "rows": rows}, indent=1) + "\n")
                    print(rows[-1], flush=True)
    if out is not None:
        out.write_text(json.dumps({"setting": setting, "rows": rows}, indent=1) + "\n")
    return rows


def page_table(rows: list[dict]) -> str:
    """docs/reliability.md's table of ``rows`` (``table``'s): per strategy and attacker fraction, each
    attack's drop in points under the five options in OPTIONS' order ("err": the run raised, "div": no
    finite accuracy), beside the accuracy without attackers under the default (the plain mean)."""
    clean, cells = {}, {}
    for r in rows:
        if r["attack"] is None:
            clean[r["strategy"], r["option"]] = r["accuracy"]
        else:
            cells[r["strategy"], r["attackers"], r["attack"], r["option"]] = (
                "err" if r.get("error") else "div" if r["drop"] is None else f"{100 * r['drop']:.1f}")
    lines = ["| strategy | no attackers: default (plain mean) | attackers | " + " | ".join(ATTACKS) + " |",
             "|---|---|---|" + "---|" * len(ATTACKS)]
    for strategy in dict.fromkeys(k[0] for k in cells):
        for fraction in sorted({k[1] for k in cells if k[0] == strategy}):
            drops = [" / ".join(cells.get((strategy, fraction, a, o), "-") for o in OPTIONS) for a in ATTACKS]
            lines.append(f"| {strategy} | {clean[strategy, 'default']:.4f} ({clean[strategy, 'none']:.4f}) | "
                         f"{round(100 * fraction)}% | " + " | ".join(drops) + " |")
    return "\n".join(lines)


def counts(strategy) -> dict[str, int]:
    """The run's dropped and clipped replies over all its rounds."""
    return {"dropped": sum(r.get("dropped-replies", 0) for r in strategy.history),
            "clipped": sum(r.get("clipped-replies", 0) for r in strategy.history)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--results-dir", help="where the runs' results go (required to run)")
    p.add_argument("--small", action="store_true", help="the CI scale (synthetic data, 4 rounds)")
    p.add_argument("--strategies", default=",".join(STRATEGIES))
    p.add_argument("--attacks", default=",".join(ATTACKS))
    p.add_argument("--options", default=",".join(OPTIONS), help="comma-separated names of OPTIONS")
    p.add_argument("--fractions", default="0.3,0.6")
    p.add_argument("--rounds", type=int, default=0, help="num-server-rounds (0: the setting's; times ROUNDS)")
    p.add_argument("--table", action="store_true", help="print the page's table of --out and run nothing")
    a = p.parse_args()
    if a.table:
        print(page_table(json.loads(a.out.read_text())["rows"]))
        return
    if not a.results_dir:
        p.error("--results-dir is required to run the table")
    torch.set_num_threads(1)
    setting = dict(SMALL if a.small else SETTING)
    if a.rounds:
        setting["num-server-rounds"] = a.rounds
    table(setting, a.results_dir, a.strategies.split(","), a.attacks.split(","), a.options.split(","),
          [float(f) for f in a.fractions.split(",")], a.out)


if __name__ == "__main__":
    main()
