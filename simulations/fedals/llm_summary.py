"""The language-model row's CPU run, condensed: the committed summary and the page's table.

    python -m simulations.run simulations/fedals/llm/cpu-shakespeare-pairs.toml --methods fedavg fedals --out OUT
    python -m simulations.fedals.llm_summary OUT     # writes summaries/llm/cpu-shakespeare-pairs.json

Each evaluation is the global model's mean next-token loss (and token accuracy) on the 200 test prompts;
an iteration is one local step (tau = 5 a round). Traffic is the parameters all 5 clients sent up. Each run
keeps the run config it ran with and its seconds (its row of OUT's ``summary.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simulations.run import run_rows

HERE = Path(__file__).resolve().parent
SETTING = "simulations/fedals/llm/cpu-shakespeare-pairs.toml"
SUMMARY = HERE / "summaries" / "llm" / "cpu-shakespeare-pairs.json"
TAU = 5
LABELS = {"fedavg": "FedAvg", "fedals": "FedALS alpha 10"}


def condense(rounds: list[dict], row: dict) -> dict:
    """One run's evaluations and the parameters its clients sent, with its config and seconds (``row``: its
    row of the results folder's summary)."""
    last = rounds[-1]
    return {"config": row["config"], "seconds": row["seconds"],
            "evaluations": [{"round": r["round"], "iteration": TAU * r["round"],
                             "test-loss": round(r["central-loss"], 4),
                             "token-accuracy": round(r["central-accuracy"], 4)}
                            for r in rounds if r.get("central-loss") is not None],
            "rounds": last["round"],
            "train-params-up-all-clients": last["total-train-params-up"]}


def page_table(summary: dict) -> str:
    """The page's table: test loss (token accuracy) at each evaluated iteration."""
    runs = summary["runs"]
    iterations = [e["iteration"] for e in runs["fedavg"]["evaluations"]]
    lines = ["| iteration | " + " | ".join(map(str, iterations)) + " |", "|---" * (len(iterations) + 1) + "|"]
    for method, run in runs.items():
        cells = {e["iteration"]: f"{e['test-loss']:.4f} ({e['token-accuracy']:.4f})" for e in run["evaluations"]}
        lines.append(f"| {LABELS[method]} | " + " | ".join(cells.get(i, "-") for i in iterations) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="the --out of the run command above")
    args = ap.parse_args()
    rows = {r["method"]: r for r in run_rows(args.out / "summary.json")}
    summary = {"setting": SETTING, "runs": {
        m: condense(json.loads((args.out / rows[m]["run"] / "rounds.json").read_text())["rounds"], rows[m])
        for m in LABELS}}
    SUMMARY.write_text(json.dumps(summary, indent=1) + "\n")
    print(page_table(summary))


if __name__ == "__main__":
    main()
