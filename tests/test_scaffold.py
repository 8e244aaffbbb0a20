"""SCAFFOLD: zero control variates reduce to FedAvg; option II and the server's c by hand."""

import torch

from clients.scaffold import option_two
from fedapp.runtime.inprocess import run_local
from fedapp.core.records import content_bytes, make_content
from strategies.fedavg import FedAvg


def test_option_two_by_hand():
    c_i, c = {"w": torch.tensor([1.0, -1.0])}, {"w": torch.tensor([0.5, 0.5])}
    x, y = {"w": torch.tensor([2.0, 2.0])}, {"w": torch.tensor([1.0, 3.0])}
    # c_i - c + (x - y) / (K lr) with K lr = 4 * 0.25 = 1
    assert torch.equal(option_two(c_i, c, x, y, 4, 0.25)["w"], torch.tensor([1.5, -2.5]))


def test_first_round_equals_unweighted_fedavg(small_config, monkeypatch):
    run_config = {**small_config, "num-server-rounds": 1, "fraction-evaluate": 0.0}
    scaffold = run_local({**run_config, "strategy": "scaffold"})
    monkeypatch.setattr(FedAvg, "weighted", False)
    fedavg = run_local(run_config)
    for k, v in fedavg.global_state.items():
        assert torch.allclose(scaffold.global_state[k], v, atol=1e-6), k


def test_server_control_is_mean_of_client_controls_and_state_persists(small_config):
    """c = (1/N) sum_i c_i over all N clients, sampled or not, since every c_i starts at 0."""
    from fedapp.runtime.client_app import app
    from fedapp.runtime.inprocess import InProcessGrid

    run_config = {**small_config, "strategy": "scaffold", "num-server-rounds": 3, "fraction-train": 0.5,
                  "fraction-evaluate": 0.0}
    grid = InProcessGrid(app, 4, run_config)
    strategy = run_local(run_config, grid=grid)
    states = [ctx.state.array_records.get("state.control") for ctx in grid.contexts.values()]
    controls = [{k: torch.from_numpy(a.numpy()) for k, a in s.items()} if s else None for s in states]
    for k, c in strategy.control.items():
        total = sum(ci[k] for ci in controls if ci is not None)  # never sampled: c_i = 0
        assert torch.allclose(c, total / 4, atol=1e-5), k
    assert strategy.control["fc.weight"].abs().sum() > 0


def test_bytes_twice_fedavg_each_way(small_config):
    run_config = {**small_config, "num-server-rounds": 1, "fraction-evaluate": 0.0}
    scaffold = run_local({**run_config, "strategy": "scaffold"}).history[-1]
    fedavg = run_local(run_config).history[-1]
    for way in ("down", "up"):
        ratio = scaffold[f"train-bytes-{way}"] / fedavg[f"train-bytes-{way}"]
        assert 1.9 < ratio <= 2.0, (way, ratio)


def test_stateful_clients_evaluate_the_global_model(small_config):
    """Evaluation messages carry only the model: SCAFFOLD/FedSMOO/FedCM clients still evaluate."""
    for name in ("scaffold", "fedsmoo", "fedcm"):
        strategy = run_local({**small_config, "strategy": name, "num-server-rounds": 1})
        row = strategy.history[-1]
        assert row["dropped-replies"] == 0, (name, row["dropped-reasons"])
        assert 0.0 < row["fed-accuracy"] <= 1.0
