"""FedAvg end to end in process, checked against hand-computed averages."""

import json

import torch

from clients.fedavg import FedAvgClient
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data, model_for
from fedapp.runtime.inprocess import run_local
from fedapp.core.records import content_bytes, make_content
from strategies.base import weighted_mean
from strategies.fedavg import FedAvg


def test_weighted_mean_by_hand():
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(2)}
    b = {"w": torch.tensor([4.0, 8.0]), "n": torch.tensor(5)}
    out = weighted_mean([a, b], [1, 2])
    assert torch.allclose(out["w"], torch.tensor([3.0, 6.0]))
    assert out["n"].dtype == torch.int64 and out["n"].item() == 4


def test_fedavg_round_equals_weighted_average_of_local_training(small_config):
    run_config = {**small_config, "num-server-rounds": 1, "fraction-evaluate": 0.0}
    strategy = run_local(run_config)
    cfg = parse_run_config(run_config)
    init = model_for(cfg).state_dict()
    states, weights = [], []
    for pid in range(cfg.num_clients):  # the same local training, without Flower
        client = FedAvgClient(cfg, model_for(cfg), client_data(cfg, pid))
        payload, metrics = client.answer_train({"arrays": init}, {**FedAvg.client_settings(cfg), "server-round": 1, "lr": cfg.lr})
        states.append(payload["arrays"])
        weights.append(metrics["num-examples"])
    expected = weighted_mean(states, weights)
    for k, v in expected.items():
        assert torch.allclose(strategy.global_state[k], v, atol=1e-6), k
    # the model moved, and every client took part
    assert not torch.allclose(strategy.global_state["fc.weight"], init["fc.weight"])
    row = strategy.history[-1]
    assert row["replies"] == 4


def test_fedavg_bytes_are_those_of_the_records(small_config):
    strategy = run_local({**small_config, "num-server-rounds": 1, "fraction-train": 0.5})
    row = strategy.history[-1]
    model_bytes, params = content_bytes(make_content({"arrays": strategy.global_state}))
    assert row["train-bytes-down"] == 2 * model_bytes
    assert row["train-bytes-up"] == 2 * model_bytes
    assert row["train-params-down"] == 2 * params == 2 * sum(v.numel() for v in strategy.global_state.values())


def test_results_files_hold_every_round(small_config, tmp_path):
    strategy = run_local({**small_config, "num-server-rounds": 3})
    out = tmp_path / "results" / "t"
    doc = json.loads((out / "rounds.json").read_text())
    assert [r["round"] for r in doc["rounds"]] == [0, 1, 2, 3]
    assert doc["config"]["num-server-rounds"] == 3
    assert (out / "rounds.csv").read_text().count("\n") == 5
    assert (out / "plot.png").read_bytes()[:4] == b"\x89PNG"
    last = doc["rounds"][-1]
    for key in ("train-loss", "central-accuracy", "fed-accuracy", "fed-loss", "total-train-bytes-down",
                "wall-time"):
        assert key in last
    assert 0.0 <= last["fed-accuracy"] <= 1.0
    assert last["total-train-bytes-up"] == 3 * strategy.history[1]["train-bytes-up"]


def test_sampling_is_seeded_and_over_partition_ids(small_config):
    a = run_local({**small_config, "fraction-train": 0.5, "num-server-rounds": 3})
    b = run_local({**small_config, "fraction-train": 0.5, "num-server-rounds": 3})
    assert [r.get("train-loss") for r in a.history] == [r.get("train-loss") for r in b.history]
    assert sorted(a.clients) == [0, 1, 2, 3]


def test_a_failing_client_is_skipped(small_config, monkeypatch):
    import clients.base

    real_fit = clients.base.FedClient.answer_train

    def fit(self, payload, config):
        if self.data.pid == 1:
            raise RuntimeError("disk on fire")
        return real_fit(self, payload, config)

    monkeypatch.setattr(clients.base.FedClient, "answer_train", fit)
    strategy = run_local({**small_config, "num-server-rounds": 1})
    row = strategy.history[-1]
    assert row["replies"] == 3 and row["dropped-replies"] == 1
    assert any("disk on fire" in reason for reason in row["dropped-reasons"])
    assert all(torch.isfinite(v.float()).all() for v in strategy.global_state.values())



def test_federation_size_must_match_num_clients(small_config):
    import pytest

    from fedapp.runtime.client_app import app
    from fedapp.core.config import ConfigError
    from fedapp.runtime.inprocess import InProcessGrid

    grid = InProcessGrid(app, 3, small_config, [{"partition-id": i, "num-partitions": 3} for i in range(3)])
    with pytest.raises(ConfigError, match="3 simulated SuperNodes but run config 'num-clients' = 4"):
        run_local(small_config, grid=grid)
