"""PeFLL Figures 5 and 6 (Appendix A.3, Shakespeare) from the committed summary of the ``shakespeare``
table: test accuracy of the seen (train) and new (test) clients against training steps (Figure 5,
every method) and against the training traffic, bytes both ways summed since step 1 (Figure 6, PeFLL
and FedAvg). The paper's figures are plots; its text reads them as "PeFLL outperforms all baselines
when comparing performance with respect to the number of global rounds" and, against communication,
"similar performances for a fixed communication budget".

    python -m simulations.run pefll shakespeare --column roles --scale cpu --publish
    python simulations/pefll/figure5_6.py          # figure5-6.png beside this file
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUMMARY = HERE / "summaries" / "shakespeare" / "roles" / "cpu.json"
READING = {5: "paper (Figure 5): PeFLL above every baseline at equal steps",
           6: "paper (Figure 6): PeFLL and FedAvg similar at equal communication"}


def mean_curve(rows: list[dict], curve_of) -> tuple[list[float], list[float]]:
    """x and the mean over seeds of y at the x every seed has."""
    curves = [dict(map(tuple, curve_of(r))) for r in rows]
    xs = sorted(set.intersection(*(set(c) for c in curves)))
    return xs, [100 * statistics.fmean(c[x] for c in curves) for x in xs]


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = json.loads(SUMMARY.read_text())["rows"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = plt.subplots(2, 2, figsize=(9.6, 6.4))
    for col, (who, curve) in enumerate((("seen", lambda r: r["curve"]), ("new", lambda r: r["curve_more"]["new"]))):
        for i, m in enumerate(methods):
            mine = [r for r in rows if r["method"] == m]
            steps, acc = mean_curve(mine, curve)
            axes[0][col].plot(steps, acc, marker="o", color=f"C{i}", label=m)
            if m in ("pefll", "fedavg"):
                sent = [dict(map(tuple, r["train_bytes"])) for r in mine]
                axes[1][col].plot([statistics.fmean(s[x] for s in sent) / 1e9 for x in steps], acc, marker="o",
                                  color=f"C{i}", label=m)
        for row, (fig_no, xlabel) in enumerate(((5, "training step"), (6, "training traffic (GB, both ways)"))):
            ax = axes[row][col]
            ax.set_title(f"Figure {fig_no}, {who} clients", fontsize=8)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(f"{who} clients, test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("PeFLL on Shakespeare (next character), ours at scale cpu; " + READING[5] + "\n" + READING[6],
                 fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "figure5-6.png", dpi=100, metadata={"Software": None})
    plt.close(fig)


if __name__ == "__main__":
    main()
