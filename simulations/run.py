"""The experiment runner: run-config files x methods x sweep values x seeds, in process, one summary row
per finished run, and the paper's tables from those rows.

    python -m simulations.run simulations/hcct/fmnist/hcct.toml simulations/hcct/fmnist/global.toml \
        --seeds 0 1 2 3 4 --out /work/runs/hcct/fmnist
    python -m simulations.run simulations/hcct/fmnist/*.toml --out /work/runs/hcct/fmnist --table --clients
    python -m simulations.run simulations/fedsmoo/reduced-cifar10-mlp-dir0.1-10pct-of-100.toml \
        --methods fedavg scaffold feddyn fedsam mofedsam fedspeed fedsmoo --seeds 20 --target 0.3
    python -m simulations.run simulations/fedals/cpu-cifar10-resnet20.toml --methods \
        simulations/fedals/methods/fedals.toml --sweep fedals.alpha=5,25 --set num-server-rounds=30

Every FILE is a plain run config, read with Flower's own parser: ``flwr run . --run-config FILE`` runs
the same configuration (Flower takes one file per run: a method file layered on a setting runs as
``python -m fedapp.launch --run-config "SETTING.toml METHOD.toml"``). A run's config is, in this
order: FILE, ``--set`` (Flower's ``key=value`` syntax), the method (``--methods``: a strategy name, or a
small run-config file layered on top), the method's tuned lr (``--lr-from``), one ``--sweep`` value and
one of ``--seeds``. The run is named
``<method>[-KEY=VALUE][-s<seed>]``, method being FILE's stem or the ``--methods`` entry (a file's stem);
without ``--seeds`` the file's seed is used and the name has no seed. Each run writes
``<out>/<name>/rounds.json`` as its rounds end, and when it finishes one row (run, method, seed,
seconds and the paper's summary of its rounds) to ``<out>/summary.json``; runs already there are not
run again, so a stopped sweep resumes. ``<out>``: ``--out``, else the ``results-dir`` of FILE and
``--set``, else ``results/<paper>/<setting>``. The summary and the tables are the paper's
(``--report``, by default the folder ``simulations/<paper>/`` of the first FILE):
``simulations/<paper>/report.py``.
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
REPORTS = ("fedsmoo", "fedals", "pefll", "hcct")


def read(path: str | Path) -> dict[str, Any]:
    """A run-config file as ``flwr run --run-config FILE`` reads it (flat keys)."""
    from flwr.common.config import parse_config_args

    return parse_config_args([str(path)])


def overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (TOML values) as ``flwr run --run-config "KEY=VALUE ..."`` reads them."""
    from flwr.common.config import parse_config_args

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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("files", nargs="+", type=Path, help="run-config files (as for flwr run --run-config)")
    p.add_argument("--methods", nargs="+", help="per file, one run per strategy name or method file (.toml)")
    p.add_argument("--sweep", help="KEY=V1,V2,...: one run per value (e.g. fedals.alpha=5,25)")
    p.add_argument("--seeds", nargs="+", type=int, help="one run per seed (named <run>-s<seed>)")
    p.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides, TOML values")
    p.add_argument("--rounds", type=int, help="num-server-rounds (as --set num-server-rounds=N)")
    p.add_argument("--lr-from", type=Path, help="lr-tuning.json (tune_lr.py): each method at its tuned lr")
    p.add_argument("--out", type=Path, help="results folder of the runs and of summary.json")
    p.add_argument("--report", choices=REPORTS, help="the paper whose summary and tables (default: FILE's folder)")
    p.add_argument("--table", action="store_true", help="print the markdown table of <out>'s runs and stop")
    p.add_argument("--clients", action="store_true", help="with --table (hcct): every client's error too")
    p.add_argument("--curves", action="store_true", help="(hcct) every run's error per epoch as CSV, then stop")
    p.add_argument("--target", type=float, default=0.5, help="(fedsmoo) central accuracy for 'rounds to target'")
    p.add_argument("--upto-round", type=int, help="(fedsmoo) tabulate rounds 1..N only")
    args = p.parse_args(argv)
    from fedapp.config import ConfigError, parse_run_config

    named = [*args.files, *(m for m in args.methods or [] if m.endswith(".toml")), *[args.lr_from] * bool(args.lr_from)]
    missing = [str(f) for f in named if not Path(f).is_file()]
    if missing:
        raise SystemExit(f"no such file: {', '.join(missing)}")

    report = importlib.import_module(f"simulations.{args.report or paper_of(args.files[0])}.report")
    runs = plan(args)
    out = args.out or default_out(args.files[0], read(args.files[0]) | overrides(args.set))
    summary_file = out / "summary.json"
    rows = json.loads(summary_file.read_text()) if summary_file.exists() else []
    if args.curves:
        print(report.curves(out), end="")
        return
    if args.table:
        print(report.table(out, rows, [m for _, m, _ in runs], args))
        return
    for name, _, config in runs:  # every run's config checked before the first starts
        try:
            parse_run_config({**config, "results-dir": str(out), "run-name": name})
        except ConfigError as err:
            raise SystemExit(f"run {name}: {err}") from None
    import torch

    from fedapp.inprocess import run_local

    torch.set_num_threads(1)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    out.mkdir(parents=True, exist_ok=True)
    for name, method, config in runs:
        if name in done_runs(summary_file):  # read again: another runner may share this folder
            continue
        t0 = time.time()
        strategy = run_local({**config, "results-dir": str(out), "run-name": name})
        row = {"run": name, "method": method, "seed": config.get("seed", 0), "seconds": round(time.time() - t0, 1),
               **report.summarize(strategy.history, config, args)}
        print(json.dumps(row), flush=True)
        add_row(summary_file, row)


def done_runs(summary_file: Path) -> set[str]:
    rows = json.loads(summary_file.read_text()) if summary_file.exists() else []
    return {r.get("run", f"{r['method']}-s{r['seed']}") for r in rows}  # rows of older runners have no "run"


def add_row(summary_file: Path, row: dict) -> None:
    """Append ``row`` to the summary under an exclusive lock, re-reading the file first and replacing it
    atomically, so runners writing to one folder at once (two cores, one queue) lose no row."""
    with open(summary_file.with_name(summary_file.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = json.loads(summary_file.read_text()) if summary_file.exists() else []
        rows.append(row)
        tmp = summary_file.with_name(summary_file.name + ".tmp")
        tmp.write_text(json.dumps(rows, indent=1) + "\n")
        os.replace(tmp, summary_file)


def paper_of(path: Path) -> str:
    parts = path.resolve().relative_to(ROOT / "simulations").parts if path.resolve().is_relative_to(
        ROOT / "simulations") else ()
    if not parts or parts[0] not in REPORTS:
        raise SystemExit(f"--report: {path} is not under simulations/<paper>/; name the paper "
                         f"({', '.join(REPORTS)})")
    return parts[0]


if __name__ == "__main__":
    main()
