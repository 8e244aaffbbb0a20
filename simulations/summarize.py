"""Markdown table of one run's rounds.json: accuracy every k rounds, seconds per round, traffic.

    python simulations/summarize.py results/<run>/rounds.json --every 5
"""

from __future__ import annotations

import argparse
import json
import statistics


def table(doc: dict, every: int) -> str:
    rows = [r for r in doc["rounds"] if r["round"] > 0]
    lines = ["| round | central accuracy | federated accuracy | train loss | seconds/round | training traffic (MB, cumulative) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        if r["round"] % every and r is not rows[-1]:
            continue
        mb = (r.get("total-train-bytes-down", 0) + r.get("total-train-bytes-up", 0)) / 1e6
        lines.append(f"| {r['round']} | {r.get('central-accuracy', float('nan')):.4f} | "
                     f"{r.get('fed-accuracy', float('nan')):.4f} | {r.get('train-loss', float('nan')):.4f} | "
                     f"{r['round-seconds']:.1f} | {mb:.1f} |")
    secs = [r["round-seconds"] for r in rows]
    lines.append("")
    lines.append(f"Seconds per round: median {statistics.median(secs):.1f}, min {min(secs):.1f}, max {max(secs):.1f}; "
                 f"wall time {rows[-1]['wall-time']:.0f} s for {len(rows)} rounds.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("rounds_json")
    p.add_argument("--every", type=int, default=5)
    a = p.parse_args()
    with open(a.rounds_json) as f:
        print(table(json.load(f), a.every))


if __name__ == "__main__":
    main()
