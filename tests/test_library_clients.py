"""fedapp's client updates called from a user's own ClientApp (fedapp.runtime.library)."""

import pytest
import torch
from flwr.clientapp import ClientApp

from fedapp.runtime import library
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data, model_for
from fedapp.runtime.inprocess import run_local

TIMINGS = {"train-seconds", "round-seconds", "wall-time"}


def own_clientapp(strategy: str, run_config: dict) -> ClientApp:
    """A ClientApp of the kind docs/flower-library.md shows: its own model and data (here fedapp's
    partition of the synthetic data, as tensors), fedapp's update through fedapp.runtime.library."""
    cfg = parse_run_config(run_config)
    app = ClientApp()

    def data(context):
        d = client_data(cfg, int(context.node_config["partition-id"]))
        return (d.train_x, d.train_y), (d.test_x, d.test_y)

    @app.query()
    def query(msg, context):
        return library.query(strategy, msg, context, *data(context), seed=cfg.seed)

    @app.train()
    def train(msg, context):
        return library.train(strategy, msg, context, model_for(cfg), *data(context), seed=cfg.seed)

    @app.evaluate()
    def evaluate(msg, context):
        return library.evaluate(strategy, msg, context, model_for(cfg), *data(context), seed=cfg.seed)

    return app


@pytest.mark.parametrize("strategy", ["fedsmoo", "scaffold"])
def test_library_update_in_own_clientapp_equals_fedapps_clientapp(strategy, small_config):
    """FedSMOO's and SCAFFOLD's client updates (duals, perturbations, control variates kept in
    context.state across rounds) called from one's own ClientApp give fedapp's ClientApp's rows and
    model on the same data."""
    rc = {**small_config, "strategy": strategy}
    ours = run_local(rc)
    own = run_local({**rc, "run-name": "own"}, client_app=own_clientapp(strategy, rc))
    rows = [[{k: v for k, v in r.items() if k not in TIMINGS} for r in s.history] for s in (ours, own)]
    assert rows[0] == rows[1]
    for k, v in ours.global_state.items():
        assert torch.equal(own.global_state[k], v), k


def test_library_reads_a_dataloader_as_its_tensors(small_config):
    from torch.utils.data import DataLoader, TensorDataset

    x, y = torch.randn(10, 3), torch.arange(10) % 4
    got = library.tensors(DataLoader(TensorDataset(x, y), batch_size=3))
    assert torch.equal(got[0], x) and torch.equal(got[1], y)
