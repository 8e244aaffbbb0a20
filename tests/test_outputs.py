"""What a run leaves its user: the model files, classes named by their labels, portable folder
names, and the rounds logged to an experiment tracker (MLflow, W&B)."""

from __future__ import annotations

import json
import re
import struct
import time
from pathlib import Path

import pytest
import torch

from fedapp.core.config import ConfigError
from fedapp.core.experiment import dataset
from fedapp.core.training import evaluate
from fedapp.runtime.inprocess import run_local
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.results import run_name

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "own-model"


def plants(tmp: Path, **extra) -> dict:
    """docs/own-model-and-data.md's run: the user's module mynet on the plants table (labels fern,
    moss, reed), one client per site."""
    return {"model": "mynet:build", "dataset": "table", "data-dir": str(EXAMPLE / "data"), "label-column": "kind",
            "client-column": "site", "partition": "natural", "num-clients": 4, "num-server-rounds": 3,
            "local-steps": 10, "lr": 0.5, "seed": 1, "results-dir": str(tmp / "results"), "run-name": "r", **extra}


@pytest.fixture(scope="module")
def user_package(tmp_path_factory):
    """The example's package importable (as PYTHONPATH makes it for a user), a private cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FEDAPP_CACHE", str(tmp_path_factory.mktemp("cache")))
        mp.syspath_prepend(str(EXAMPLE))
        yield


@pytest.fixture(scope="module")
def plants_run(user_package, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plants")
    return run_local(plants(tmp)), tmp / "results" / "r"


def test_model_file_loads_into_the_users_module(plants_run):
    """model.pt is a plain state dict of the final global model: a fresh instance of the user's
    class loads it and scores the run's final central accuracy and loss on the global test set;
    best-model.pt scores the best round's (the first of equal accuracies: round 1 here, whose loss
    is not the last round's)."""
    import mynet

    strategy, folder = plants_run
    rows = strategy.history
    best = max(rows, key=lambda r: r["central-accuracy"])
    assert best["round"] == 1 and best["central-loss"] != rows[-1]["central-loss"]  # two different models
    ds = dataset(strategy.cfg)
    for name, row in (("model.pt", rows[-1]), ("best-model.pt", best)):
        net = mynet.TabularNet(ds.input_shape[0], 3)
        net.load_state_dict(torch.load(folder / name, weights_only=True))
        m = evaluate(net, ds.test_x, ds.test_y, mean=ds.mean, std=ds.std)
        # the loss to float rounding: another test in this process may have changed torch's threads
        assert m["accuracy"] == row["central-accuracy"] and m["loss"] == pytest.approx(row["central-loss"], rel=1e-6)
    final = torch.load(folder / "model.pt", weights_only=True)
    assert all(torch.equal(final[k], v) for k, v in strategy.global_state.items())


def test_results_name_classes_by_their_labels(plants_run):
    """The table's string labels name partition.csv's class columns, in the order of the class indices."""
    strategy, folder = plants_run
    header, *lines = (folder / "partition.csv").read_text().splitlines()
    assert header == "partition-id,class-fern,class-moss,class-reed,total"
    ds = dataset(strategy.cfg)
    counts = [[int(v) for v in line.split(",")[1:4]] for line in lines]
    assert sum(c[1] for c in counts) == int((ds.train_y == 1).sum())  # moss, class index 1
    assert ds.classes == ("fern", "moss", "reed")


def test_run_folder_names_are_portable():
    """Flower's strategies (``flwr:FedYogi``) and hub datasets (``hf:user/data``) make no colon or
    slash in a run's folder name; other names are as they were."""
    name = run_name(parse_run_config({"strategy": "flwr:FedYogi", "dataset": "hf:user/data", "partition": "iid"}))
    assert re.fullmatch(r"flwr-FedYogi-hf-user-data-\d{8}-\d{6}", name)
    assert re.fullmatch(r"fedprox-synthetic-\d{8}-\d{6}", run_name(parse_run_config({"strategy": "fedprox"})))
    assert run_name(parse_run_config({"run-name": "mine"})) == "mine"


def test_personalised_strategy_writes_what_its_server_holds(user_package, tmp_path):
    """PeFLL keeps no single model: its model.pt holds the hypernetwork and the embedding network,
    the server's own at the end of the run; without central evaluation there is no best-model.pt."""
    strategy = run_local(plants(tmp_path, strategy="pefll", **{"num-server-rounds": 1, "pefll.k": 2}))
    saved = torch.load(tmp_path / "results" / "r" / "model.pt", weights_only=True)
    assert saved.keys() == {"hypernetwork", "embedding"}
    for name, net in (("hypernetwork", strategy.hnet), ("embedding", strategy.embed)):
        assert saved[name].keys() == net.state_dict().keys()
        assert all(torch.equal(saved[name][k], v.cpu()) for k, v in net.state_dict().items())
    assert not (tmp_path / "results" / "r" / "best-model.pt").exists()


# ---- trackers ---------------------------------------------------------------------------------
def wandb_records(path: Path):
    """The protobuf records of a W&B run's transaction log (``run-<id>.wandb``): a 7-byte W&B header,
    then LevelDB log records (7-byte header: checksum, length, type) in 32 KiB blocks."""
    from wandb.proto import wandb_internal_pb2

    data, block = path.read_bytes(), 32768
    if len(data) < 7:  # not yet written
        return
    assert data[:4] == b":W&B"
    pos, chunks = 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 or pos + 7 + length > len(data):  # the writer is still at work here
            return
        chunks += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(chunks)
            chunks = b""
            yield record


def logged_rounds(tracker: str, folder: Path) -> tuple[dict[int, dict[str, float]], dict, list[str]]:
    """What the tracker holds of the run in ``folder``: metrics by round, parameters, model files."""
    if tracker == "mlflow":
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{folder.parent / '.mlflow' / 'mlflow.db'}")
        (run,) = client.search_runs([client.get_experiment_by_name("fedapp").experiment_id])  # one run
        assert run.info.run_name == folder.name and run.info.status == "FINISHED"
        rounds: dict[int, dict[str, float]] = {}
        for key in run.data.metrics:
            for m in client.get_metric_history(run.info.run_id, key):
                rounds.setdefault(m.step, {})[key] = m.value
        return rounds, run.data.params, [a.path for a in client.list_artifacts(run.info.run_id)]
    (log,) = folder.glob("wandb/offline-run-*/run-*.wandb")
    # W&B's service process writes the log on its own time: ``finish`` may return before it has
    # written the run's ``exit`` record, on a loaded machine by seconds
    deadline = time.time() + 60
    while "exit" not in (kinds := [r.WhichOneof("record_type") for r in wandb_records(log)]) \
            and time.time() < deadline:
        time.sleep(0.5)
    assert "exit" in kinds, f"W&B's log {log.name} has no exit record after 60 s: {kinds}"
    rounds, config, files = {}, {}, []

    def values(items) -> dict:  # W&B keeps a key in ``key`` or, as a path, in ``nested_key``
        return {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in items}
    for record in wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = values(record.history.item)
            rounds[row["round"]] = {k: v for k, v in row.items() if not k.startswith("_") and k != "round"}
        elif kind == "config":
            config.update(values(record.config.update))
        elif kind == "artifact":
            assert record.artifact.type == "model"
            files += [entry.path for entry in record.artifact.manifest.contents]
    return rounds, config, files


@pytest.mark.parametrize("tracker", ["mlflow", "wandb"])
def test_mlflow_and_wandb_offline(tracker, user_package, tmp_path, monkeypatch):
    """``tracking``: MLflow's local store (results-dir/.mlflow/mlflow.db) and W&B's offline mode hold every
    round's numbers as the rows have them, at step = round, the run config, and the model files."""
    pytest.importorskip(tracker, reason=f"the {tracker} extra is not installed (pip install -e '.[{tracker}]')")
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    strategy = run_local(plants(tmp_path, tracking=tracker, **{"num-server-rounds": 2}))
    rounds, params, files = logged_rounds(tracker, tmp_path / "results" / "r")
    expected = {row["round"]: {k: float(v) for k, v in row.items() if k != "round" and type(v) in (int, float)}
                for row in strategy.history}
    assert sorted(rounds) == [0, 1, 2]
    assert rounds == expected
    assert rounds[2]["central-accuracy"] == strategy.history[-1]["central-accuracy"]
    assert str(params["lr"]) == "0.5" and params["model"] == "mynet:build" and params["tracking"] == tracker
    assert sorted(files) == ["best-model.pt", "model.pt"]
    # the tracker's own files stay hidden: `compare results/*` names the run folders only
    assert [p.name for p in (tmp_path / "results").iterdir() if not p.name.startswith(".")] == ["r"]


def test_a_resumed_run_logs_on_into_its_mlflow_run(user_package, tmp_path, monkeypatch):
    """A run resumed from its checkpoint with more rounds finds its MLflow run by the run key and
    logs its new rounds there: one MLflow run, every round once, finished."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install -e '.[mlflow]')")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    run_local(plants(tmp_path, tracking="mlflow", **{"num-server-rounds": 1}))
    folder = tmp_path / "results" / "r"
    resumed = run_local(plants(tmp_path, tracking="mlflow", **{"num-server-rounds": 2, "resume-from": str(folder)}))
    rounds, params, _ = logged_rounds("mlflow", folder)
    assert sorted(rounds) == [0, 1, 2]
    assert [rounds[r["round"]]["central-accuracy"] for r in resumed.history] == \
        [r["central-accuracy"] for r in resumed.history]
    assert params["num-server-rounds"] == "1"  # the parameters of the run as it started


def test_a_failing_tracker_is_dropped_and_the_run_goes_on(tmp_path, caplog, monkeypatch):
    """A tracker that fails mid-run (its server gone) costs one warning: the writer stops calling it
    and writes every round's results as before."""
    from fedapp.runtime import results, tracking

    class Gone(tracking.Tracker):
        calls = 0

        def row(self, server_round, values):
            Gone.calls += 1
            raise ConnectionError("tracking server unreachable\nretries exhausted")

    monkeypatch.setattr(results, "plot", lambda *a, **kw: None)
    writer = results.ResultsWriter(parse_run_config({"results-dir": str(tmp_path), "run-name": "r"}))
    writer.trackers.append(Gone())
    caplog.set_level("WARNING", logger="flwr")
    for rnd in range(3):
        writer.add({"round": rnd, "train-loss": 1.0})
    assert Gone.calls == 1 and writer.trackers == []
    assert [r.getMessage() for r in caplog.records] == [
        "Gone: row failed (ConnectionError: tracking server unreachable); the run goes on without it"]
    assert [r["round"] for r in json.loads((writer.path / "rounds.json").read_text())["rounds"]] == [0, 1, 2]


def test_a_tracker_that_cannot_start_is_one_line(user_package, tmp_path, monkeypatch):
    """A tracker that cannot start stops the run before its first round, in one line naming the key."""
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed (pip install -e '.[mlflow]')")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nosuch://tracker")
    with pytest.raises(ConfigError, match=r"^run config 'tracking' = 'mlflow': cannot start it \(\w+: [^\n]*"
                                          r"'nosuch://tracker'[^\n]*\)$"):
        run_local(plants(tmp_path, tracking="mlflow"))
    assert not (tmp_path / "results" / "r" / "rounds.json").exists()
