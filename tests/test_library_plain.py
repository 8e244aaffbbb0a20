"""A ClientApp written as Flower's quickstart writes one (examples/plain-flower-client) in fedapp's runs."""

import json
import subprocess
import sys

import pytest
import torch

from fedapp.config import ConfigError
from fedapp.inprocess import run_local
from fedapp.launch import BIN, flwr_env, free_port_base, stop_local_superlink
from strategies.driver import FLOWER_METRICS

from conftest import ROOT

PLAIN = ROOT / "examples" / "plain-flower-client"


@pytest.fixture
def plain_app(monkeypatch):
    """The example's ClientApp, imported as Flower imports it from the app's folder."""
    monkeypatch.syspath_prepend(str(PLAIN))
    from plainapp.client_app import app

    return app


def plain_config(tmp_path, **extra):
    return {"model": "plainapp.task:Net", "num-server-rounds": 2, "local-epochs": 1, "lr": 0.1, "seed": 0,
            "results-dir": str(tmp_path / "results"), "run-name": "p", "node-wait-timeout": 5.0, **extra}


def test_plain_flower_clientapp_joins(tmp_path):
    """`flwr run` of the example: fedapp's ServerApp, the quickstart-style ClientApp on Flower's default
    2-node federation. Both nodes train in every round, keyed by their node ids, and the rows hold their
    metrics under fedapp's names (the template's eval_acc as fed-accuracy)."""
    home, results = tmp_path / "flwr-home", tmp_path / "results"
    env = flwr_env(home, free_port_base())
    try:
        out = subprocess.run([str(BIN / "flwr"), "run", str(PLAIN), "--stream", "--run-config",
                              f"num-server-rounds=2 results-dir='{results}' run-name='p'"],
                             env=env, capture_output=True, text=True, timeout=300)
    finally:
        stop_local_superlink(home)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = json.loads((results / "p" / "rounds.json").read_text())["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2]
    assert [r["replies"] for r in rows[1:]] == [2, 2] and all(r["dropped-replies"] == 0 for r in rows[1:])
    # both nodes evaluated (50 test examples each): fed-accuracy is the mean of their accuracies
    accs = rows[-1]["fed-client-accuracy"]
    assert len(accs) == 2 and all(int(node) > 1 for node in accs)  # node ids, not partition ids 0 and 1
    assert rows[-1]["fed-accuracy"] == pytest.approx(sum(accs.values()) / 2)
    assert rows[1]["train-loss"] > 0


def test_plain_clients_are_refused_before_round_1_by_a_strategy_that_needs_its_own(tmp_path, plain_app):
    for strategy, client in (("scaffold", "clients.scaffold.ScaffoldClient"),
                             ("fedsmoo", "clients.fedsmoo.FedSMOOClient")):
        with pytest.raises(ConfigError) as err:
            run_local(plain_config(tmp_path, strategy=strategy), client_app=plain_app)
        line = str(err.value)
        assert "\n" not in line and "runs a plain Flower ClientApp" in line and client in line
        assert not (tmp_path / "results" / "p" / "rounds.json").exists() or json.loads(
            (tmp_path / "results" / "p" / "rounds.json").read_text())["rounds"] == []


def test_plain_clients_in_process_match_a_hand_average(tmp_path, plain_app):
    """One FedAvg round of two plain clients is the example-weighted mean of what each trains alone
    (the same seeded loaders), and their replies' num-examples are capped by their first reply's."""
    from plainapp.task import Net, load_data, train

    strategy = run_local(plain_config(tmp_path, **{"num-server-rounds": 1, "fraction-evaluate": 0.0}),
                         client_app=plain_app)
    assert sorted(strategy.clients) == [101, 102] and all(c.plain for c in strategy.clients.values())
    assert [c.num_train for c in strategy.clients.values()] == [200, 200]
    torch.manual_seed(0)
    init = Net().state_dict()
    states = []
    for pid in (0, 1):
        net = Net()
        net.load_state_dict(init)
        train(net, load_data(pid, 2)[0], 1, 0.1, torch.device("cpu"))
        states.append(net.state_dict())
    assert FLOWER_METRICS["eval_acc"] == "accuracy"
    for k, v in strategy.global_state.items():
        assert torch.allclose(v, (states[0][k] + states[1][k]) / 2, atol=1e-6), k
