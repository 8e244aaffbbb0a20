"""Per-run results: rows per round as JSON and CSV, plots and checkpoints, rewritten after every round,
and the model files.

Files are written atomically (temporary file, then rename), so a run stopped at any
moment leaves every completed round on disk, and a checkpoint to resume from.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
import uuid
from collections.abc import Mapping
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.common import log

from fedapp.runtime import checkpoint, tracking
from fedapp.core.config import RunConfig
from fedapp.core.files import atomic_write
from fedapp.server.hooks import own_hook


def portable(name: str) -> str:
    """``name`` with every character but ASCII letters, digits, '.', '_' and '-' as '-': a file name
    on every system (``flwr:FedYogi`` -> ``flwr-FedYogi``, ``hf:user/data`` -> ``hf-user-data``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", name)


def run_name(cfg: RunConfig) -> str:
    """The run's folder name: ``run-name``, else strategy-dataset-timestamp (made ``portable``)."""
    return cfg.run_name or portable(f"{cfg.strategy}-{cfg.dataset}-{time.strftime('%Y%m%d-%H%M%S')}")


def own_resume(cfg: RunConfig, folder: Path) -> bool:
    """Whether ``cfg`` resumes the run whose folder is ``folder`` (``resume-from`` names it or its
    checkpoint): that run goes on writing there."""
    if not cfg.resume_from:
        return False
    source = Path(cfg.resume_from).expanduser()
    return (source.parent if source.suffix == ".pt" else source).resolve() == folder.resolve()


def run_dir(cfg: RunConfig) -> Path:
    """results-dir/run-name, created by this run alone: a folder that exists already, even empty
    (another run may have just created it), is never taken over; the new run gets run-name-2
    (-3, ...) and says so. Only a run resumed from the checkpoint in that folder (``resume-from``)
    goes on writing there."""
    name = run_name(cfg)
    base = Path(cfg.results_dir).expanduser() / name
    if own_resume(cfg, base):
        return base
    base.parent.mkdir(parents=True, exist_ok=True)
    path, k = base, 1
    while True:
        try:
            path.mkdir()  # atomic: of runs starting together exactly one creates each folder
            break
        except FileExistsError:
            k += 1
            path = base.with_name(f"{name}-{k}")
    if path != base:
        log(WARNING, "results folder %s exists (another run's): this run writes to %s", base, path)
    return path


class ResultsWriter:
    """Writes ``rounds.json``, ``rounds.csv``, ``plot.png``, ``checkpoint.pt``, ``model.pt`` and
    ``best-model.pt`` under results-dir/run-name, and feeds the run's trackers (``tracking``);
    ``rows`` are those of a resumed run's earlier rounds, ``run_key`` the server's name of the run
    (``FedStrategy.run_key``), which keys its tracker runs."""

    def __init__(self, cfg: RunConfig, path: Path | None = None, rows: list[dict[str, Any]] | None = None,
                 run_key: str | None = None):
        self.cfg = cfg
        self.path = path or run_dir(cfg)
        self.path.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = list(rows or [])
        #: round of the last complete checkpoint.pt in the folder (None: none yet)
        self.checkpointed: int | None = self.rows[-1]["round"] if self.rows else None
        self.extra: dict[str, Any] = {}
        self._next_plot = time.time() + PLOT_EVERY_S
        # clients.csv: a resumed run keeps the rows of the rounds its checkpoint holds, a new one none
        last = self.rows[-1]["round"] if self.rows else -1
        kept = [r for r in _read_csv(self.path / CLIENTS_CSV) if int(r["round"]) <= last]
        self._client_rows: list[dict[str, Any]] = kept
        #: the best central accuracy so far, the one of best-model.pt (a resumed run's earlier rounds count)
        self.best = max((r["central-accuracy"] for r in self.rows if "central-accuracy" in r), default=None)
        run_key = run_key or f"{self.path.name}-{uuid.uuid4().hex[:12]}"
        self.trackers = tracking.start(cfg, self.path, run_key, last + 1)

    def add_clients(self, server_round: int, evals) -> None:
        """One clients.csv row per client evaluated in ``server_round``."""
        for pid, unseen, m in sorted(evals, key=lambda e: e[0]):
            self._client_rows.append({"round": server_round, "partition-id": pid, "client": "new" if unseen else "seen",
                                      "accuracy": m.get("accuracy"), "loss": m.get("loss"),
                                      "examples": int(m["num-examples"])})
        atomic_write(self.path / CLIENTS_CSV, _csv(self._client_rows, CLIENT_COLUMNS))

    def write_partition(self, labels, parts, num_classes: int, classes: tuple[str, ...] | None = None) -> None:
        """``partition.csv`` (examples per client and class: a column ``class-<label>`` per class, the
        labels ``classes`` where the data named them, else 0, 1, ...) and ``partition.png``, the figure of
        flwr-datasets' ``plot_label_distributions`` (bar type), drawn from the same counts."""
        counts = np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts])
        names = list(classes or map(str, range(num_classes)))
        rows = [{"partition-id": i, **{f"class-{c}": int(n) for c, n in zip(names, row)}, "total": int(row.sum())}
                for i, row in enumerate(counts)]
        atomic_write(self.path / "partition.csv", _csv(rows, list(rows[0])))
        buf = io.BytesIO()
        fig = partition_figure(counts, f"{self.cfg.partition} partition of {self.cfg.dataset}", names)
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        atomic_write(self.path / "partition.png", buf.getvalue())

    def add(self, row: dict[str, Any], strategy=None) -> None:
        self.rows.append(row)
        if strategy is not None:  # run-key: the name of this run's client state files at the sites
            self.extra = {"run-key": strategy.run_key,
                          **(extra() if (extra := own_hook(strategy, "extra_results")) else {})}
        self.track("row", row["round"], tracking.metrics(row))
        if strategy is not None and getattr(strategy, "client_evals", None):
            self.add_clients(row["round"], strategy.client_evals)
            strategy.client_evals = []
        self.flush()
        if strategy is None:
            return
        last, due = row["round"] >= strategy.cfg.num_server_rounds, checkpoint.due(self.cfg, row["round"])
        if due:
            checkpoint.save(strategy, self.path / checkpoint.FILENAME, row["round"])
            self.checkpointed = row["round"]
        self.save_models(row, strategy, last or due)
        if last:
            self.track("files", [p for p in (self.path / MODEL, self.path / BEST_MODEL) if p.is_file()])
            self.close(failed=False)

    def save_models(self, row: dict[str, Any], strategy, final: bool) -> None:
        """``best-model.pt``: the model of the row's central evaluation where its accuracy is the run's
        best so far (the first of equals); ``model.pt`` (``final``: after the last round and with each
        checkpoint, so a stopped run's is its checkpoint's): what ``strategy.model_state`` gives."""
        accuracy = row.get("central-accuracy")
        if accuracy is not None and (self.best is None or accuracy > self.best):
            checkpoint.write(self.path / BEST_MODEL, _plain(strategy.central_state()))
            self.best = accuracy
        state = strategy.model_state() if final else None
        if state:  # HCCT holds no client's model before its first round
            checkpoint.write(self.path / MODEL, _plain(state))

    def close(self, failed: bool = True) -> None:
        """End the trackers' runs; ``failed`` where the run stopped before its last round (the last
        round's row ends them as finished)."""
        self.track("close", failed)
        self.trackers = []

    def track(self, call: str, *args) -> None:
        """Call ``call`` (``tracking.Tracker``'s row, files or close) on every tracker. One that fails
        (its server out of reach, its disk full) is dropped with a warning: the run goes on, the
        results files are its record."""
        for tracker in list(self.trackers):
            try:
                getattr(tracker, call)(*args)
            except Exception as err:  # each tracker's own errors, of many kinds
                log(WARNING, "%s: %s failed (%s); the run goes on without it", type(tracker).__name__, call,
                    tracking.reason(err))
                self.trackers.remove(tracker)

    def flush(self) -> None:
        doc = {"config": self.cfg.as_dict(), "rounds": self.rows, **self.extra}
        atomic_write(self.path / "rounds.json", json.dumps(doc, indent=1, default=float).encode())
        columns = list(dict.fromkeys(k for row in self.rows for k in row))
        atomic_write(self.path / "rounds.csv", _csv(self.rows, columns))
        # drawing takes 0.2-0.5 s of the server's thread, between rounds that may last a second or
        # two: the plot is redrawn at most every PLOT_EVERY_S (or ten drawing times) and always after
        # the last round, so a run shorter than that draws once; rounds.json above is the record,
        # rewritten every round (`python -m fedapp compare RUN_DIR` draws a stopped run's plot)
        last = self.rows[-1]["round"] if self.rows else 0
        if self.rows and (time.time() >= self._next_plot or last >= self.cfg.num_server_rounds):
            t0 = time.time()
            plot(self.rows, self.path / "plot.png", title=f"{self.cfg.strategy} on {self.cfg.dataset}")
            self._next_plot = time.time() + max(PLOT_EVERY_S, 10 * (time.time() - t0))


#: seconds between two drawings of a run's plot.png (the last round always draws it)
PLOT_EVERY_S = 30.0
CLIENTS_CSV = "clients.csv"
#: the final model (what the strategy's ``model_state`` gives) and the best one by central accuracy
MODEL, BEST_MODEL = "model.pt", "best-model.pt"
CLIENT_COLUMNS = ["round", "partition-id", "client", "accuracy", "loss", "examples"]


def _csv(rows: list[dict[str, Any]], columns: list[str]) -> bytes:
    buf = io.StringIO()
    w = csv.DictWriter(buf, columns)
    w.writeheader()
    for row in rows:
        w.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in row.items()})
    return buf.getvalue().encode()


def _plain(state: Mapping[str, Any]) -> dict[str, Any]:
    """A state dict (or a dict of them) with its tensors detached and on the CPU, so that
    ``torch.load(..., weights_only=True)`` reads it on any machine."""
    return {k: _plain(v) if isinstance(v, Mapping) else v.detach().cpu() if isinstance(v, torch.Tensor) else v
            for k, v in state.items()}


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


#: the accuracy columns a results row may carry, in the order plots draw them
ACCURACIES = ("central-accuracy", "fed-accuracy", "fed-seen-accuracy", "fed-unseen-accuracy")


def partition_figure(counts: np.ndarray, title: str, names: list[str] | None = None):
    """Stacked bars of examples per class (columns of ``counts``, named ``names``, else 0, 1, ...)
    for each client (rows), as
    flwr-datasets' ``plot_label_distributions`` draws them (its bar plot: RdYlGn colours, the
    legend outside on the right with the last class on top, every other client id from 21 clients
    on). That function counts the labels again by iterating a Hugging Face dataset row by row:
    1.3-1.45 CPU s for CIFAR-10's 50,000 labels, on the ServerApp's way to round 1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    num_clients, num_classes = counts.shape
    names = names or [str(c) for c in range(num_classes)]
    x = np.arange(num_clients)
    cmap = plt.get_cmap("RdYlGn")
    bottom = np.zeros(num_clients, dtype=np.int64)
    for c, color in enumerate(cmap(np.linspace(0, 1, num_classes))):
        ax.bar(x, counts[:, c], 0.5, bottom=bottom, color=color, label=names[c])
        bottom = bottom + counts[:, c]
    ax.set_xticks(x, [str(i) for i in x], rotation=0)
    ax.set_xlim(-0.5, num_clients - 0.5)
    ax.set(title=title, xlabel="Partition ID", ylabel="Count")
    if num_classes <= 20:
        handles, labels = ax.get_legend_handles_labels()
        shift = min(0.05 + max(map(len, names)) / 100, 0.15)
        fig.legend(handles[::-1], labels[::-1], title="Labels", loc="outside center right",
                   bbox_to_anchor=(1.0 + shift, 0.5))
    if num_clients > 20:
        for tick in ax.get_xticklabels()[1::2]:
            tick.set_visible(False)
    return fig


def plot(rows: list[dict[str, Any]], path: Path, title: str = "") -> None:
    """Accuracy against rounds and against cumulative bytes (both directions)."""
    plot_series([(key, rows, key) for key in ACCURACIES], path, title)


def plot_series(series: list[tuple[str, list[dict[str, Any]], str]], path: Path, title: str = "",
                legend_size: str = "medium") -> None:
    """One line per (label, rows, accuracy key) against rounds and against cumulative bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for label, rows, key in series:
        pts = [(r["round"], r.get("total-train-bytes-down", 0) + r.get("total-train-bytes-up", 0), r[key])
               for r in rows if key in r]
        if not pts:
            continue
        rounds, nbytes, acc = zip(*pts)
        axes[0].plot(rounds, acc, marker=".", label=label)
        axes[1].plot([b / 1e6 for b in nbytes], acc, marker=".", label=label)
    axes[0].set_xlabel("round")
    axes[1].set_xlabel("training traffic, MB (up + down)")
    for ax in axes:
        ax.set_ylabel("accuracy")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:  # before the first evaluation there is no line to name
            ax.legend(fontsize=legend_size)
    fig.suptitle(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write(path, buf.getvalue())
