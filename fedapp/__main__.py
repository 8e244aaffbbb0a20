"""fedapp's command line, ``fedapp`` (installed) or ``python -m fedapp``: ``list``, ``compare``, ``new``, ``run``.

``list`` prints every algorithm from the registry with its own run-config keys (defaults and
one-line docs) and the common keys; ``compare`` puts several runs' results folders in one
table and one plot (accuracy against rounds and against training traffic); ``new NAME`` writes a
Flower app folder of fedapp's ServerApp and ClientApp; ``run [APP_DIR]`` runs a Flower app folder
on a local simulation federation of its own and cleans up (``fedapp/runtime/launch.py``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any



def first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def list_algorithms(out=sys.stdout) -> None:
    from fedapp.core.config import COMMON_KEYS
    from fedapp.runtime.registry import algorithms

    for name, spec in sorted(algorithms().items()):
        print(f"{name}  ({spec.strategy.__module__}.{spec.strategy.__name__}): {first_line(spec.strategy.__doc__)}",
              file=out)
        for key in spec.keys:
            print(f"    {spec.prefix}.{key.name} = {key.default!r}: {key.doc}", file=out)
    print("\ncommon keys (every algorithm):", file=out)
    for key in COMMON_KEYS:
        print(f"    {key.name} = {key.default!r}: {key.doc}", file=out)


def load_run(folder: Path) -> dict[str, Any]:
    path = folder / "rounds.json"
    if not path.is_file():
        raise SystemExit(f"error: {folder} has no rounds.json (not a results folder)")
    return json.loads(path.read_text())


def summary(folder: Path, doc: dict[str, Any]) -> dict[str, Any]:
    # in order of preference: a run's headline metric is the first it has (imported here: `fedapp run`
    # starts its SuperLink before torch and Flower are imported)
    from fedapp.runtime.results import ACCURACIES

    rows, cfg = doc["rounds"], doc["config"]
    last = rows[-1] if rows else {}
    out = {"run": folder.name, "strategy": cfg.get("strategy"), "dataset": cfg.get("dataset"),
           "rounds": last.get("round", 0)}
    for key in ACCURACIES:
        values = [r[key] for r in rows if key in r]
        if values:
            out[f"final {key}"] = values[-1]
            out[f"best {key}"] = max(values)
    out["traffic MB"] = (last.get("total-train-bytes-down", 0) + last.get("total-train-bytes-up", 0)) / 1e6
    out["wall s"] = last.get("wall-time", 0.0)
    return out


def table(rows: list[dict[str, Any]]) -> str:
    columns = list(dict.fromkeys(k for r in rows for k in r))
    columns = [c for c in columns if c not in ("traffic MB", "wall s")] + ["traffic MB", "wall s"]
    cells = [[f"{r[c]:.4f}" if isinstance(r.get(c), float) and "accuracy" in c else
              f"{r[c]:.1f}" if isinstance(r.get(c), float) else str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def compare(folders: list[Path], plot_path: Path, out=sys.stdout) -> list[dict[str, Any]]:
    """Print one table of the runs and draw their accuracy against rounds and traffic."""
    from fedapp.runtime.results import ACCURACIES, plot_series  # matplotlib only when plotting

    docs = [load_run(f) for f in folders]
    rows = [summary(f, d) for f, d in zip(folders, docs)]
    print(table(rows), file=out)
    series = []
    for folder, doc in zip(folders, docs):
        key = next((k for k in ACCURACIES if any(k in r for r in doc["rounds"])), None)
        if key is not None:
            series.append((f"{folder.name} ({key})", doc["rounds"], key))
    plot_series(series, plot_path, legend_size="small")
    print(f"plot: {plot_path}", file=out)
    return rows


def new(path: Path, out=sys.stdout) -> Path:
    """Write the app folder ``path`` and say how to run it."""
    from fedapp.runtime.newapp import new_app

    folder = new_app(path)
    print(f"wrote {folder}: pyproject.toml (every run-config key with its default) and .gitignore\n"
          f"run it: fedapp run {path}  (or: flwr run {path} --stream)", file=out)
    return folder


def parser() -> argparse.ArgumentParser:
    from fedapp.runtime.launch import EPILOG, add_arguments

    p = argparse.ArgumentParser(prog="fedapp", description=first_line(__doc__))
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="algorithms with their run-config keys, defaults and docs; the common keys")
    c = sub.add_parser("compare", help="one table and one plot of several runs' results folders")
    c.add_argument("runs", nargs="+", type=Path, help="results folders (results-dir/run-name)")
    c.add_argument("--plot", type=Path, default=Path("compare.png"), help="where to draw (default compare.png)")
    n = sub.add_parser("new", help="write a Flower app folder of fedapp's ServerApp and ClientApp")
    n.add_argument("name", type=Path, help="the folder to write; its last part names the app")
    r = sub.add_parser("run", help="run a Flower app folder on a local simulation of its own, then clean up",
                       epilog=EPILOG)
    r.add_argument("app", nargs="?", type=Path, default=Path("."), help="the app folder (default: this folder)")
    add_arguments(r)
    return p


def main(argv: list[str] | None = None) -> None:
    from fedapp.core.config import ConfigError
    from fedapp.runtime.launch import run_app

    a = parser().parse_args(argv)
    if a.command == "list":
        list_algorithms()
    elif a.command == "compare":
        compare(a.runs, a.plot)
    elif a.command == "run":
        run_app(a)
    else:
        try:
            new(a.name)
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)


if __name__ == "__main__":
    main()
