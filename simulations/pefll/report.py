"""PeFLL's summary of a run and its table (seen / new clients' accuracy): the last step's accuracies,
those of the step with the best seen validation accuracy (the authors' model selection), traffic and
time per step."""

from __future__ import annotations

from pathlib import Path

KEYS = ("fed-seen-accuracy", "fed-unseen-accuracy", "fed-accuracy", "fed-seen-acc-client-std",
        "fed-unseen-acc-client-std", "fed-seen-acc-client-min", "fed-unseen-acc-client-min",
        "fed-seen-unmasked-accuracy", "fed-unseen-unmasked-accuracy", "fed-seen-val-accuracy")


def summarize(history: list[dict], config: dict, args=None) -> dict:
    rounds = [r for r in history if r["round"] > 0]
    last = rounds[-1]
    evals = [r for r in rounds if "fed-seen-accuracy" in r]
    best = max(evals, key=lambda r: r.get("fed-seen-val-accuracy", -1.0))  # the authors' model selection
    return {
        "best-val-step": best["round"], **{f"best-val-{k}": best[k] for k in KEYS if k in best},
        **{k: last[k] for k in KEYS if k in last}, "steps": last["round"],
        "train-seconds-per-step": sum(r["train-seconds"] for r in rounds) / len(rounds),
        "train-bytes-per-step": (last["total-train-bytes-down"] + last["total-train-bytes-up"]) / len(rounds),
        "sampled-per-step": sum(r.get("replies", 0) for r in rounds) / len(rounds),
    }


def table(out: Path, rows: list[dict], methods: list[str], args=None) -> str:
    lines = ["| run | steps | seen acc | unseen acc | seen client std | unseen client std | "
             "MB / step | s / step |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['steps']} | {100 * r['fed-seen-accuracy']:.1f} | "
                     f"{100 * r['fed-unseen-accuracy']:.1f} | {100 * r['fed-seen-acc-client-std']:.1f} | "
                     f"{100 * r['fed-unseen-acc-client-std']:.1f} | {r['train-bytes-per-step'] / 1e6:.2f} | "
                     f"{r['train-seconds-per-step']:.2f} |")
    return "\n".join(lines)
