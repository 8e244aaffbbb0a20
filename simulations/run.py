"""The experiment runner: a paper's table with one command, or any run-config files x methods x sweep
values x seeds; in process, one summary row per finished run.

A paper's table (``simulations/<paper>/tables.py`` declares it; ``simulations/tables.py`` builds it):

    python -m simulations.run fedsmoo table1 --column dir0.1-10pct --scale cpu --seeds 20 21
    python -m simulations.run hcct table4 --column fmnist --scale smoke
    python -m simulations.run fedals table1 --column cifar10-noniid --scale paper --jobs 4 --publish

runs every method of the table (``--methods`` picks some) on each ``--column`` (default: all) at
``--scale`` (``paper``: the paper's setting; ``cpu``: the reduced one the page quotes; ``smoke``: the
cpu setting cut to seconds) into ``results/<paper>/<table>/<column>/<scale>/`` (``--out`` replaces
``results/<paper>/<table>``), one run ``<method>-s<seed>`` a method and seed. That folder belongs to
that column and scale alone, and a run name already there with other settings is refused, so a table
never reuses another's results; runs already in its ``summary.json`` are kept (a run that failed, with
its reason), a stopped run resumes from its checkpoint (clients whose state lived in the stopped process
restart theirs, which the log names), so a stopped sweep resumes. It ends by writing,
in that folder, the table (``table.md``: paper | authors' code | ours, mean +/- sd over the seeds, and the
model and data ours ran), its plot (``<table>.png``) and the paper's claims on these runs (``claims.json``;
a smoke run states no verdict: ``holds`` is null); ``--publish`` also stores
the condensed summary in ``simulations/<paper>/summaries/`` and rebuilds the page, plots and claims file
from them. A table that is a view of another's runs (``Table.runs_of``: FedSMOO's Tables 3, 6 and 8 read
Table 1's) runs that table's runs of its methods, in that table's folder, and ``--publish`` puts their rows
in that table's summary beside the others.
``--jobs N`` runs N runs at once as separate processes (a GPU runs several small models at once).

Any run-config files (the general form):

    python -m simulations.run simulations/hcct/fmnist/hcct.toml simulations/hcct/fmnist/global.toml \
        --seeds 0 1 2 3 4 --out OUT
    python -m simulations.run simulations/fedals/cpu-cifar10-resnet20.toml --methods \
        simulations/fedals/methods/fedals.toml --sweep fedals.alpha=5,25 --set num-server-rounds=30

Every FILE is a plain run config, read with Flower's own parser: ``flwr run . --run-config FILE`` runs
the same configuration (Flower takes one file per run: a method file layered on a setting runs as
``python -m fedapp.runtime.launch --run-config "SETTING.toml METHOD.toml"``). A run's config is, in this
order: FILE, ``--set`` (Flower's ``key=value`` syntax), the method (``--methods``: a strategy name, or a
small run-config file layered on top), the method's tuned lr (``--lr-from``), one ``--sweep`` value and
one of ``--seeds``. The run is named ``<method>[-KEY=VALUE][-s<seed>]``, method being FILE's stem or the
``--methods`` entry (a file's stem); without ``--seeds`` the file's seed is used and the name has no
seed. Each run writes ``<out>/<name>/rounds.json`` as its rounds end, and when it finishes one row
(run, method, seed, seconds, its settings and the paper's summary of its rounds) to
``<out>/summary.json``; runs already there are not run again, and a name there with other settings is
refused. ``<out>``: ``--out``, else the ``results-dir`` of FILE and ``--set``, else
``results/<paper>/<setting>``. The summary and the tables are the paper's (``--report``, by default
the folder ``simulations/<paper>/`` of the first FILE): ``simulations/<paper>/report.py``.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
from simulations.tables import PAPERS  # noqa: E402


def read(path: str | Path) -> dict[str, Any]:
    """A run-config file as ``flwr run --run-config FILE`` reads it (flat keys)."""
    from fedapp.core.compat import parse_config_args

    return parse_config_args([str(path)])


def overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (TOML values) as ``flwr run --run-config "KEY=VALUE ..."`` reads them."""
    from fedapp.core.compat import parse_config_args

    return parse_config_args([" ".join(pairs)]) if pairs else {}


def value(text: str) -> Any:
    """One TOML value (a number, a boolean, a quoted string); a bare word is a string."""
    import tomllib

    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def default_out(path: Path, config: dict) -> Path:
    """The file's own results-dir, else results/<paper>/<setting>: <setting> is the folder of a file
    of one setting's methods (simulations/hcct/fmnist/hcct.toml) or the stem of a setting file."""
    if "results-dir" in config:
        return Path(config["results-dir"])
    try:
        parts = path.resolve().relative_to(ROOT / "simulations").parts
    except ValueError:
        return ROOT / "results" / path.stem
    return ROOT / "results" / Path(*parts[:-1]) / (path.stem if len(parts) < 3 else "")


def plan(args: argparse.Namespace) -> list[tuple[str, str, dict]]:
    """Every run, in order: (name, method, run config), files first, then methods, sweep values, seeds."""
    key, _, values = (args.sweep or "").partition("=")
    sweep = [value(v) for v in values.split(",")] if key else [None]
    tuned = json.loads(Path(args.lr_from).read_text())["winner"] if args.lr_from else None
    extra = overrides(args.set) | ({"num-server-rounds": args.rounds} if args.rounds else {})
    runs = []
    for path in args.files:
        base = read(path) | extra
        for m in args.methods or [None]:
            if m is None:
                method, layer = Path(path).stem, {}
            elif m.endswith(".toml"):
                method, layer = Path(m).stem, read(m)
            else:
                method, layer = m, {"strategy": m}
            if args.methods and len(args.files) > 1:
                method = f"{Path(path).stem}-{method}"
            for v in sweep:
                for seed in args.seeds or [None]:
                    name = method + ("" if v is None else f"-{key}={v}") + ("" if seed is None else f"-s{seed}")
                    config = {**base, **layer}
                    if tuned is not None:
                        config["lr"] = tuned[method]["lr"]
                    if v is not None:
                        config[key] = v
                    if seed is not None:
                        config["seed"] = seed
                    runs.append((name, method, config))
    return runs


def main(argv: list[str] | None = None) -> None:
    import sys

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in PAPERS:
        return table_main(argv)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help="run-config files (as for flwr run --run-config)")
    p.add_argument("--methods", nargs="+", help="per file, one run per strategy name or method file (.toml)")
    p.add_argument("--sweep", help="KEY=V1,V2,...: one run per value (e.g. fedals.alpha=5,25)")
    p.add_argument("--seeds", nargs="+", type=int, help="one run per seed (named <run>-s<seed>)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides, TOML values")
    p.add_argument("--rounds", type=int, help="num-server-rounds (as --set num-server-rounds=N)")
    p.add_argument("--lr-from", type=Path, help="lr-tuning.json (tune_lr.py): each method at its tuned lr")
    p.add_argument("--out", type=Path, help="results folder of the runs and of summary.json")
    p.add_argument("--report", choices=PAPERS, help="the paper whose summary and tables (default: FILE's folder)")
    p.add_argument("--table", action="store_true", help="print the markdown table of <out>'s runs and stop")
    p.add_argument("--clients", action="store_true", help="with --table (hcct): every client's error too")
    p.add_argument("--curves", action="store_true", help="(hcct) every run's error per epoch as CSV, then stop")
    p.add_argument("--target", type=float, default=0.5, help="(fedsmoo) central accuracy for 'rounds to target'")
    p.add_argument("--upto-round", type=int, help="(fedsmoo) tabulate rounds 1..N only")
    args = p.parse_args(argv)

    named = [*args.files, *(m for m in args.methods or [] if m.endswith(".toml")), *[args.lr_from] * bool(args.lr_from)]
    missing = [str(f) for f in named if not Path(f).is_file()]
    if missing:
        raise SystemExit(f"no such file: {', '.join(missing)}")

    report = paper_report(args.report or paper_of(args.files[0]))
    runs = plan(args)
    out = args.out or default_out(args.files[0], read(args.files[0]) | overrides(args.set))
    summary_file = out / "summary.json"
    rows = run_rows(summary_file)
    if args.curves:
        print(report.curves(out), end="")
        return
    if args.table:
        print(report.table(out, rows, [m for _, m, _ in runs], args))
        return
    execute(runs, out, lambda history, config: report.summarize(history, config, args))


class TableReport:
    """The summary and table of the general form for a paper without a ``report.py`` of its own: the
    metric of the paper's first declared table."""

    def __init__(self, paper: str):
        from simulations import tables

        self.tables = tables
        self.declared = next(iter(tables.load(paper).tables.values()))

    def summarize(self, history: list[dict], config: dict, args=None) -> dict:
        return self.tables.summarize(self.declared, history)

    def table(self, out: Path, rows: list[dict], methods: list[str], args=None) -> str:
        metric = self.declared.metric
        lines = [f"| run | method | seed | {metric.label} |", "|---|---|---|---|"]
        lines += [f"| {r['run']} | {r['method']} | {r['seed']} | {self.tables.fmt(r['value'] * metric.show)} |"
                  for r in rows if r["method"] in methods and r.get("value") is not None]
        return "\n".join(lines)

    def curves(self, out: Path) -> str:
        raise SystemExit("--curves: this paper has no per-epoch curves table; read <out>/summary.json")


def paper_report(paper: str):
    """The summary, table and curves of ``simulations/<paper>/report.py`` where the paper keeps them,
    else those of its first table's metric."""
    from types import SimpleNamespace

    generic = TableReport(paper)
    try:
        own = importlib.import_module(f"simulations.{paper}.report")
    except ModuleNotFoundError:
        own = None
    return SimpleNamespace(**{name: getattr(own, name, getattr(generic, name))
                              for name in ("summarize", "table", "curves")})


def execute(runs: list[tuple[str, str, dict]], out: Path, summarize, jobs: int = 1, child: list[str] | None = None,
            measure=None):
    """Run ``runs`` (name, method, config) into ``out``, each adding its row to ``out/summary.json``;
    ``measure(run folder, config)``: fields measured on a finished run's saved model, added to its last
    round's row before ``summarize`` reads the history.

    Every config is checked, and every name already in the summary compared with its settings, before
    the first run starts; finished runs are skipped and a stopped one resumes from its checkpoint.
    ``jobs`` > 1 runs that many at once, each as ``python -m simulations.run`` + ``child`` + its name."""
    from fedapp.core.config import ConfigError
    from fedapp.runtime.registry import parse_run_config

    summary_file = out / "summary.json"
    earlier = {r["run"]: r["config"] for r in run_rows(summary_file)
               if "run" in r and "config" in r}
    for name, _, config in runs:
        try:
            parse_run_config({**config, "results-dir": str(out), "run-name": name})
        except ConfigError as err:
            raise SystemExit(f"run {name}: {err}") from None
        clash = collision(earlier.get(name), config)
        if clash:
            raise SystemExit(f"run {name}: {out} already holds a run of that name with other settings "
                             f"({clash}); give this one its own --out")
    todo = [r for r in runs if r[0] not in done_runs(summary_file)]
    out.mkdir(parents=True, exist_ok=True)
    if jobs > 1 and len(todo) > 1:
        import subprocess
        import sys
        from concurrent.futures import ThreadPoolExecutor

        def one(name: str) -> int:
            return subprocess.run([sys.executable, "-m", "simulations.run", *child, "--only", name], cwd=ROOT).returncode

        with ThreadPoolExecutor(jobs) as pool:
            failed = [n for (n, _, _), rc in zip(todo, pool.map(one, [n for n, _, _ in todo])) if rc]
        if failed:
            raise SystemExit(f"runs failed: {', '.join(failed)}")
        return
    import torch

    from fedapp.runtime.inprocess import run_local

    torch.set_num_threads(1)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    for name, method, config in todo:
        if name in done_runs(summary_file):  # read again: another runner may share this folder
            continue
        run_config = {**config, "results-dir": str(out), "run-name": name}
        if (out / name / "checkpoint.pt").exists():  # a stopped run goes on from its last checkpoint
            run_config["resume-from"] = str(out / name)
        t0 = time.time()
        row = {"run": name, "method": method, "seed": config.get("seed", 0)}
        try:
            strategy = run_local(run_config)
        except RuntimeError as err:  # a run stopped as failed (no valid reply): its row says why
            row |= {"seconds": round(time.time() - t0, 1), "value": None, "failed": str(err).splitlines()[0]}
        else:
            history = strategy.history
            if measure is not None:
                history = [*history[:-1], {**history[-1], **measure(out / name, config)}]
            row |= {"seconds": round(time.time() - t0, 1), **summarize(history, config)}
        row["config"] = settings(config)
        print(json.dumps({k: v for k, v in row.items() if k not in ("curve", "config")}), flush=True)
        add_row(summary_file, row)


def settings(config: dict) -> dict:
    """What makes a run what it is: its config without where it writes and what it resumes from."""
    return {k: config[k] for k in sorted(config) if k not in ("results-dir", "run-name", "resume-from")}


def collision(theirs: dict | None, config: dict) -> str:
    """The keys in which an earlier run of the same name (its settings ``theirs``) differs ('' if none)."""
    if theirs is None:
        return ""
    mine = settings(config)
    keys = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
    return ", ".join(f"{k}: {theirs.get(k)!r} there, {mine.get(k)!r} here" for k in keys[:3])


def table_main(argv: list[str]) -> None:
    from simulations import tables

    p = argparse.ArgumentParser(prog="python -m simulations.run PAPER TABLE",
                                description="Run a paper's table and write its table, plot and claims.")
    p.add_argument("paper", choices=PAPERS)
    p.add_argument("table")
    p.add_argument("--column", nargs="+", help="the table's columns to run (default: all)")
    p.add_argument("--scale", choices=tables.SCALES, default="cpu",
                   help="paper: the paper's setting; cpu: the reduced one the page quotes; smoke: seconds")
    p.add_argument("--seeds", nargs="+", type=int, help="default: the table's seeds at that scale")
    p.add_argument("--methods", nargs="+", help="the table's methods to run (default: all)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides, TOML values (e.g. device)")
    p.add_argument("--out", type=Path, help="results root of this table (default: results/<paper>/<table>)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each its own process (GPU: 3-4)")
    p.add_argument("--publish", action="store_true",
                   help="store the condensed summary in simulations/<paper>/summaries/ and rebuild the page")
    p.add_argument("--only", help=argparse.SUPPRESS)  # one run of the plan, for --jobs
    args = p.parse_args(argv)
    paper = tables.load(args.paper)
    if args.table not in paper.tables:
        raise SystemExit(f"table {args.table!r}: {args.paper} has {', '.join(paper.tables)}")
    table = paper.tables[args.table]
    for key, asked, known in (("--column", args.column, table.columns), ("--methods", args.methods, table.methods)):
        unknown = [a for a in asked or [] if a not in known]
        if unknown:
            raise SystemExit(f"{key} {' '.join(unknown)}: {args.paper} {args.table} has {', '.join(known)}")
    # a view (Table.runs_of) runs the runs of the table it reads, its own methods, in that table's folder
    source_id = table.runs_of or args.table
    source = paper.tables[source_id]
    if table.runs_of:
        args.methods = args.methods or list(table.methods)
        print(f"{args.paper} {args.table} reads {source_id}'s runs: running {source_id}'s {', '.join(args.methods)}")
    root = args.out or ROOT / "results" / args.paper / source_id
    for cid in args.column or list(table.columns):
        out = root / cid / args.scale
        runs = table_plan(paper, source_id, cid, args.scale, args)
        claim_folder(out, {"paper": args.paper, "table": source_id, "column": cid, "scale": args.scale})
        if args.only:
            runs = [r for r in runs if r[0] == args.only]
        child = [args.paper, source_id, "--column", cid, "--scale", args.scale, "--out", str(root),
                 *(["--seeds", *map(str, args.seeds)] if args.seeds else []),
                 *(["--set", *args.set] if args.set else [])]
        measure = None if source.measure is None else (
            lambda folder, config, scale=args.scale: source.measure(folder, config, scale))
        execute(runs, out, lambda history, config: tables.summarize(source, history), args.jobs, child, measure)
        if args.only:
            continue
        rows = json.loads((out / "summary.json").read_text())
        res = tables.results(paper, args.table, cid, args.scale, rows=rows)
        (out / "table.md").write_text(f"# {tables.heading(res)}\n\n{tables.markdown(res)}\n")
        tables.plot(res, out / f"{args.table}.png")
        mine = [c for c in paper.claims if c.table == args.table and c.column == cid]
        (out / "claims.json").write_text(tables.dumps([tables.claim_record(paper, c, res) for c in mine]))
        print(f"{out}: table.md, {args.table}.png, claims.json ({len(mine)} claims)")
        if args.publish:
            target = tables.summary_path(paper, source_id, cid, args.scale)
            target.parent.mkdir(parents=True, exist_ok=True)
            if table.runs_of:  # a view runs some of its source's methods: the rest of its summary stays
                rows = tables.merged(tables.read_rows(target), rows)
            order = list(source.methods)
            keep = sorted(rows, key=lambda r: (order.index(r["method"]), r["seed"]))
            target.write_text(tables.dumps({"paper": args.paper, "table": source_id, "column": cid,
                                            "scale": args.scale, "rows": keep}))
            for d in tables.build(paper):
                print(f"wrote: {d}")


def table_plan(paper, table_id: str, column: str, scale: str, args) -> list[tuple[str, str, dict]]:
    """(name, method, run config) of every run of one column at one scale."""
    table = paper.tables[table_id]
    files = table.columns[column].settings
    setting = files.get("cpu" if scale == "smoke" else scale)
    if setting is None:
        raise SystemExit(f"--scale {scale}: {paper.name} {table_id} column {column} has no such setting "
                         f"(it has {', '.join(files)})")
    seeds = args.seeds or table.seeds.get(scale) or table.seeds.get("cpu") or [0]
    runs = []
    for method in args.methods or list(table.methods):
        layer = table.methods[method]
        config = read(paper.folder / setting.format(method=method))
        config |= read(paper.folder / layer) if isinstance(layer, str) else dict(layer)
        if scale == "smoke":
            config |= dict(table.smoke)
        config |= overrides(args.set)
        config.pop("results-dir", None)
        for seed in seeds:
            runs.append((f"{method}-s{seed}", method, {**config, "seed": seed}))
    return runs


def claim_folder(out: Path, owner: dict) -> None:
    """Mark ``out`` as this table column's and scale's; a folder of another's is refused."""
    stamp = out / "table.json"
    if stamp.exists():
        theirs = json.loads(stamp.read_text())
        if theirs != owner:
            raise SystemExit(f"--out: {out} holds the runs of {theirs['paper']} {theirs['table']} column "
                             f"{theirs['column']} at scale {theirs['scale']}; give this table its own --out")
        return
    out.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(owner) + "\n")


def run_rows(summary_file: Path) -> list[dict]:
    """The rows of a results folder's ``summary.json`` (none before its first run ends)."""
    return json.loads(summary_file.read_text()) if summary_file.exists() else []


def done_runs(summary_file: Path) -> set[str]:
    # rows of older runners have no "run"
    return {r.get("run", f"{r['method']}-s{r['seed']}") for r in run_rows(summary_file)}


def add_row(summary_file: Path, row: dict) -> None:
    """Append ``row`` to the summary under an exclusive lock, re-reading the file first and replacing it
    atomically, so runners writing to one folder at once (two cores, one queue) lose no row."""
    with open(summary_file.with_name(summary_file.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = run_rows(summary_file)
        rows.append(row)
        tmp = summary_file.with_name(summary_file.name + ".tmp")
        tmp.write_text(json.dumps(rows, indent=1) + "\n")
        os.replace(tmp, summary_file)


def paper_of(path: Path) -> str:
    parts = path.resolve().relative_to(ROOT / "simulations").parts if path.resolve().is_relative_to(
        ROOT / "simulations") else ()
    if not parts or parts[0] not in PAPERS:
        raise SystemExit(f"--report: {path} is not under simulations/<paper>/; name the paper "
                         f"({', '.join(PAPERS)})")
    return parts[0]


if __name__ == "__main__":
    main()
