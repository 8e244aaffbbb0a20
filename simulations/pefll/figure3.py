"""PeFLL Figure 3 (and Figures 15-17): do similar clients get similar descriptors?

Section 4, "Analysis of Client Descriptors": client i's class proportions pi_i ~ Dir(0.1, ..., 0.1),
its data drawn to them, the clients split at random into train and unseen ones, PeFLL trained on the
train clients. For every pair of clients, d^pi_ij = ||pi_i - pi_j|| and d^v_ij = ||v(S_i) - v(S_j)||;
for each unseen client i, the Spearman rank correlation of (d^v_i1, ..., d^v_in) with
(d^pi_i1, ..., d^pi_in); the figure is its mean over the unseen clients against training steps.

The run (``figure3-cifar10-100c/pefll.toml``) writes every evaluation's descriptors of all n clients,
and each client's training label counts, to ``descriptors.npz``; pi_i here is client i's training
label proportions (the data drawn to the Dirichlet draw). The curve is rebuilt from that file:

    python -m simulations.run simulations/pefll/figure3-cifar10-100c/pefll.toml --seeds 0 --out OUT
    python simulations/pefll/figure3.py OUT/pefll-s0      # summaries/figure3/cifar10-100c.json, figure3.png
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from simulations.run import run_rows

HERE = Path(__file__).resolve().parent
SETTING = "figure3-cifar10-100c/pefll.toml"
# Section 4's reading of Figure 3 (CIFAR-10, 1000 clients): "reaching very high correlation values of
# approximately 0.93"; Figure 15 (100 clients) is a plot only, "high correlation ... with more clients
# higher levels of correlation and less variability" (Appendix A.4)
PAPER_FINAL_1000C = 0.93


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1 of ``x``, tied values sharing their mean rank (Spearman's convention)."""
    order = np.argsort(x, kind="stable")
    r = np.empty(len(x))
    r[order] = np.arange(len(x))
    _, tie, counts = np.unique(x, return_inverse=True, return_counts=True)
    return (np.bincount(tie, weights=r) / counts)[tie]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the (tie-averaged) ranks."""
    ra, rb = ranks(a) - (len(a) - 1) / 2, ranks(b) - (len(b) - 1) / 2
    return float((ra * rb).sum() / np.sqrt((ra * ra).sum() * (rb * rb).sum()))


def distances(x: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``x`` (n x n)."""
    return np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1)


def rank_correlation(v: np.ndarray, proportions: np.ndarray, unseen: np.ndarray) -> float:
    """Mean over the unseen clients i of Spearman(d^v_i, d^pi_i), each over all n clients (the paper's
    vectors in R^n, client i itself included)."""
    dv, dpi = distances(v), distances(proportions)
    return float(np.mean([spearman(dv[i], dpi[i]) for i in np.flatnonzero(unseen)]))


def curve(npz: Path) -> list[list[float]]:
    """[step, mean rank correlation] at every evaluation of a run's ``descriptors.npz``."""
    d = np.load(npz)
    hist = d["hist"].astype(float)
    proportions = hist / hist.sum(1, keepdims=True)
    return [[int(r), round(rank_correlation(v, proportions, d["new"]), 4)] for r, v in zip(d["round"], d["v"])]


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for run in summary["runs"]:
        steps, rho = zip(*run["curve"])
        ax.plot(steps, rho, marker="o", label=f"ours, seed {run['seed']} (100 clients)")
    ax.axhline(PAPER_FINAL_1000C, color="k", linestyle=":", linewidth=0.8,
               label="paper, Figure 3 after 5000 steps (1000 clients): about 0.93")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean Spearman rank correlation, new clients")
    ax.set_title("PeFLL Figure 3 / 15: descriptor vs class-proportion distances, CIFAR-10", fontsize=9)
    ax.set_ylim(min(0.0, *(p[1] for r in summary["runs"] for p in r["curve"])), 1.0)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


def run_record(folder: Path) -> dict:
    """The row ``simulations.run`` wrote for the run in ``folder`` (its config and seconds), from the
    ``summary.json`` beside it."""
    summary = folder.parent / "summary.json"
    row = next((r for r in run_rows(summary) if r["run"] == folder.name), None)
    if row is None or "config" not in row:
        sys.exit(f"{folder}: no row with its config in {summary} (run it with python -m simulations.run, as above)")
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run folders (OUT/pefll-s<seed>) holding descriptors.npz")
    args = p.parse_args(argv)
    runs = []
    for folder in args.runs:
        if not (folder / "descriptors.npz").is_file():
            sys.exit(f"{folder}: no descriptors.npz (a PeFLL run with fraction-evaluate > 0 writes it)")
        made = run_record(folder)
        c = curve(folder / "descriptors.npz")
        runs.append({"seed": int(folder.name.rsplit("-s", 1)[1]), "curve": c, "final": c[-1][1],
                     "seconds": made["seconds"], "config": made["config"]})
    summary = {"setting": f"simulations/pefll/{SETTING}", "paper_final_1000_clients": PAPER_FINAL_1000C,
               "runs": runs}
    out = HERE / "summaries" / "figure3" / "cifar10-100c.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1) + "\n")
    plot(summary, HERE / "figure3.png")
    print(f"wrote {out.relative_to(HERE.parents[1])}, figure3.png: final "
          + ", ".join(f"seed {r['seed']} {r['final']}" for r in runs))


if __name__ == "__main__":
    main()
