"""Run HCCT's experiments (a TOML file of methods x seeds) in process and tabulate local test error.

    /work/bin/heavy python simulations/hcct/run.py simulations/hcct/fmnist.toml --methods hcct global
    python simulations/hcct/run.py simulations/hcct/fmnist.toml --table   # markdown from summary.json

Sweeps split over processes (``--out results/<stem>-<part>``) are merged by ``--table``.
The TOML file holds ``[base]`` (run config shared by all runs), ``seeds`` and one ``[methods.<name>]``
table per method (its own run-config keys). Each run writes results/hcct/<file stem>/<method>-s<seed>/
(rounds.json, after every epoch: each client's accuracy, HCCT's groups); summary.json gets one row
per finished run (both error metrics, every client's error). results/ is not tracked: the summaries
the docs quote are copied to simulations/hcct/summaries/.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import tomllib
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from fedapp.client_app import app  # noqa: E402
from fedapp.local import InProcessGrid, run_local  # noqa: E402

KEYS = ("fed-accuracy", "fed-acc-client-mean", "fed-acc-client-std", "fed-acc-client-min", "fed-acc-client-max")


def run_all(spec: dict, out: Path, methods: list[str] | None, seeds: list[int] | None) -> None:
    summary_file = out / "summary.json"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else []
    done = {(r["method"], r["seed"]) for r in summary}
    for seed in seeds or spec["seeds"]:
        for method, keys in spec["methods"].items():
            if (methods and method not in methods) or (method, seed) in done:
                continue
            config = {**spec["base"], **keys, "seed": seed, "results-dir": str(out), "run-name": f"{method}-s{seed}"}
            t0 = time.time()
            strategy = run_local(config, grid=InProcessGrid(app, config["num-clients"], config))
            row = {"method": method, "seed": seed, "seconds": time.time() - t0, **errors(strategy.history)}
            print(json.dumps(row), flush=True)
            summary.append(row)
            summary_file.write_text(json.dumps(summary, indent=1))


def errors(history: list[dict]) -> dict:
    """Local test error (%), both ways: the paper's (clients' mean after the last epoch) and the
    authors' code's (each client's best epoch, then the mean), with the last groups."""
    evals = [r for r in history if "fed-client-accuracy" in r]
    last = evals[-1]
    final = {int(p): 100 * (1 - a) for p, a in last["fed-client-accuracy"].items()}
    best = {p: min(100 * (1 - r["fed-client-accuracy"][p]) for r in evals if p in r["fed-client-accuracy"])
            for p in final}
    return {"rounds": last["round"], "error": float(np.mean(list(final.values()))),
            "error-std": float(np.std(list(final.values()))), "error-min": min(final.values()),
            "error-max": max(final.values()), "error-best": float(np.mean(list(best.values()))),
            "client-error": final, "client-error-best": best, "groups": last.get("groups"),
            "pooled-error": 100 * (1 - last["fed-accuracy"]),
            "seconds-per-epoch": float(np.mean([r["round-seconds"] for r in history if "round-seconds" in r]))}


def summaries(out: Path) -> list[dict]:
    """Rows of ``out`` and of its split-off siblings ``<out>-*`` (parallel sweeps), one per (method, seed)."""
    rows = {}
    for f in sorted(out.parent.glob(f"{out.name}*/summary.json")):
        if f.parent == out or f.parent.name.startswith(f"{out.name}-"):
            rows.update({(r["method"], r["seed"]): r for r in json.loads(f.read_text())})
    return list(rows.values())


def table(out: Path, spec: dict) -> str:
    """Local test error (%) per method, mean ± std over seeds: after the last epoch (the paper's
    metric) and each client's best epoch (the authors' code's log); then Table V's per-client
    spread (std / min / max over clients after the last epoch), averaged over seeds."""
    rows = summaries(out)
    lines = ["| method | seeds | epochs | error after last epoch | best epoch per client | client std | min | max | s/epoch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method in spec["methods"]:
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue
        err, best = np.array([r["error"] for r in rs]), np.array([r["error-best"] for r in rs])
        spread = [np.mean([r[k] for r in rs]) for k in ("error-std", "error-min", "error-max")]
        lines.append(f"| {method} | {len(rs)} | {rs[0]['rounds']} | {err.mean():.2f} ± {err.std():.2f} "
                     f"| {best.mean():.2f} ± {best.std():.2f} | " + " | ".join(f"{v:.2f}" for v in spread)
                     + f" | {np.mean([r['seconds-per-epoch'] for r in rs]):.1f} |")
    return "\n".join(lines)


def client_table(out: Path, spec: dict) -> str:
    """Every client's local test error (%) per method after the last epoch, mean ± std over seeds
    (Table II form), with the groups of the first seed."""
    rows = summaries(out)
    lines = []
    for method in spec["methods"]:
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue
        pids = sorted(int(p) for p in rs[0]["client-error"])
        if not lines:
            lines = ["| method | seeds | groups (first seed) | " + " | ".join(f"client {p + 1}" for p in pids)
                     + " | mean | std |", "|---|---|---|" + "---|" * (len(pids) + 2)]
        e = np.array([[r["client-error"][str(p)] for p in pids] for r in rs])
        groups = "".join("{" + ",".join(str(p + 1) for p in g) + "}" for g in rs[0]["groups"] or []) or "-"
        cells = [f"{m:.2f} ± {s:.2f}" for m, s in zip(e.mean(0), e.std(0))]
        lines.append(f"| {method} | {len(rs)} | {groups} | " + " | ".join(cells)
                     + f" | {e.mean(1).mean():.2f} | {e.std(1).mean():.2f} |")
    return "\n".join(lines)


def curves(out: Path) -> str:
    """CSV of every run's mean local test error (%) over clients after each evaluated epoch."""
    lines = ["method,seed,epoch,error"]
    for f in sorted(out.glob("*-s*/rounds.json")):
        method, _, seed = f.parent.name.rpartition("-s")
        for r in json.loads(f.read_text())["rounds"]:
            if "fed-client-accuracy" in r:
                err = 100 * (1 - np.mean(list(r["fed-client-accuracy"].values())))
                lines.append(f"{method},{seed},{r['round']},{err:.4f}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--out", type=Path, help="default: results/hcct/<config stem> (ignored by git)")
    parser.add_argument("--methods", nargs="*")
    parser.add_argument("--seeds", nargs="*", type=int)
    parser.add_argument("--rounds", type=int, help="override num-server-rounds (cost measurements)")
    parser.add_argument("--table", action="store_true", help="print the markdown table of summary.json")
    parser.add_argument("--clients", action="store_true", help="with --table: every client's error too")
    parser.add_argument("--curves", action="store_true", help="print every run's error per epoch (CSV)")
    args = parser.parse_args()
    spec = tomllib.loads(args.config.read_text())
    if args.rounds:
        spec["base"]["num-server-rounds"] = args.rounds
    out = args.out or ROOT / "results" / "hcct" / args.config.stem
    if args.curves:
        print(curves(out), end="")
        return
    if args.table:
        print(table(out, spec))
        if args.clients:
            print()
            print(client_table(out, spec))
        return
    torch.set_num_threads(1)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    run_all(spec, out, args.methods, args.seeds)


if __name__ == "__main__":
    main()
