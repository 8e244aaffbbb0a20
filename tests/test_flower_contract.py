"""fedapp strategies keep Flower's Strategy contract: ``start()`` honours its arguments and returns
Flower's ``Result``; Flower's own loop and wrappers (server-side fixed-clipping DP) drive them."""

import math

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, Result, Strategy

from fedapp.runtime.client_app import app
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import InProcessGrid
from fedapp.core.records import from_record, to_record
from fedapp.runtime.server_app import build_strategy
from strategies.base import FedStrategy
from fedapp.server.hooks import own_hook
from strategies.pefll import PeFLL


class SpyGrid(InProcessGrid):
    """Records the timeout of every exchange and the config of every message sent."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.timeouts, self.configs = [], []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.timeouts.append(timeout)
        self.configs += [(m.metadata.message_type, dict(m.content["config"])) for m in messages]
        return super().send_and_receive(messages, timeout=timeout)


def flat(tensors) -> torch.Tensor:
    return torch.cat([v.double().reshape(-1) for v in tensors.values()])


def test_start_returns_flower_result(small_config):
    rc = {**small_config, "num-server-rounds": 2, "fraction-evaluate": 0.5}
    strategy = build_strategy(parse_run_config(rc))
    initial = {k: v + 0.01 if v.is_floating_point() else v for k, v in strategy.global_state.items()}
    seen = []

    def evaluate_fn(server_round, arrays):
        seen.append((server_round, from_record(arrays)))
        return MetricRecord({"norm": float(flat(from_record(arrays)).norm())})

    grid = SpyGrid(app, 4, rc)
    result = strategy.start(grid, initial_arrays=to_record(initial), num_rounds=1, timeout=7.0,
                            train_config=ConfigRecord({"tag": "t"}), evaluate_config=ConfigRecord({"tag": "e"}),
                            evaluate_fn=evaluate_fn)
    assert isinstance(result, Result)
    # num_rounds replaces num-server-rounds; initial_arrays is what round 0 evaluates and round 1 sends
    assert [r["round"] for r in strategy.history] == [0, 1]
    assert [r for r, _ in seen] == [0, 1]
    assert all(torch.equal(seen[0][1][k], v) for k, v in initial.items())
    final = from_record(result.arrays)
    assert all(torch.equal(final[k], v) for k, v in strategy.global_state.items())
    assert all(torch.equal(seen[-1][1][k], v) for k, v in strategy.global_state.items())
    # the metrics: aggregate_train's, the federated evaluation's and the server side's, per round
    assert sorted(result.train_metrics_clientapp) == [1]
    assert sorted(result.evaluate_metrics_clientapp) == [1]
    assert sorted(result.evaluate_metrics_serverapp) == [0, 1]
    for row in strategy.history[1:]:
        rnd = row["round"]
        assert result.train_metrics_clientapp[rnd]["train-loss"] == row["train-loss"]
        assert result.train_metrics_clientapp[rnd]["replies"] == 4
        assert result.evaluate_metrics_clientapp[rnd]["fed-accuracy"] == row["fed-accuracy"]
    for row in strategy.history:
        server = result.evaluate_metrics_serverapp[row["round"]]
        assert server["central-accuracy"] == row["central-accuracy"]
        assert server["norm"] == row["server-norm"] == pytest.approx(float(flat(seen[row["round"]][1]).norm()))
    # timeout reaches every exchange; the configs are the base of every message's config
    assert set(grid.timeouts) == {7.0}
    tags = {(t, c.get("tag")) for t, c in grid.configs if t != "query"}
    assert tags == {("train", "t"), ("evaluate", "e")}
    # without the Flower arguments the run is the run config's: 2 rounds, the round-timeout
    plain = build_strategy(parse_run_config(rc))
    grid = SpyGrid(app, 4, rc)
    assert isinstance(plain.start(grid), Result)
    assert [r["round"] for r in plain.history] == [0, 1, 2]
    assert set(grid.timeouts) == {plain.cfg.round_timeout} != {7.0}


def server_state(strategy) -> list[dict[str, torch.Tensor]]:
    """The models a strategy holds: the global one, IFCA's clusters, HCCT's per client."""
    if hasattr(strategy, "cluster_models"):
        return strategy.cluster_models
    if hasattr(strategy, "models"):
        return [strategy.models[pid] for pid in sorted(strategy.models)]
    return [strategy.global_state]


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "ifca", "hcct", "fedals"])
def test_flowers_loop_drives_a_single_trip_strategy_as_fedapps_does(small_config, name):
    """Flower's own Strategy.start over configure/aggregate gives the models fedapp's loop gives
    (HCCT groups in begin("train"), FedALS collects bodies in begin("evaluate"): both inside the pair)."""
    rc = {**small_config, "strategy": name, "fraction-train": 1.0 if name == "hcct" else 0.5,
          "fraction-evaluate": 0.5, "fedals.alpha": 2}
    ours = build_strategy(parse_run_config(rc))
    ours.start(InProcessGrid(app, 4, rc))
    theirs = build_strategy(parse_run_config(rc))
    initial = theirs.global_arrays() if theirs.global_model else ArrayRecord()
    result = Strategy.start(theirs, InProcessGrid(app, 4, rc), initial, num_rounds=2)
    assert result.train_metrics_clientapp[2]["train-loss"] == ours.history[2]["train-loss"]
    assert result.evaluate_metrics_clientapp[2]["fed-accuracy"] == ours.history[2]["fed-accuracy"]
    assert len(server_state(ours)) == len(server_state(theirs)) > 0
    for a, b in zip(server_state(ours), server_state(theirs)):
        assert all(torch.equal(a[k], b[k]) for k in a)
    if theirs.global_model:
        assert all(torch.equal(from_record(result.arrays)[k], v) for k, v in ours.global_state.items())


def test_what_a_strategy_cannot_honour_fails_in_one_line(small_config):
    ifca = build_strategy(parse_run_config({**small_config, "strategy": "ifca"}))
    grid = InProcessGrid(app, 4, small_config)
    for kwargs in ({"initial_arrays": to_record(ifca.global_state)}, {"evaluate_fn": lambda rnd, arrays: None}):
        with pytest.raises(ValueError, match="IFCA keeps no single global model") as err:
            ifca.start(grid, **kwargs)
        assert "\n" not in str(err.value)
    fedavg = build_strategy(parse_run_config(small_config))
    wrong = {k: v for k, v in list(fedavg.global_state.items())[:-1]}
    with pytest.raises(ValueError, match="initial_arrays keys") as err:
        fedavg.start(grid, initial_arrays=to_record(wrong))
    # more than one configure/aggregate pair a round (PeFLL: three round trips a step)
    assert own_hook(PeFLL, "train_round") is PeFLL.train_round and own_hook(FedStrategy, "train_round") is None
    pefll = object.__new__(PeFLL)  # what flower_loop reads: the class
    with pytest.raises(RuntimeError, match="PeFLL has its own train_round") as err:
        pefll.configure_train(1, ArrayRecord(), ConfigRecord(), grid)  # Flower's loop's first call
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["fedavg", "fedprox"])
def test_flower_dp_wrapper_composes(small_config, name):
    """Flower's DifferentialPrivacyServerSideFixedClipping around fedapp's FedAvg and FedProx, one
    sampled client: with noise 0 the aggregated update is the client's update scaled to the clipping
    norm C; with noise multiplier z the model differs from that by Gaussian noise of std z C / 1."""
    rc = {**small_config, "strategy": name, "fraction-train": 0.25, "min-train-nodes": 1, "num-server-rounds": 1,
          "fraction-evaluate": 0.0, "central-eval": False, "fedprox.proximal-mu": 0.1}

    def run(noise=None, clip=None):
        strategy = build_strategy(parse_run_config(rc))
        initial = strategy.global_arrays()
        outer = strategy if noise is None else DifferentialPrivacyServerSideFixedClipping(strategy, noise, clip, 1)
        result = Strategy.start(outer, InProcessGrid(app, 4, rc), initial, num_rounds=1)
        assert strategy.history == [] and result.train_metrics_clientapp[1]["replies"] == 1
        return flat(from_record(initial)), flat(from_record(result.arrays))

    w0, plain = run()
    update = plain - w0
    clip = float(update.norm()) / 2
    np.random.seed(0)  # Flower's noise comes from numpy's global generator
    w0_again, clipped = run(0.0, clip)
    assert torch.equal(w0_again, w0)
    assert float((clipped - w0).norm()) == pytest.approx(clip, rel=1e-5)
    assert torch.allclose(clipped - w0, update * clip / float(update.norm()), atol=1e-6)
    z = 0.5
    _, noisy = run(z, clip)
    noise = noisy - clipped
    n, std = noise.numel(), z * clip
    assert abs(float(noise.std()) / std - 1) < 5 / math.sqrt(2 * n)
    assert abs(float(noise.mean())) < 5 * std / math.sqrt(n)
