"""Run HCCT's experiments (a TOML file of methods x seeds) in process and tabulate local test error.

    nice -n 10 python simulations/hcct/run.py simulations/hcct/fmnist.toml
    python simulations/hcct/run.py simulations/hcct/fmnist.toml --table   # markdown from summary.json

Sweeps split over processes (``--out results/<stem>-<part>``) are merged by ``--table``.
The TOML file holds ``[base]`` (run config shared by all runs), ``seeds`` and one ``[methods.<name>]``
table per method (its own run-config keys). Each run writes results/<file stem>/<method>-s<seed>/
(rounds.json: every round, with HCCT's groups); summary.json collects the last round of each run.
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

from fedapp.client_app import app, make_client  # noqa: E402
from fedapp.config import parse_run_config  # noqa: E402
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
            grid = InProcessGrid(app, config["num-clients"], config)
            strategy = run_local(config, grid=grid)
            last = strategy.history[-1]
            row = {"method": method, "seed": seed, "seconds": time.time() - t0,
                   **{k: last[k] for k in KEYS if k in last}, "groups": last.get("groups"),
                   "client-accuracy": client_accuracies(strategy, grid, last["round"])}
            print(json.dumps(row), flush=True)
            summary.append(row)
            summary_file.write_text(json.dumps(summary, indent=1))


def client_accuracies(strategy, grid: InProcessGrid, server_round: int) -> dict[int, float]:
    """Each client's local test accuracy with the model it ends with (its own saved state included)."""
    cfg = parse_run_config(grid.run_config)
    out = {}
    for pid, info in sorted(strategy.clients.items()):
        client = make_client(cfg, grid.contexts[info.node_id])
        payload = strategy.eval_payload(pid, server_round)
        out[pid] = client.evaluate(payload, {"server-round": server_round, "partition-id": pid})["accuracy"]
    return out


def summaries(out: Path) -> list[dict]:
    """Rows of ``out`` and of its split-off siblings ``<out>-*`` (parallel sweeps), one per (method, seed)."""
    rows = {}
    for f in sorted(out.parent.glob(f"{out.name}*/summary.json")):
        if f.parent == out or f.parent.name.startswith(f"{out.name}-"):
            rows.update({(r["method"], r["seed"]): r for r in json.loads(f.read_text())})
    return list(rows.values())


def table(out: Path, spec: dict) -> str:
    """Local test error (%) per method: pooled mean +- std over seeds, then the per-client
    mean / std / min / max (Table V form) averaged over seeds."""
    rows = summaries(out)
    lines = ["| method | seeds | local test error % (mean ± std) | per-client mean | std | min | max |",
             "|---|---|---|---|---|---|---|"]
    for method in spec["methods"]:
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue
        err = 100 * (1 - np.array([r["fed-accuracy"] for r in rs]))
        per = {k: np.mean([r[f"fed-acc-client-{k}"] for r in rs]) for k in ("mean", "std", "min", "max")}
        lines.append(f"| {method} | {len(rs)} | {err.mean():.2f} ± {err.std():.2f} | {100 * (1 - per['mean']):.2f} "
                     f"| {100 * per['std']:.2f} | {100 * (1 - per['max']):.2f} | {100 * (1 - per['min']):.2f} |")
    return "\n".join(lines)


def client_table(out: Path, spec: dict) -> str:
    """Local test error (%) of every client per method (Table II form), first seed run."""
    rows = [r for r in summaries(out) if "client-accuracy" in r]
    pids = sorted({int(p) for r in rows for p in r["client-accuracy"]})
    lines = ["| method | groups | " + " | ".join(f"client {p + 1}" for p in pids) + " | mean |",
             "|---|---|" + "---|" * (len(pids) + 1)]
    for method in spec["methods"]:
        r = next((r for r in rows if r["method"] == method), None)
        if r is None:
            continue
        errs = [100 * (1 - r["client-accuracy"][str(p)]) for p in pids]
        groups = "".join("{" + ",".join(str(p + 1) for p in g) + "}" for g in r["groups"] or []) or "-"
        lines.append(f"| {method} | {groups} | " + " | ".join(f"{e:.2f}" for e in errs) + f" | {np.mean(errs):.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", type=Path)
    parser.add_argument("--out", type=Path, help="default: simulations/hcct/results/<config stem>")
    parser.add_argument("--methods", nargs="*")
    parser.add_argument("--seeds", nargs="*", type=int)
    parser.add_argument("--table", action="store_true", help="print the markdown table of summary.json")
    parser.add_argument("--clients", action="store_true", help="with --table: every client's error too")
    args = parser.parse_args()
    spec = tomllib.loads(args.config.read_text())
    out = args.out or Path(__file__).parent / "results" / args.config.stem
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
