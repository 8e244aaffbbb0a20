"""fedapp's command line: ``python -m fedapp list`` and ``python -m fedapp compare RUN_DIR...``.

``list`` prints every algorithm from the registry with its own run-config keys (defaults and
one-line docs) and the common keys; ``compare`` puts several runs' results folders in one
table and one plot (accuracy against rounds and against training traffic).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fedapp.runtime.results import ACCURACIES  # in order of preference: a run's headline metric is the first it has


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
    from fedapp.runtime.results import plot_series  # matplotlib only when plotting

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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m fedapp", description=first_line(__doc__))
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="algorithms with their run-config keys, defaults and docs; the common keys")
    c = sub.add_parser("compare", help="one table and one plot of several runs' results folders")
    c.add_argument("runs", nargs="+", type=Path, help="results folders (results-dir/run-name)")
    c.add_argument("--plot", type=Path, default=Path("compare.png"), help="where to draw (default compare.png)")
    a = p.parse_args(argv)
    if a.command == "list":
        list_algorithms()
    else:
        compare(a.runs, a.plot)


if __name__ == "__main__":
    main()
