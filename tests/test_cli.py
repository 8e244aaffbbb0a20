"""python -m fedapp list / compare, and the per-client and partition files of a results folder."""

import csv
import io
import json

import numpy as np
import pytest

from fedapp.__main__ import compare, list_algorithms
from fedapp.core.config import COMMON_KEYS
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import dataset, partitions
from fedapp.runtime.inprocess import run_local
from fedapp.runtime.registry import algorithms


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_list_shows_every_algorithm_with_its_keys_and_defaults():
    out = io.StringIO()
    list_algorithms(out)
    text = out.getvalue()
    for name, spec in algorithms().items():
        assert f"\n{name}  (" in f"\n{text}"
        for key in spec.keys:
            assert f"    {spec.prefix}.{key.name} = {key.default!r}: {key.doc}" in text
    assert "    fedprox.proximal-mu = 0.01: Proximal coefficient mu." in text
    assert all(f"    {k.name} = {k.default!r}: {k.doc}" in text for k in COMMON_KEYS)


@pytest.fixture
def two_runs(tmp_path, small_config):
    base = {**small_config, "unseen-fraction": 0.25, "partition": "natural"}
    run_local({**base, "run-name": "avg"})
    run_local({**base, "run-name": "prox", "strategy": "fedprox"})
    return tmp_path / "results"


def test_clients_csv_holds_each_clients_evaluation(two_runs):
    rows = json.loads((two_runs / "avg" / "rounds.json").read_text())["rounds"]
    clients = read_csv(two_runs / "avg" / "clients.csv")
    assert list(clients[0]) == ["round", "partition-id", "client", "accuracy", "loss", "examples"]
    for row in rows[1:]:
        mine = [c for c in clients if int(c["round"]) == row["round"]]
        assert sorted(int(c["partition-id"]) for c in mine) == [0, 1, 2, 3]
        assert sum(c["client"] == "new" for c in mine) == 1  # unseen-fraction 0.25 of 4
        n = np.array([int(c["examples"]) for c in mine])
        acc = np.array([float(c["accuracy"]) for c in mine])
        assert (acc * n).sum() / n.sum() == pytest.approx(row["fed-accuracy"], abs=1e-12)


def test_partition_csv_counts_each_clients_labels(two_runs, small_config):
    cfg = parse_run_config({**small_config, "unseen-fraction": 0.25})
    labels = dataset(cfg).train_y.numpy()
    counts = read_csv(two_runs / "avg" / "partition.csv")
    for pid, part in enumerate(partitions(cfg)):
        expected = np.bincount(labels[part], minlength=10)
        assert [int(counts[pid][f"class-{c}"]) for c in range(10)] == expected.tolist()
        assert int(counts[pid]["total"]) == len(part)
    assert (two_runs / "avg" / "partition.png").stat().st_size > 0


def test_resumed_run_keeps_the_clients_rows_of_its_checkpoint(two_runs, small_config):
    run_local({**small_config, "unseen-fraction": 0.25, "run-name": "avg", "num-server-rounds": 3,
               "resume-from": str(two_runs / "avg")})
    rounds = [int(c["round"]) for c in read_csv(two_runs / "avg" / "clients.csv")]
    assert rounds == [1] * 4 + [2] * 4 + [3] * 4


def test_compare_prints_one_table_and_draws_one_plot(two_runs, tmp_path):
    out = io.StringIO()
    rows = compare([two_runs / "avg", two_runs / "prox"], tmp_path / "cmp.png", out)
    lines = out.getvalue().splitlines()
    assert lines[0].split()[:4] == ["run", "strategy", "dataset", "rounds"]
    for name, strategy, row in zip(("avg", "prox"), ("fedavg", "fedprox"), rows):
        final = json.loads((two_runs / name / "rounds.json").read_text())["rounds"][-1]
        assert row["final central-accuracy"] == final["central-accuracy"]
        assert any(line.split()[:3] == [name, strategy, "synthetic"] and f"{final['central-accuracy']:.4f}" in line
                   for line in lines)
    assert (tmp_path / "cmp.png").stat().st_size > 0


def test_tensorboard_logs_each_rounds_metrics(tmp_path, small_config):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_local({**small_config, "tensorboard": True})
    folder = tmp_path / "results" / "t"
    rows = json.loads((folder / "rounds.json").read_text())["rounds"]
    events = EventAccumulator(str(folder / "tensorboard"))
    events.Reload()
    logged = [(e.step, e.value) for e in events.Scalars("central-accuracy")]
    assert logged == [(r["round"], pytest.approx(r["central-accuracy"], abs=1e-6)) for r in rows]


def test_tensorboard_without_the_package_is_a_config_error(monkeypatch):
    import importlib.util

    from fedapp.core.config import ConfigError
    from fedapp.runtime.preflight import check

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError, match=r"'tensorboard' = true needs the tensorboard package"):
        check({"tensorboard": True})


def test_run_config_file_combines_with_overrides(tmp_path):
    from fedapp.core.config import ConfigError
    from fedapp.runtime.launch import run_config_overrides

    (tmp_path / "s.toml").write_text('strategy = "fedprox"\nnum-server-rounds = 50\n[fedprox]\nproximal-mu = 0.1\n')
    got = run_config_overrides([f"num-clients=10 {tmp_path / 's.toml'}", "num-server-rounds=5 run-name='a b'"])
    assert got == {"num-clients": 10, "strategy": "fedprox", "num-server-rounds": 5, "fedprox.proximal-mu": 0.1,
                   "run-name": "a b"}
    (tmp_path / "broken.toml").write_text("a = [\n")
    for bad in ("lr=abc", "hello", str(tmp_path / "missing.toml"), str(tmp_path / "broken.toml")):
        with pytest.raises(ConfigError, match="--run-config"):
            run_config_overrides(bad)


@pytest.mark.parametrize("status, code", [("finished:completed", 0), ("finished:failed", 1), ("finished:stopped", 1)])
def test_launcher_exit_status_follows_the_runs_final_status(monkeypatch, capsys, status, code):
    import fedapp.runtime.launch

    monkeypatch.setattr(fedapp.runtime.launch.signal, "signal", lambda *a: None)  # keep pytest's handlers
    monkeypatch.setattr(fedapp.runtime.launch, "launch",
                        lambda *a, **kw: {"run-id": "7", "status": status, "elapsed": 1.0, "results": "results/r"})
    with pytest.raises(SystemExit) as done:
        fedapp.runtime.launch.main([])
    assert done.value.code == code
    assert capsys.readouterr().out == f"run 7: {status} in 1.0 s; results in results/r\n"


def test_status_queries_back_off_while_the_log_stream_is_open(monkeypatch):
    """Each status query is a `flwr ls` process (about 1.5 CPU s): while the run's log stream is open
    the launcher waits 30 s before the first, then twice as long each time, at most 300 s; the stream's
    end (the run finished) is answered at once, and a deadline cuts the wait short."""
    import itertools
    import subprocess

    import fedapp.runtime.launch as launch

    assert list(itertools.islice(launch.status_waits(), 6)) == [30.0, 60.0, 120.0, 240.0, 300.0, 300.0]

    class Stream:  # the `flwr log --stream` process: still open, or ended
        def __init__(self, open_):
            self.open, self.waits = open_, []

        def poll(self):
            return None if self.open else 0

        def wait(self, timeout):
            self.waits.append(timeout)
            raise subprocess.TimeoutExpired("flwr log", timeout)

    monkeypatch.setattr(launch, "run_status", lambda run_id, env: {"status": "running"})
    stream = Stream(True)
    launch.wait_for_status("7", {}, stream, None, 120.0)
    monkeypatch.setattr(launch.time, "time", lambda: 1000.0)  # a clock standing still: the deadline 5 s ahead
    launch.wait_for_status("7", {}, stream, 1005.0, 120.0)
    assert stream.waits == [120.0, 5.0]
    ended = Stream(False)
    monkeypatch.setattr(launch.time, "sleep", lambda s: ended.waits.append(s))
    launch.wait_for_status("7", {}, ended, None, 120.0)
    assert ended.waits == [1.0]  # gone before the run finished: asked again a second later
