"""Why a direction rule cannot tell attackers from honest clients on non-IID data, measured: per run of
the attack matrix's CI setting (``simulations/attacks.py``, 8 rounds), the most anti-aligned pair of
replies' updates in each round, among honest pairs and among pairs with an attacker, for the model
updates (replies sent the same model) and the delta records; and Multi-Krum's cost on honest runs at
the attacker count it is given under 30% attackers (f = 3, m = 7); and the honest pairs of the long
SCAFFOLD run (200 rounds on 5 natural clients).

    OMP_NUM_THREADS=1 PYTHONPATH=. python simulations/reliability/non_iid_limits.py --out simulations/reliability/non-iid-limits.json --results-dir OUT
    PYTHONPATH=. python simulations/reliability/non_iid_limits.py --table --out simulations/reliability/non-iid-limits.json

The replies are read where the defence reads them (the driver's ``robust``, before it screens): honest
runs without a defence (the federation as it is), attacked runs (-10x, sign flip at 30%) under
``defence = "robust"``. Cosines are of the flattened updates, in float64. The JSON is rewritten after
each run; the same command resumes a stopped one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from fedapp.runtime.faults import faulty_partitions
from fedapp.runtime.registry import parse_run_config
from fedapp.server.rounds import Driver
from fedapp.server.screens import delta_pairs
from simulations.attacks import LONG, SMALL, STRATEGIES, measure, run_config

DATA = ("dirichlet", "natural", "iid")
ATTACKS = (None, "sign-flip", "negate")
#: Multi-Krum's honest cost: the strategies and data it is measured on, at f = 3, m = 7 of 10 clients
KRUM = {"strategies": ("fedavg", "scaffold"), "data": ("dirichlet", "natural"), "f": 3, "m": 7}


def pair_minima(pairs, bad: set[int], pids: list[int]) -> dict[str, tuple[float | None, float | None]]:
    """Per kind of update ("model": the records sent the same arrays to every reply; "delta": the records
    that are updates themselves), (the lowest cosine of an honest pair, the lowest of a pair with an
    attacker in ``bad``); kinds no reply carries are left out."""
    first = pairs[0]
    shared = [k for k, (_, ref) in first.items() if ref is not None and all(
        k in p and p[k][1] is not None and (p[k][1] is ref or torch.equal(p[k][1], ref)) for p in pairs)]
    out = {}
    # the delta records as the direction screen reads them (against one shared zero)
    for kind, kind_pairs in (("model", [{k: p[k] for k in shared} for p in pairs]), ("delta", delta_pairs(pairs))):
        if not kind_pairs[0]:
            continue
        flat = np.stack([np.concatenate([(v.double() - ref.double()).numpy().ravel() for v, ref in p.values()])
                         for p in kind_pairs])
        norms = np.linalg.norm(flat, axis=1)
        unit = flat / np.where(norms > 0, norms, 1.0)[:, None]
        cos = unit @ unit.T
        honest, attacked = [], []
        for i in range(len(pairs)):
            for j in range(i + 1, len(pairs)):
                (attacked if {pids[i], pids[j]} & bad else honest).append(float(cos[i, j]))
        out[kind] = (min(honest, default=None), min(attacked, default=None))
    return out


def observed(cfg: dict, results_dir: str, bad: set[int]) -> dict:
    """One run's row (``simulations.attacks.measure``) with, per kind, the rounds' lowest honest and
    attacker pair cosines: their minimum and median over the rounds."""
    rounds: list[dict] = []
    screen = Driver.robust

    def watch(self, replies):
        if len(replies) >= 3:
            rounds.append(pair_minima([self.reply_updates(r) for r in replies], bad, [r.pid for r in replies]))
        return screen(self, replies)

    Driver.robust = watch
    try:
        row = measure(cfg, results_dir, bad)
    finally:
        Driver.robust = screen
    for kind in ("model", "delta"):
        for i, who in enumerate(("honest", "attacker")):
            values = [r[kind][i] for r in rounds if kind in r and r[kind][i] is not None]
            if values:
                row[f"{kind}-{who}-min"] = round(min(values), 3)
                row[f"{kind}-{who}-median"] = round(float(np.median(values)), 3)
    return row


def runs() -> list[tuple[str, dict]]:
    """(name, run config) of every run: the pair runs, then the honest Multi-Krum runs."""
    out = []
    for strategy in STRATEGIES:
        for data in DATA:
            for attack in ATTACKS:
                option = "robust" if attack else "none"
                out.append((f"{strategy}-{data}-{attack or 'honest'}",
                            run_config(SMALL, strategy, data, 8, option, attack, 0.3 if attack else 0.0)))
    out.append(("scaffold-long-honest", {**LONG, "run-name": "long-none"}))
    for strategy in KRUM["strategies"]:
        for data in KRUM["data"]:
            cfg = run_config(SMALL, strategy, data, 8, "multi-krum", None, 0.0)
            out.append((f"{strategy}-{data}-honest-krum", {**cfg, "krum-byzantine": KRUM["f"], "krum-select": KRUM["m"]}))
    return out


def sweep(out: Path, results_dir: str) -> dict:
    done = json.loads(out.read_text()) if out.exists() else {}
    for name, cfg in runs():
        if name in done:
            continue
        bad = faulty_partitions(parse_run_config(cfg)) if cfg.get("fault-fraction") else set()
        done[name] = {"config": cfg, **observed(cfg, results_dir, bad)}
        out.write_text(json.dumps(done, indent=1) + "\n")
        print(name, done[name]["accuracy"], flush=True)
    return done


def table(done: dict) -> str:
    """The page's table: per strategy and data, the lowest cosine of an honest pair in any round of the
    honest run, and of a pair with an attacker in the -10x and the sign-flip run (model updates; PeFLL:
    its deltas); then the long SCAFFOLD run's honest pairs."""
    def low(name: str, who: str) -> str:
        row = done.get(name, {})
        value = row.get(f"model-{who}-min", row.get(f"delta-{who}-min"))
        return "-" if value is None else f"{value:.2f}"
    lines = ["| strategy | " + " | ".join(f"{d}: honest / -10x / sign flip" for d in DATA) + " |",
             "|---|" + "---|" * len(DATA)]
    for strategy in STRATEGIES:
        lines.append(f"| {strategy} | " + " | ".join(
            f"{low(f'{strategy}-{d}-honest', 'honest')} / {low(f'{strategy}-{d}-negate', 'attacker')} / "
            f"{low(f'{strategy}-{d}-sign-flip', 'attacker')}" for d in DATA) + " |")
    long = done.get("scaffold-long-honest", {}).get("model-honest-min")
    if long is not None:
        lines.append(f"\nHonest SCAFFOLD, {LONG['num-server-rounds']} rounds on 5 natural clients: honest pairs down "
                     f"to {long:.2f}.")
    return "\n".join(lines)


def krum_line(done: dict) -> str:
    """Multi-Krum's honest runs beside the plain mean's (the pair runs' honest rows)."""
    parts = [f"{s} {d} {100 * done[f'{s}-{d}-honest-krum']['accuracy']:.1f} (plain mean "
             f"{100 * done[f'{s}-{d}-honest']['accuracy']:.1f})"
             for s in KRUM["strategies"] for d in KRUM["data"] if f"{s}-{d}-honest-krum" in done]
    return (f"Multi-Krum at f = {KRUM['f']}, m = {KRUM['m']} without attackers, 8 rounds: " + ", ".join(parts) + "."
            if parts else "")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--results-dir", help="where the runs' results go (required to run)")
    p.add_argument("--table", action="store_true", help="print the page's table of --out and run nothing")
    a = p.parse_args()
    if not a.table:
        if not a.results_dir:
            p.error("--results-dir is required to run")
        torch.set_num_threads(1)
        sweep(a.out, a.results_dir)
    done = json.loads(a.out.read_text())
    print(table(done) + "\n\n" + krum_line(done))


if __name__ == "__main__":
    main()
