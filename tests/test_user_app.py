"""A user's own Flower app around fedapp: a model factory that takes no argument, a server that holds
no data, and run-config keys of the app's own."""

from __future__ import annotations

import logging

import pytest
import torch

from fedapp.core.config import ConfigError
from fedapp.core.experiment import client_data, dataset, model_for
from fedapp.runtime import preflight
from fedapp.runtime.inprocess import run_local
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.server_app import build_strategy

QUICKSTART = '''
import torch.nn as nn


class Net(nn.Module):
    """A quickstart's model: sized by its own code, built as Net()."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(60, 16), nn.Linear(16, 10)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())
'''


@pytest.fixture
def quickstart(tmp_path, monkeypatch):
    (tmp_path / "quickstart_net.py").write_text(QUICKSTART)
    monkeypatch.syspath_prepend(str(tmp_path))
    import quickstart_net

    return quickstart_net


def test_model_factory_without_arguments(quickstart):
    """``model = "module:Net"`` where ``Net()`` takes no argument: built as ``Net()`` from the run's
    seed on server and clients alike, and trained: the run's initial model is ``Net()`` under that seed."""
    rc = {"model": "quickstart_net:Net", "num-clients": 3, "num-server-rounds": 2, "local-steps": 3, "seed": 5,
          "checkpoint-every": 0}
    run = run_local(rc)
    torch.manual_seed(5)
    expected = quickstart.Net().state_dict()
    initial = model_for(parse_run_config(rc)).state_dict()
    assert all(torch.equal(initial[k], v) for k, v in expected.items()) and initial.keys() == expected.keys()
    assert {k: v.shape for k, v in run.global_state.items()} == {k: v.shape for k, v in expected.items()}
    assert run.history[-1]["central-accuracy"] > run.history[0]["central-accuracy"]


def test_server_without_data_builds_from_declared_shapes(tmp_path):
    """A deployment's server with no data of its own (its data-dir does not exist), central evaluation
    off and the shapes declared: the preflight passes and the strategy's initial model is the one a
    client builds from its data of those shapes. A simulation (the clients' data on this machine), or
    central evaluation, still reads the data, and a client whose data has another shape is refused."""
    rc = {"dataset": "table", "data-dir": str(tmp_path / "absent"), "label-column": "label", "partition": "iid",
          "input-shape": "60", "num-classes": 10, "central-eval": False, "seed": 2}
    cfg = preflight.check(rc, local=False)
    strategy = build_strategy(cfg, local=False)
    client_cfg = parse_run_config({**rc, "dataset": "synthetic", "data-dir": ""})
    client = model_for(client_cfg, client_data(client_cfg, 0)).state_dict()
    assert all(torch.equal(client[k], v) for k, v in strategy.global_state.items())
    for local, extra in ((True, {}), (False, {"central-eval": True})):
        with pytest.raises(ConfigError, match="run config 'data-dir'"):
            preflight.check({**rc, **extra}, local=local)
    other = parse_run_config({**rc, "dataset": "synthetic", "data-dir": "", "input-shape": "3,32,32"})
    with pytest.raises(ConfigError, match="'input-shape' = '3,32,32' and 'num-classes' = 10 do not fit the data: "
                                          "its examples have shape 60 and 10 classes"):
        model_for(other, client_data(other, 0))


def test_app_keys_pass_through(caplog):
    """Keys under a prefix of the app's own pass (fedapp reads none of them and says so once); a key
    under a misspelt prefix of fedapp's, or an unprefixed unknown key, is refused naming it."""
    with caplog.at_level(logging.INFO, logger="flwr"):
        cfg = preflight.check({"myapp.batch-size": 64, "myapp.note": "x", "num-clients": 2, "num-server-rounds": 1})
    assert "myapp.batch-size" not in cfg.as_dict()
    assert "run config key(s) myapp.batch-size, myapp.note: the app's own" in caplog.text
    with pytest.raises(ConfigError, match="'pefl.k': did you mean 'pefll.k'"):
        parse_run_config({"pefl.k": 3})
    with pytest.raises(ConfigError, match="'batchsize': did you mean 'batch-size'"):
        parse_run_config({"batchsize": 3})
    with pytest.raises(ConfigError, match="'input-shape' = '60' and 'num-classes' = 0 go together"):
        parse_run_config({"input-shape": "60"})
