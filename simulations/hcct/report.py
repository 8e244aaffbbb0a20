"""HCCT's reading of a run's rounds: the local test error of every client, the paper's way (after the
last epoch) and the authors' code's (each client's best epoch); tables.py keeps both in each summary row
(as fractions), the runner's file form stores this reading as it is (in %)."""

from __future__ import annotations

import numpy as np


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


def summarize(history: list[dict], config: dict, args=None) -> dict:
    """The row of a run made by the runner's file form (``python -m simulations.run FILE ...``)."""
    return errors(history)
