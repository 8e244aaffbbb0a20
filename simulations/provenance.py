"""Provenance of the committed run summaries: which rows carry the config they ran with and their seconds,
configs filled in from the settings files where a replay gives the stored value back, and the replay.

    python -m simulations.provenance                          # the inventory, one line a summary file
    python -m simulations.provenance replay FILE [--run RUN] [--rounds K]
    python -m simulations.provenance fill FILE [--run RUN] [--rounds K]
    python -m simulations.provenance adopt FILE RESULTS/summary.json

A summary file is ``simulations/<paper>/summaries/...json``; ``authors.json`` holds the rows of a
reference code (the authors' code, FL-bench, FL-Simulator), every other file ours. A row of ours carries
``config`` (the run config it ran with, :func:`simulations.run.settings`) and ``seconds``; a row whose
config was filled in after the run says how in ``config_source``. A reference row carries its ``seed`` and
``command`` (the command line of that code that made it).

``replay`` runs one row of ours again from its stored config (default: the file's cheapest, see
:func:`cheapest`), for its first ``K`` rounds where the row's curve holds round K (rounds do not change a
run's schedule, so round K of a shorter run is round K of the longer one), and compares the value.
``fill`` gives every row without a config the one the table's settings make for its method and seed
(:func:`simulations.run.table_plan`; a ``<method>@lr<lr>`` row, the method at its stored ``lr``), and writes
them only if the replay of ``RUN`` with its filled config gives its stored value back. ``adopt`` puts the rows
of fresh runs of today's code (the ``summary.json`` of a table command's results folder) in place of the
rows of the same runs, adds those of runs the file lacks and keeps the others: a column rerun in part.

The value must come back within the rounding it was stored at (:func:`tolerance`): a run on the CPU with
one torch thread and a fixed seed repeats bit for bit, and an accuracy over N test examples moves in steps
of 1/N, so anything but a rounding difference is another run. On the same data: CIFAR-10's images are JPEG
files, and a machine whose copy decodes to other pixels runs other data (:data:`DATA`, :func:`other_data`).
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

from simulations import tables

ROOT = tables.ROOT
REFERENCE = "authors.json"
RERUN = "; rerun with today's code: "

# The summary files whose rows do not all say how they were made yet: why, and what it would take (seconds
# from the rows' own; tests/test_provenance.py checks that these and only these lack something).
# Rows whose replay from their own stored config does not give the stored value back, as measured: the file,
# the run and rounds replayed, the stored and the replayed value.
MISMATCH = {
    "simulations/hcct/summaries/table4/fmnist/paper.json": (
        "hcct-e-s2", 1, 0.845376, 0.84537,
        "independent-s2's first epoch, the same, too (global-s2, independent-s1 and hcct-e-s0 replay exactly): "
        "about one test example of a large client, from an earlier state of the code or of its float arithmetic"),
}

# The decoded data the committed rows of ours were made from: the archives of ../shared/data as this project
# decodes them (data_fingerprint). A machine whose copy decodes to other tensors (another copy of an archive,
# another JPEG decoder) runs the rows on other data, so its replays cannot give their values back.
DATA = {"cifar10": "709a4b660cbcf56b", "fashion_mnist": "696fc56b99fe57a9", "mnist": "71f2c65e44d04070"}

FEDALS_OLDER = ("rows of an older runner without their config: the settings do not give their values back (the "
                "replay of table2-150it's alpha25-s0, 10 rounds, gave 0.1456 for the stored 0.1525); rerun by the "
                "table command, {cost}")
HCCT_OLDER = ("rows of an older runner without their config, on CIFAR-10, where replays from the settings did not "
              "give the stored values back (Table II train20's pattern-23-s0, 10 epochs: 0.675946 for 0.675017; Table "
              "IV cpu's independent-s0, 5 epochs: 0.56727 for 0.566912; both files since rerun); {cost}; rerun by the "
              "table command")
PENDING = {
    "simulations/fedals/summaries/table1/cifar10-iid/cpu.json": FEDALS_OLDER.format(cost="4 runs of 3360-3650 s"),
    "simulations/fedals/summaries/table1/cifar10-noniid/cpu.json": FEDALS_OLDER.format(cost="9 runs of 3210-4910 s"),
    "simulations/fedals/summaries/table2/cifar10-noniid/cpu.json": FEDALS_OLDER.format(
        cost="8 runs of 3720-4910 s (alpha1 and alpha10 are table1's fedavg and fedals rows)"),
    "simulations/hcct/summaries/fig3/cifar10/authors.json":
        "the command line of each main_cluster.py run was not kept (the claims give its form)",
    "simulations/hcct/summaries/table4/cifar10/authors.json":
        "the command line of each main_cluster.py run was not kept (the claims give its form)",
    "simulations/hcct/summaries/table4/fmnist/authors.json":
        "the command line of each main_cluster.py run was not kept (the claims give its form)",
    "simulations/hcct/summaries/table4/cifar10/paper.json": HCCT_OLDER.format(
        cost="its cheapest replay is a whole run (hcct-e-s3: 787 s; the rows keep epoch 50 only)"),
}


def summary_files() -> list[Path]:
    return sorted((ROOT / "simulations").glob("*/summaries/**/*.json"))


def rows_of(doc: dict) -> list[dict]:
    """A summary's rows: a table summary's ``rows``, or the runs of a figure's or a setting's summary
    (``runs``: a list, or a dict by method)."""
    if "rows" in doc:
        return doc["rows"]
    runs = doc.get("runs", [])
    return [{"method": m, **r} for m, r in runs.items()] if isinstance(runs, dict) else runs


def transcribed(doc: dict, row: dict) -> bool:
    """The row was copied from an earlier record, not written by a run: its file's note says its rows are
    "as recorded", and the row holds neither a config nor seconds."""
    return "as recorded" in doc.get("note", "") and not row.get("config") and row.get("seconds") is None


def inventory() -> list[dict]:
    """One record a summary file: its rows, and how many lack a config, seconds, a seed or a command."""
    out = []
    for path in summary_files():
        doc = json.loads(path.read_text())
        rows, reference = rows_of(doc), path.name == REFERENCE
        record = {"file": str(path.relative_to(ROOT)), "code": "reference" if reference else "ours",
                  "rows": len(rows), "no_seconds": sum(r.get("seconds") is None for r in rows),
                  "transcribed": sum(transcribed(doc, r) for r in rows)}
        if reference:
            record |= {"no_seed": sum(r.get("seed") is None for r in rows),
                       "no_command": sum(not (r.get("command") or doc.get("command")) for r in rows)}
        else:
            record |= {"no_config": sum(not r.get("config") for r in rows),
                       "filled": sum("config_source" in r for r in rows)}
        out.append(record)
    return out


def gaps(record: dict) -> list[str]:
    """What an inventory record says its file's rows lack: ours a config or seconds, a reference code's a
    seed or a command; and rows transcribed, not run."""
    wanted = ("no_seed", "no_command") if record["code"] == "reference" else ("no_config", "no_seconds")
    return [k for k in (*wanted, "transcribed") if record[k]]


def declared(doc: dict) -> tuple[tables.Paper, tables.Table]:
    paper = tables.load(doc["paper"])
    return paper, paper.tables[doc["table"]]


def planned(doc: dict, row: dict) -> dict:
    """The config the table's settings make for ``row``'s method and seed; a ``<method>@lr<lr>`` row is
    ``method`` at the row's ``lr``."""
    from simulations.run import settings, table_plan

    paper, _ = declared(doc)
    method = row["method"].split("@")[0]
    plan = table_plan(paper, doc["table"], doc["column"], doc["scale"],
                      SimpleNamespace(seeds=[row["seed"]], methods=[method], set=[]))
    config = plan[0][2]
    if "lr" in row:
        config["lr"] = row["lr"]
    return settings(config)


def source(doc: dict) -> str:
    """Where :func:`planned` reads a row's config: the column's settings file(s) at the file's scale."""
    paper, table = declared(doc)
    setting = table.columns[doc["column"]].settings["cpu" if doc["scale"] == "smoke" else doc["scale"]]
    return f"simulations/{paper.name}/{setting}"


def first_round(table: tables.Table, row: dict) -> int:
    """The fewest rounds whose replay shows a stored value: the first round of the row's curve, else (a
    measure of the final model, or a curve of the last round only) all of them."""
    if table.measure is None and row.get("curve"):
        return row["curve"][0][0]
    return row["rounds"]


def cheapest(doc: dict) -> tuple[dict, int, float | None]:
    """The row of ours cheapest to replay, the rounds its replay runs (:func:`first_round`) and their seconds
    estimated from the row's: rows with a config first, then by that estimate."""
    _, table = declared(doc)

    def cost(row: dict) -> tuple[bool, float]:
        per_round = row["seconds"] / row["rounds"] if row.get("seconds") else float("inf")
        return not row.get("config"), per_round * first_round(table, row)

    best = min((r for r in doc["rows"] if r.get("value") is not None), key=cost)
    seconds = cost(best)[1]
    return best, first_round(table, best), None if seconds == float("inf") else round(seconds, 1)


def stored_at(row: dict, upto: int) -> float:
    """The row's stored value of the table's metric at round ``upto`` (its value where that is its last)."""
    if upto == row["rounds"]:
        return row["value"]
    return next(v for rnd, v in row["curve"] if rnd == upto)


@functools.lru_cache(maxsize=None)
def data_fingerprint(name: str, data_dir: str = "") -> str:
    """sha1 (16 hex digits) of dataset ``name``'s decoded training and test tensors, as a run reads them (once a
    process: every replay of the dataset's rows asks)."""
    import hashlib

    from fedapp.core.data.sources import load_dataset

    ds = load_dataset(name, data_dir, num_clients=1, seed=0)
    h = hashlib.sha1()
    for t in (ds.train_x, ds.train_y, ds.test_x, ds.test_y):
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def other_data(config: dict) -> str | None:
    """Why a row of ``config`` cannot replay here, when this machine decodes its dataset to other tensors
    than the rows were made from (:data:`DATA`); None when it decodes the same, or the data is not an archive."""
    from fedapp.core.data import sources

    name, data_dir = config.get("dataset", "synthetic"), config.get("data-dir", "")
    if name not in DATA or (here := data_fingerprint(name, data_dir)) == DATA[name]:
        return None
    return (f"{name} as read here ({sources._find_local(name, sources.search_dirs(data_dir))}) decodes to other "
            f"tensors (sha1 {here}) than the rows were made from ({DATA[name]}): another copy of the data or "
            f"another image decoder")


def tolerance(value: float) -> float:
    """Half a unit of the last digit ``value`` was stored with (0.3939: 5e-5), and a little for the float
    itself: the replay rounded as the row was must give the same number."""
    exponent = Decimal(repr(value)).as_tuple().exponent
    return 0.5 * 10.0 ** exponent + 1e-12


def replay(doc: dict, row: dict, upto: int | None = None, config: dict | None = None) -> dict:
    """Run ``row`` again from ``config`` (default: its stored one) for ``upto`` rounds (default: all), in a
    scratch folder, one torch thread; the stored and the replayed value at that round, and the seconds."""
    import torch

    from fedapp.runtime.inprocess import run_local

    paper, table = declared(doc)
    config = dict(config or row["config"])
    upto = upto or row["rounds"]
    config["num-server-rounds"] = upto
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        name = tables.run_key(row)
        t0 = time.time()
        history = run_local({**config, "results-dir": tmp, "run-name": name}).history
        if table.measure is not None:
            history = [*history[:-1], {**history[-1], **table.measure(Path(tmp) / name, config, doc["scale"])}]
        seconds = round(time.time() - t0, 1)
    got = tables.summarize(table, history)
    replayed = got["curve"][-1][1] if upto < row["rounds"] else got["value"]
    stored = stored_at(row, upto)
    return {"run": name, "rounds": upto, "value": stored, "replayed": replayed, "seconds": seconds,
            "tolerance": tolerance(stored), "same": abs(replayed - stored) <= tolerance(stored)}


def fill(path: Path, run: str, upto: int | None = None) -> dict:
    """Fill in the config of every row of ``path`` without one from the settings, if the replay of ``run``
    (``upto`` rounds) with its filled config gives its stored value back; the replay's record either way."""
    doc = json.loads(path.read_text())
    row = next(r for r in doc["rows"] if tables.run_key(r) == run)
    config = row.get("config") or planned(doc, row)
    result = replay(doc, row, upto, config)
    if not result["same"]:
        return result
    how = (f"filled from {source(doc)} (python -m simulations.provenance fill); its replay of {run}, "
           f"{result['rounds']} of {row['rounds']} rounds, gave {result['replayed']} for the stored "
           f"{result['value']}")
    for r in doc["rows"]:
        if not r.get("config"):
            r["config"] = planned(doc, r)
            r["config_source"] = how
    path.write_text(tables.dumps(doc))
    return result


def adopt(path: Path, fresh: Path) -> list[str]:
    """Put the rows of fresh runs (``fresh``: a results folder's summary, rows with their config and
    seconds) in place of the rows of the same runs in ``path``, and beside them those of runs it lacks, in
    the table's method order; the names adopted. The file's note, if it has one, names the rerun rows."""
    doc = json.loads(path.read_text())
    new = [r for r in json.loads(fresh.read_text()) if r.get("value") is not None]
    order = list(declared(doc)[1].methods)
    doc["rows"] = sorted(tables.merged(doc["rows"], new), key=lambda r: (order.index(r["method"]), r["seed"]))
    rerun = [tables.run_key(r) for r in doc["rows"] if r.get("config")]
    if len(rerun) == len(doc["rows"]):  # no transcribed row left for a note to describe
        doc.pop("note", None)
    elif "note" in doc:
        doc["note"] = doc["note"].split(RERUN)[0] + f"{RERUN}{', '.join(rerun)} (rows with their config and seconds)"
    path.write_text(tables.dumps(doc))
    return sorted(tables.run_key(r) for r in new)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("action", nargs="?", choices=("inventory", "replay", "fill", "adopt"), default="inventory")
    p.add_argument("file", nargs="?", type=Path, help="a summary file (replay, fill)")
    p.add_argument("fresh", nargs="?", type=Path, help="adopt: the summary.json of fresh runs")
    p.add_argument("--run", help="the row to replay (default: the file's cheapest)")
    p.add_argument("--rounds", type=int, help="replay the first K rounds (default: the cheapest honest number)")
    args = p.parse_args(argv)
    if args.action == "inventory":
        for record in inventory():
            print(json.dumps(record))
        return
    if args.file is None:
        raise SystemExit(f"{args.action}: name a summary file")
    if args.action == "adopt":
        print("replaced:", ", ".join(adopt(args.file, args.fresh)))
        return
    doc = json.loads(args.file.read_text())
    row, upto, _ = cheapest(doc)
    if args.run:
        row = next((r for r in doc["rows"] if tables.run_key(r) == args.run), None)
        if row is None:
            raise SystemExit(f"--run {args.run}: no such row in {args.file}")
        upto = first_round(declared(doc)[1], row)
    upto = args.rounds or upto
    if args.action == "replay":
        print(json.dumps(replay(doc, row, upto, row.get("config") or planned(doc, row))))
    else:
        print(json.dumps(fill(args.file, tables.run_key(row), upto)))


if __name__ == "__main__":
    main()
