"""Per-run results: rows per round as JSON and CSV, plots and checkpoints, rewritten after every round.

Files are written atomically (temporary file, then rename), so a run stopped at any
moment leaves every completed round on disk, and a checkpoint to resume from.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from logging import WARNING
from pathlib import Path
from typing import Any

from flwr.common.logger import log

from fedapp import checkpoint
from fedapp.config import RunConfig


def atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def run_dir(cfg: RunConfig) -> Path:
    """results-dir/run-name, created. A folder that holds another run's files is never written
    to: the new run gets run-name-2 (-3, ...) and says so. Only a run resumed from the
    checkpoint in that folder (``resume-from``) goes on writing there."""
    name = cfg.run_name or f"{cfg.strategy}-{cfg.dataset}-{time.strftime('%Y%m%d-%H%M%S')}"
    base = Path(cfg.results_dir).expanduser() / name
    if cfg.resume_from:
        source = Path(cfg.resume_from).expanduser()
        if (source.parent if source.suffix == ".pt" else source).resolve() == base.resolve():
            return base
    path, k = base, 1
    while True:
        try:
            path.mkdir(parents=True)  # atomic: two runs starting together never share a folder
            break
        except FileExistsError:
            if not any(path.iterdir()):
                break
        k += 1
        path = base.with_name(f"{name}-{k}")
    if path != base:
        log(WARNING, "results folder %s holds another run: this run writes to %s", base, path)
    return path


class ResultsWriter:
    """Writes ``rounds.json``, ``rounds.csv``, ``plot.png`` and ``checkpoint.pt`` under
    results-dir/run-name; ``rows`` are those of a resumed run's earlier rounds."""

    def __init__(self, cfg: RunConfig, path: Path | None = None, rows: list[dict[str, Any]] | None = None):
        self.cfg = cfg
        self.path = path or run_dir(cfg)
        self.path.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = list(rows or [])
        self.extra: dict[str, Any] = {}

    def add(self, row: dict[str, Any], strategy=None) -> None:
        self.rows.append(row)
        if strategy is not None:  # run-key: the name of this run's client state files at the sites
            self.extra = {"run-key": strategy.run_key,
                          **(strategy.extra_results() if hasattr(strategy, "extra_results") else {})}
        self.flush()
        if strategy is not None and checkpoint.due(self.cfg, row["round"]):
            checkpoint.save(strategy, self.path / checkpoint.FILENAME, row["round"])

    def flush(self) -> None:
        doc = {"config": self.cfg.as_dict(), "rounds": self.rows, **self.extra}
        atomic_write(self.path / "rounds.json", json.dumps(doc, indent=1, default=float).encode())
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        buf = io.StringIO()
        w = csv.DictWriter(buf, columns)
        w.writeheader()
        for row in self.rows:
            w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()})
        atomic_write(self.path / "rounds.csv", buf.getvalue().encode())

    def close(self, strategy=None) -> None:
        if self.rows:
            plot(self.rows, self.path / "plot.png", title=f"{self.cfg.strategy} on {self.cfg.dataset}")


def plot(rows: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Accuracy against rounds and against cumulative bytes (both directions)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key in ("central-accuracy", "fed-accuracy", "fed-seen-accuracy", "fed-unseen-accuracy"):
        pts = [(r["round"], r.get("total-train-bytes-down", 0) + r.get("total-train-bytes-up", 0), r[key])
               for r in rows if key in r]
        if not pts:
            continue
        rounds, nbytes, acc = zip(*pts)
        axes[0].plot(rounds, acc, marker=".", label=key)
        axes[1].plot([b / 1e6 for b in nbytes], acc, marker=".", label=key)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("training traffic, MB (up + down)")
    for ax in axes:
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write(path, buf.getvalue())
