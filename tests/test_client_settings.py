"""The settings channel: clients read every training and evaluation setting from the message's
config, which the server's strategy fills from its run config, never from their own run config."""

import pytest
import torch

from clients.fedprox import FedProxClient
from fedapp.runtime import registry
from fedapp.runtime.client_app import app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data, model_for
from fedapp.runtime.inprocess import InProcessGrid, run_local
from strategies.base import CLIENT_SETTINGS
from strategies.fedprox import FedProx
from tests.test_pefll import image_config  # noqa: F401  (fixture)

#: a value other than the default for every setting a client reads, so that a client reading its
#: own run config instead of the message would train or evaluate differently
SERVER_ONLY = {
    "batch-size": 4, "local-steps": 2, "local-epochs": 2, "momentum": 0.5, "weight-decay": 1e-3, "grad-clip": 0.5,
    "augment-recipe": "fl-simulator", "eval-label-mask": "exclude",
    "fedprox.proximal-mu": 0.5, "feddyn.beta": 2.0, "fedcm.alpha": 0.3, "fedcm.decay-in-mix": True,
    "fedsam.rho": 0.2, "mofedsam.rho": 0.2, "mofedsam.alpha": 0.3, "mofedsam.decay-in-mix": True,
    "fedspeed.rho": 0.2, "fedspeed.beta": 2.0, "fedsmoo.rho": 0.2, "fedsmoo.beta": 2.0,
    "fedsmoo.simulator-perturbation": True, "maxfl.margin": 0.5, "hcct.head-start": "group",
    "fedals.body-layers": 1, "fedals.nesterov": True, "fedals.scaffold-variant": "authors-copy",
    "fedrep.head-steps": 2, "pefll.k": 2, "pefll.momentum": 0.5, "pefll.clip": 0.5, "pfedhn.k": 2,
    "pfedhn.embed-dim": 3, "pfedhn.momentum": 0.5, "pfedhn.new-client-rounds": 1, "perfedavg.beta": 0.02,
    "perfedavg.finetune-epochs": 2, "pfedme.lambda": 5.0, "pfedme.k": 2, "pfedme.personal-lr": 0.02, "pfedme.mu": 0.0,
    "pfedme.new-epochs": 1, "knnper.scale": 10.0, "knnper.folds": 3,
}
TIMINGS = {"train-seconds", "round-seconds", "wall-time"}


def rows(strategy):
    return [{k: v for k, v in r.items() if k not in TIMINGS} for r in strategy.history]


def test_every_sent_setting_is_a_run_config_key():
    for name, spec in registry.algorithms().items():
        assert set(spec.strategy.client_keys) <= {k.name for k in spec.keys}, name
    assert set(CLIENT_SETTINGS) <= set(parse_run_config({}).as_dict())


@pytest.mark.parametrize("name", sorted(registry.algorithms()))
def test_clients_take_every_setting_from_the_message(image_config, name):  # noqa: F811
    """Every algorithm's run, with clients whose run config lacks the training and algorithm
    settings (they would take the defaults), equals the run where the clients' run config is the
    server's: the same rows (losses, accuracies, bytes) and the same final state."""
    prefix = registry.get(name).prefix + "."
    server = {k: v for k, v in {**image_config, **SERVER_ONLY}.items() if "." not in k or k.startswith(prefix)}
    server.update({"strategy": name, "fraction-train": 1.0, "fraction-evaluate": 1.0})
    clients = {k: v for k, v in server.items() if k not in CLIENT_SETTINGS and not k.startswith(prefix)}
    full = run_local(server)
    lacking = run_local(server, grid=InProcessGrid(app, server["num-clients"], clients))
    assert rows(lacking) == rows(full)
    for k, v in full.global_state.items():
        assert torch.equal(lacking.global_state[k], v), k


def test_a_message_without_a_setting_fails_naming_it(image_config, monkeypatch):  # noqa: F811
    """A client never falls back to its run config: a setting missing from the message is an error
    naming the key, and a run whose strategy does not send it stops at its first round, saying so."""
    cfg = parse_run_config({**image_config, "strategy": "fedprox"})
    client = FedProxClient(cfg, model_for(cfg), client_data(cfg, 0))
    config = {**FedProx.client_settings(cfg), "server-round": 1, "lr": 0.1}
    del config["proximal-mu"]
    with pytest.raises(ConfigError, match="lacks 'proximal-mu'"):
        client.answer_train({"arrays": model_for(cfg).state_dict()}, config)

    monkeypatch.setattr(FedProx, "client_keys", ())  # a server that does not send it
    with pytest.raises(RuntimeError, match="no valid training reply in its first round.*lacks 'proximal-mu'"):
        run_local({**image_config, "strategy": "fedprox", "fraction-evaluate": 0.0})
