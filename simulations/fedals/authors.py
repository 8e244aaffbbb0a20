"""The authors' code's runs as summary rows: ``authors.json`` beside our summaries of a table column.

    python -m simulations.fedals.authors SUMMARY.json --into table1/cifar10-noniid/fedals \
        table2/cifar10-noniid/alpha10
    python -m simulations.fedals.authors --commands     # each committed row's command, from its setting

SUMMARY is the harness summary ``authors_reduced.sh`` writes (``accuracy_per_round``: the test accuracy
of the average of all node models every ``sampling_f`` iterations). Each ``--into TABLE/COLUMN/METHOD``
adds (or replaces) that run's row in the column's ``authors.json``: its curve in our rounds (iterations /
tau), the table's reading of it and the command that made it (:func:`command`). Their code seeds itself from ``os.urandom``, so ``seed`` numbers
their runs of one method, not a seed of ours.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from simulations import tables
from simulations.fedals.tables import PAPER

TAU = 5


def row(summary: dict, table: tables.Table, method: str, seed: int = 0) -> dict:
    """The summary row of one run of the authors' code, read with ``table``'s metric."""
    curve = [[r["iteration"] // TAU, round(r["test_acc"], 6)] for r in summary["accuracy_per_round"]
             if r["iteration"] > 0]
    value = table.metric.value(curve)
    config = summary["config"]
    setting = {k: config[k] for k in ("algo", "alpha", "L", "iterations", "sampling_f")}
    if config.get("mode", "sgd") != "sgd":  # another mode of their code than FedAvg / FedALS: their SCAFFOLD
        setting["mode"] = config["mode"]
    if config.get("split", "").startswith("iid"):  # their IID split (shuffled), not the sorted one
        setting["split"] = "iid"
    return {"run": f"authors-{method}-s{seed}", "method": method, "seed": seed,
            "seconds": round(summary["total_wall_sec"], 1), "value": None if value is None else round(value, 6),
            "rounds": curve[-1][0] if curve else 0, "curve": curve,
            "setting": setting, "command": command(setting)}


def command(setting: dict) -> str | None:
    """The command that made a run of the authors' code with ``setting`` (a row's): ``authors_reduced.sh``
    where the run is one of its (L = 19); None for another call of the harness, whose command was not kept.
    Its optional arguments up to the last one not at its default."""
    if setting["L"] != "19":
        return None
    args = [setting["alpha"], "OUT", setting["iterations"], setting.get("mode", "sgd"),
            setting.get("split", "noniid"), setting["sampling_f"]]
    defaults = [None, None, "2001", "sgd", "noniid", "100"]
    while len(args) > 2 and args[-1] == defaults[len(args) - 1]:
        args.pop()
    return f"bash simulations/fedals/authors_reduced.sh {' '.join(args)}"


def add(summary: dict, into: str) -> Path:
    table_id, column, method = into.split("/")
    if table_id not in PAPER.tables or column not in PAPER.tables[table_id].columns:
        raise SystemExit(f"--into {into}: no such table column of fedals")
    path = tables.summary_path(PAPER, table_id, column, "cpu").with_name("authors.json")
    rows = [r for r in tables.read_rows(path) if r["method"] != method]
    rows.append(row(summary, PAPER.tables[table_id], method))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tables.dumps({"paper": "fedals", "table": table_id, "column": column, "scale": "cpu",
                                  "rows": sorted(rows, key=lambda r: r["method"])}))
    return path


def with_commands() -> list[Path]:
    """Give every committed row of the authors' code the command that made it, where it is known."""
    paths = sorted(PAPER.folder.glob("summaries/*/*/authors.json"))
    for path in paths:
        doc = json.loads(path.read_text())
        doc["rows"] = [r | {"command": command(r["setting"])} for r in doc["rows"]]
        path.write_text(tables.dumps(doc))
    return paths


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("summary", type=Path, nargs="?", help="the harness summary of one run of the authors' code")
    p.add_argument("--into", nargs="+", metavar="TABLE/COLUMN/METHOD")
    p.add_argument("--commands", action="store_true", help="fill in each committed row's command and stop")
    args = p.parse_args(argv)
    if args.commands:
        for path in with_commands():
            print(f"wrote: {path}")
        return
    if args.summary is None or not args.into:
        raise SystemExit("SUMMARY and --into: both are needed (or --commands)")
    summary = json.loads(args.summary.read_text())
    for into in args.into:
        print(f"wrote: {add(summary, into)}")


if __name__ == "__main__":
    main()
