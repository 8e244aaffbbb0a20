"""HCCT's summary of a run (local test error, the paper's way and the authors' code's) and its tables
(``python -m simulations.run simulations/hcct/<setting>/*.toml --table [--clients]``, ``--curves``).
Sweeps split over processes (``--out <out>-<part>``) are merged by ``--table``. results/ is not tracked:
the summaries the docs quote are copied to simulations/hcct/summaries/ (claims.py collect)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def summarize(history: list[dict], config: dict, args=None) -> dict:
    return errors(history)


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


def table(out: Path, rows: list[dict], methods: list[str], args) -> str:
    """Local test error (%) per method, mean ± std over seeds: after the last epoch (the paper's
    metric) and each client's best epoch (the authors' code's log); then Table V's per-client
    spread (std / min / max over clients after the last epoch), averaged over seeds."""
    rows = summaries(out)
    if args.clients:
        return method_table(rows, methods) + "\n\n" + client_table(rows, methods)
    return method_table(rows, methods)


def method_table(rows: list[dict], methods: list[str]) -> str:
    lines = ["| method | seeds | epochs | error after last epoch | best epoch per client | client std | min | max "
             "| s/epoch |",
             "|---|---|---|---|---|---|---|---|---|"]
    for method in dict.fromkeys(methods):
        rs = [r for r in rows if r["method"] == method]
        if not rs:
            continue
        err, best = np.array([r["error"] for r in rs]), np.array([r["error-best"] for r in rs])
        spread = [np.mean([r[k] for r in rs]) for k in ("error-std", "error-min", "error-max")]
        lines.append(f"| {method} | {len(rs)} | {rs[0]['rounds']} | {err.mean():.2f} ± {err.std():.2f} "
                     f"| {best.mean():.2f} ± {best.std():.2f} | " + " | ".join(f"{v:.2f}" for v in spread)
                     + f" | {np.mean([r['seconds-per-epoch'] for r in rs]):.1f} |")
    return "\n".join(lines)


def client_table(rows: list[dict], methods: list[str]) -> str:
    """Every client's local test error (%) per method after the last epoch, mean ± std over seeds
    (Table II form), with the groups of the first seed."""
    lines = []
    for method in dict.fromkeys(methods):
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
