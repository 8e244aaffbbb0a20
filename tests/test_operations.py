"""Operations that lose nothing, in process: one folder per run, full and unwritable disks, runs
that learn nothing, and housekeeping (client state removed at the end, keys of other algorithms).
The real-process ones are in test_deployment_resume.py (a SuperLink killed mid-round) and
test_launch_isolation.py (launches side by side)."""

from __future__ import annotations

import errno
import json
import logging
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from flwr.app import MessageType

import fedapp.core.files
from fedapp.runtime import checkpoint, preflight
from fedapp.runtime.client_app import app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.runtime.results import ResultsWriter, run_dir
from test_reliability import same_rows, tensors


# ---- one folder per run ------------------------------------------------------------------------
def test_runs_never_share_a_folder(tmp_path):
    """Two runs of one name created at the same instant, 200 times: never one folder for both,
    and an empty folder that exists already (a run still waiting for its nodes) is not taken
    over; only the run resumed from a folder's checkpoint writes there."""
    cfg = parse_run_config({"results-dir": str(tmp_path), "run-name": "same"})
    (tmp_path / "same").mkdir()  # empty: another run created it and waits for its nodes
    barrier = threading.Barrier(2)

    def start(_):
        barrier.wait()
        return run_dir(cfg)

    made = []
    with ThreadPoolExecutor(2) as pool:
        for _ in range(200):
            a, b = pool.map(start, range(2))
            assert a != b
            made += [a, b]
    assert len(set(made)) == 400 and tmp_path / "same" not in made
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["same", *(p.name for p in made)])
    assert run_dir(cfg.replace(resume_from=str(tmp_path / "same"))) == tmp_path / "same"  # its own resume


# ---- full and unwritable disks -----------------------------------------------------------------
class Disk:
    """A small filesystem that can be filled: a 2 MiB tmpfs where this process may mount one, else
    the same failure by hand (every file's flush to disk fails with ENOSPC while it is full)."""

    def __init__(self, path, monkeypatch):
        self.path, self.monkeypatch, self.full = path, monkeypatch, False
        path.mkdir()
        self.tmpfs = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(path)],
                                    capture_output=True).returncode == 0
        if not self.tmpfs:
            fsync = fedapp.core.files.os.fsync

            def failing(fd):
                if self.full:
                    raise OSError(errno.ENOSPC, "No space left on device")
                fsync(fd)
            monkeypatch.setattr(fedapp.core.files.os, "fsync", failing)

    def fill(self):
        self.full = True
        if self.tmpfs:
            with open(self.path / "ballast", "wb") as f:
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass

    def free(self):
        self.full = False
        if self.tmpfs:
            (self.path / "ballast").unlink()

    def close(self):
        if self.tmpfs:
            subprocess.run(["umount", str(self.path)], check=True)


@pytest.fixture
def disk(tmp_path, monkeypatch):
    d = Disk(tmp_path / "disk", monkeypatch)
    yield d
    d.close()


def test_full_disk_keeps_last_checkpoint(disk, small_config, tmp_path, monkeypatch):
    """The disk fills up after round 1: the run stops with one message naming the file that could
    not be written, the space left and the last complete checkpoint; no temporary file stays; the
    checkpoint is round 1's, whole; once space is freed the run resumes from it and ends as the
    run that never lacked space."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    run_config = {**small_config, "strategy": "scaffold", "num-server-rounds": 3, "fraction-train": 0.5,
                  "results-dir": str(disk.path)}
    full = run_local({**run_config, "results-dir": str(tmp_path / "roomy")})
    add = ResultsWriter.add

    def add_filling(self, row, strategy=None):
        if row["round"] == 2:
            disk.fill()
        add(self, row, strategy)
    monkeypatch.setattr(ResultsWriter, "add", add_filling)
    grid = InProcessGrid(app, 4, run_config)
    folder = disk.path / "t"
    with pytest.raises(RuntimeError, match=rf"no space left to write {folder}/[a-z.]+ \(.* bytes free "
                       rf"there\): the run stops; its last complete checkpoint is round 1: free space and resume "
                       rf"with resume-from='{folder}'"):
        run_local(run_config, grid=grid)
    assert sorted(p.name for p in folder.iterdir()) == ["best-model.pt", "checkpoint.pt", "clients.csv", "model.pt",
                                                        "partition.csv", "partition.png", "rounds.csv", "rounds.json"]
    assert torch.load(folder / "checkpoint.pt", weights_only=False)["round"] == 1
    monkeypatch.setattr(ResultsWriter, "add", add)
    disk.free()
    resumed_config = {**run_config, "resume-from": str(folder)}
    grid2 = InProcessGrid(app, 4, resumed_config)
    for node, ctx in grid2.contexts.items():
        ctx.state = grid.contexts[node].state  # the clients kept theirs (SuperNodes' contexts)
    resumed = run_local(resumed_config, grid=grid2)
    assert same_rows(resumed.history, full.history)
    assert all(torch.equal(a, b) for a, b in zip(tensors(resumed), tensors(full), strict=True))


def test_a_run_whose_first_checkpoint_fails_can_restart(disk, small_config, monkeypatch):
    """A disk full before round 1: the run names the file and says no checkpoint was written."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    monkeypatch.setattr(checkpoint, "due", lambda cfg, rnd: disk.fill() or True)
    with pytest.raises(RuntimeError, match=r"no space left to write .*checkpoint\.pt .*no checkpoint was written"):
        run_local({**small_config, "results-dir": str(disk.path)})
    assert not [p for p in (disk.path / "t").iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_an_unwritable_results_dir_is_one_line(where, small_config, tmp_path):
    (tmp_path / "f").write_text("")
    bad = str(tmp_path / "f") if where == "a file" else str(tmp_path / "f" / "results")
    with pytest.raises(ConfigError, match=rf"^run config 'results-dir' = '{bad}': cannot write there \(.+\)$"):
        preflight.check({**small_config, "results-dir": bad})
    with pytest.raises(ConfigError, match="'results-dir'"):  # the ServerApp checks it too
        run_local({**small_config, "results-dir": bad})


# ---- runs that learn nothing -------------------------------------------------------------------
def forgetful(from_round: int):
    """A ClientApp whose training replies omit ``partition-id`` from round ``from_round`` on:
    valid otherwise, but every one is dropped (``wrong-partition-id``)."""
    def client_app(msg, context):
        reply = app(msg, context)
        config = msg.content["config"] if "config" in msg.content.config_records else {}
        if msg.metadata.message_type == MessageType.TRAIN and config["server-round"] >= from_round:
            del reply.content["metrics"]["partition-id"]
        return reply
    return client_app


def test_a_first_round_without_valid_replies_fails_the_run(small_config):
    with pytest.raises(RuntimeError, match=r"^round 1: no valid training reply in its first round, so the run "
                                           r"stops; dropped replies by reason: wrong-partition-id: 4$"):
        run_local(small_config, grid=InProcessGrid(forgetful(1), 4, small_config))


def test_max_empty_rounds_in_a_row_fail_the_run(small_config, monkeypatch):
    """From round 2 every reply is dropped: with max-empty-rounds = 2 the run stops in round 3
    with the reasons counted; with 0 it runs to the end, every later round skipped."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    cfg = {**small_config, "num-server-rounds": 5, "max-empty-rounds": 2}
    with pytest.raises(RuntimeError, match=r"^round 3: no valid training reply in 2 rounds in a row "
                                           r"\(max-empty-rounds\), so the run stops; dropped replies by reason: "
                                           r"wrong-partition-id: 4$"):
        run_local(cfg, grid=InProcessGrid(forgetful(2), 4, cfg))
    folder = Path(small_config["results-dir"]) / small_config["run-name"]
    rows = json.loads((folder / "rounds.json").read_text())["rounds"]
    assert [(r["round"], r.get("replies")) for r in rows] == [(0, None), (1, 4), (2, 0)]
    off = {**cfg, "max-empty-rounds": 0, "run-name": "off"}
    strategy = run_local(off, grid=InProcessGrid(forgetful(2), 4, off))
    assert [r.get("skipped") for r in strategy.history[1:]] == [None, 1, 1, 1, 1]


# ---- housekeeping ------------------------------------------------------------------------------
@pytest.mark.parametrize("keep", [False, True])
def test_client_state_is_removed_after_the_run_unless_kept(keep, small_config, tmp_path):
    """At the end of a run every site's state files (state-dir, spilled state) are gone, and with
    them the contexts' references to spilled state; keep-client-state=true keeps the last version
    of each client's state, and only that."""
    cfg = {**small_config, "strategy": "scaffold", "fraction-train": 0.5, "keep-client-state": keep,
           "state-spill-dir": str(tmp_path / "spill"), "state-memory-mb": 1e-6}
    nodes = [{"partition-id": i, "num-partitions": 4, **({"state-dir": str(tmp_path / "state")} if i < 2 else {})}
             for i in range(4)]
    grid = InProcessGrid(app, 4, cfg, nodes)
    strategy = run_local(cfg, grid=grid)
    files = sorted(p.name for d in ("state", "spill") if (tmp_path / d).is_dir() for p in (tmp_path / d).iterdir())
    held = [ctx for ctx in grid.contexts.values() if "state-versions" in ctx.state]
    if keep:
        assert files == sorted(f"{strategy.run_key}-scaffold-p{pid}-r{r}.pt" for pid, r in strategy.state_rounds.items())
        assert len(held) == len(strategy.state_rounds) >= 2
    else:
        assert files == [] and held == [] and not any(ctx.state.array_records for ctx in grid.contexts.values())


def test_a_key_of_another_algorithm_is_warned_in_one_line(small_config, caplog):
    with caplog.at_level(logging.WARNING):
        preflight.check({**small_config, "strategy": "fedavg", "fedprox.proximal-mu": 0.1, "fedavg.lr-decay": 0.9,
                         "scaffold.server-lr": 1.0})  # its own key, and another's at its default: no word
    lines = [r.getMessage() for r in caplog.records if "other algorithms" in r.getMessage()]
    assert lines == ["run config key(s) fedprox.proximal-mu=0.1 belong to other algorithms: no effect with "
                     "strategy 'fedavg'"]
