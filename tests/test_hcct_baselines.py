"""HCCT-E, HCCT-P and the Table IV baselines: each rule checked against numbers worked by hand."""

import math

import numpy as np
import pytest
import torch

from clients.fedavg import FedAvgClient
from clients.fedfa import FedFAClient
from clients.ifca import IFCAClient
from clients.maxfl import MaxFLClient
from fedapp.runtime.client_app import app
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import client_data, dataset, model_for
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.records import content_bytes, make_content
from fedapp.core.training import evaluate
from fedapp.server.replies import Reply
from strategies.fedavg import FedAvg
from strategies.fedfa import FedFA
from strategies.hcct import HCCTE
from strategies.ifca import IFCA
from strategies.maxfl import MaxFL
from tests.test_pefll import image_config, run_recorded  # noqa: F401  (fixture)


def trained(cfg, pid, state, steps=30):
    client = FedAvgClient(cfg, model_for(cfg), client_data(cfg, pid))
    config = {**FedAvg.client_settings(cfg), "local-steps": steps, "server-round": 1, "lr": 0.1}
    return client.answer_train({"arrays": state}, config)[0]["arrays"]


def test_independent_is_local_training(small_config):
    run_config = {**small_config, "strategy": "independent", "num-server-rounds": 1}
    strategy = run_local(run_config)
    cfg = parse_run_config(run_config)
    init = model_for(cfg).state_dict()
    for pid in range(4):
        alone = FedAvgClient(cfg, model_for(cfg), client_data(cfg, pid)).answer_train(
            {"arrays": init}, {**FedAvg.client_settings(cfg), "server-round": 1, "lr": cfg.lr})[0]["arrays"]
        for k, v in alone.items():
            assert torch.allclose(strategy.models[pid][k], v, atol=1e-6)
    assert strategy.history[-1]["groups"] == [[0], [1], [2], [3]]


def test_hcct_p_keeps_the_head_on_the_client(small_config):
    run_config = {**small_config, "strategy": "hcct-p", "hcct.groups": "0,1,2,3", "num-server-rounds": 2}
    grid = InProcessGrid(app, 4, run_config)
    strategy = run_local(run_config, grid=grid)
    assert list(strategy.models[0]) == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    heads = [ctx.state["state.head"]["fc.weight"].numpy() for ctx in grid.contexts.values()]
    assert heads[0].shape == (10, 200) and not (heads[0] == heads[1]).all()  # one head per client
    body_bytes, _ = content_bytes(make_content({"arrays": strategy.models[0]}))
    assert strategy.history[-1]["train-bytes-down"] == 4 * body_bytes
    assert strategy.central_state() is None  # no single full model even in one group


def test_hcct_e_picks_the_layer_with_the_largest_variance_to_mean_ratio(small_config):
    cfg = parse_run_config({**small_config, "strategy": "hcct-e", "hcct.layer-score": "scale-free"})
    strategy = HCCTE(cfg, model_for(cfg), dataset(cfg))
    init = strategy.init_state
    # two clients: they agree on every layer but fc2, where their updates point opposite ways
    # (mean 0, ratio huge); fc1 and fc agree up to +-10% (ratio 0.01)
    ups = []
    for sign in (1.0, -1.0):
        u = {k: torch.ones_like(v) * (1 + 0.1 * sign) for k, v in init.items()}
        u["fc2.weight"] = torch.full_like(init["fc2.weight"], sign)
        u["fc2.bias"] = torch.full_like(init["fc2.bias"], sign)
        ups.append(u)
    strategy.updates = dict(enumerate(ups))
    strategy.after_aggregate(1)
    assert strategy.similarity_keys == ["fc2.weight", "fc2.bias"]
    strategy.after_aggregate(2)  # chosen once
    assert strategy.similarity_keys == ["fc2.weight", "fc2.bias"]


def test_hcct_e_dispersion_and_scale_free_scores_pick_different_layers(small_config):
    # two clients, lr 0.1; updates g (w_local - w_global), constant unless said:
    #   fc1: both clients alike, entries alternate -1, -5 (pooled Var/mean large; no spread across clients)
    #   fc2: both -1 (no spread at all)
    #   fc:  client 0 +4, client 1 +1 (clients disagree, but the pooled mean update is positive)
    # dispersion (authors' code): sum over tensors of Var/mean of the pooled pseudo-gradients -g/lr,
    # fc1 = 2 * 4 / 3 / 0.1 > 0 = fc2 > fc (negative); scale-free: fc = 2.25 / 6.25 > 0 = fc1 = fc2
    def updates(cfg):
        init = model_for(cfg).state_dict()
        ups = []
        for high in (4.0, 1.0):
            u = {k: -torch.ones_like(v) for k, v in init.items()}
            for k in ("fc1.weight", "fc1.bias"):
                u[k] = torch.where(torch.arange(init[k].numel()) % 2 == 0, -1.0, -5.0).reshape(init[k].shape)
            u["fc.weight"] = torch.full_like(init["fc.weight"], high)
            u["fc.bias"] = torch.full_like(init["fc.bias"], high)
            ups.append(u)
        return dict(enumerate(ups))

    picks = {}
    for rule in ("dispersion", "scale-free"):
        cfg = parse_run_config({**small_config, "strategy": "hcct-e", "lr": 0.1, "hcct.layer-score": rule})
        strategy = HCCTE(cfg, model_for(cfg), dataset(cfg))
        strategy.updates = updates(cfg)
        scores = strategy.layer_scores(1)
        strategy.after_aggregate(1)
        picks[rule] = strategy.similarity_keys
        if rule == "dispersion":
            for keys, score in scores.items():
                pooled = [np.concatenate([-u[k].numpy().ravel() / 0.1 for u in strategy.updates.values()])
                          for k in keys]
                assert score == pytest.approx(sum(np.var(p) / np.mean(p) for p in pooled), rel=1e-9)
            # fc1 (200 x 60 weight, 200 bias: even sizes, so half the entries -1, half -5):
            # pseudo-gradients 10 and 50, mean 30, variance 400, in each of the two tensors
            assert scores["fc1.weight", "fc1.bias"] == pytest.approx(2 * 400 / 30)
            assert scores["fc2.weight", "fc2.bias"] == 0.0  # variance 0, mean 10
            # fc: pseudo-gradients -40 and -10, mean -25, variance 225: signed, so negative
            assert scores["fc.weight", "fc.bias"] == pytest.approx(2 * 225 / -25)
        else:  # per entry across the clients: variance 2.25, mean 2.5
            assert scores == pytest.approx({("fc1.weight", "fc1.bias"): 0.0, ("fc2.weight", "fc2.bias"): 0.0,
                                            ("fc.weight", "fc.bias"): 2.25 / 6.25})
    assert picks == {"dispersion": ["fc1.weight", "fc1.bias"], "scale-free": ["fc.weight", "fc.bias"]}


def test_ifca_and_flsc_clients_pick_the_lowest_loss_models(small_config):
    cfg = parse_run_config(small_config)
    init = model_for(cfg).state_dict()
    good = trained(cfg, 0, init)
    far = {k: v * 3 for k, v in init.items()}  # a worse model than the initial one
    payload = {"model-0": far, "model-1": good, "model-2": init}
    client = IFCAClient(cfg, model_for(cfg), client_data(cfg, 0))
    _, metrics = client.answer_train(payload, {**IFCA.client_settings(cfg), "server-round": 2, "lr": 0.1, "chosen": 1})
    assert metrics["cluster-mask"] == 0b010
    client = IFCAClient(cfg, model_for(cfg), client_data(cfg, 0))
    client.config = {"chosen": 2}
    client.load_model(payload)
    assert client.chosen == [1, 2]
    assert torch.allclose(client.model.state_dict()["fc.weight"], (good["fc.weight"] + init["fc.weight"]) / 2)


def test_ifca_averages_each_cluster_over_the_clients_that_chose_it(small_config):
    cfg = parse_run_config({**small_config, "strategy": "flsc", "flsc.clusters": 3, "flsc.n-g": 2})
    strategy = IFCA(cfg, model_for(cfg), dataset(cfg))
    assert not torch.equal(strategy.cluster_models[0]["fc.weight"], strategy.cluster_models[1]["fc.weight"])
    a = {k: torch.ones_like(v) for k, v in strategy.global_state.items()}
    b = {k: torch.full_like(v, 4.0) for k, v in strategy.global_state.items()}
    untouched = strategy.cluster_models[2]
    strategy.aggregate(1, [Reply(0, {"arrays": a}, {"num-examples": 1, "cluster-mask": 0b011}),
                           Reply(1, {"arrays": b}, {"num-examples": 2, "cluster-mask": 0b001})])
    assert torch.allclose(strategy.cluster_models[0]["fc.bias"], torch.full((10,), 3.0))  # (1*1 + 2*4) / 3
    assert torch.allclose(strategy.cluster_models[1]["fc.bias"], torch.ones(10))
    assert strategy.cluster_models[2] is untouched
    assert strategy.choices == {0: [0, 1], 1: [0]}


def test_fedfa_weights_are_minus_log2_training_accuracy(small_config):
    cfg = parse_run_config({**small_config, "strategy": "fedfa"})
    strategy = FedFA(cfg, model_for(cfg), dataset(cfg))
    a = {k: torch.zeros_like(v) for k, v in strategy.global_state.items()}
    b = {k: torch.full_like(v, 3.0) for k, v in strategy.global_state.items()}
    strategy.aggregate(1, [Reply(0, {"arrays": a}, {"num-examples": 100, "train-accuracy": 0.5}),
                           Reply(1, {"arrays": b}, {"num-examples": 1, "train-accuracy": 0.25})])
    # weights -log2(0.5) = 1 and -log2(0.25) = 2, whatever the example counts
    assert torch.allclose(strategy.global_state["fc.bias"], torch.full((10,), 2.0))
    run = run_local({**small_config, "strategy": "fedfa", "num-server-rounds": 1})
    assert 0 < run.history[-1]["fed-accuracy"] <= 1


def test_fedfa_client_reports_the_received_models_training_accuracy_loading_it_once(small_config):
    cfg = parse_run_config({**small_config, "strategy": "fedfa"})
    init, d = model_for(cfg).state_dict(), client_data(cfg, 0)
    received = trained(cfg, 1, init)  # another client's model: not this client's training optimum
    client = FedFAClient(cfg, model_for(cfg), d)
    loads = []
    client.load_tensors = lambda tensors, load=client.load_tensors: loads.append(1) or load(tensors)
    reply, metrics = client.answer_train({"arrays": received}, {**FedFA.client_settings(cfg), "server-round": 1, "lr": 0.1})
    model = model_for(cfg)
    model.load_state_dict(received)
    by_hand = evaluate(model, d.train_x, d.train_y, mean=d.mean, std=d.std)["accuracy"]
    assert metrics["train-accuracy"] == by_hand and len(loads) == 1
    assert not torch.equal(reply["arrays"]["fc.weight"], received["fc.weight"])  # then trained as FedAvg


def test_maxfl_client_joins_only_when_the_global_model_is_good_enough(small_config):
    cfg = parse_run_config({**small_config, "strategy": "maxfl"})
    init = model_for(cfg).state_dict()
    own = trained(cfg, 0, init)
    settings = MaxFL.client_settings(cfg)
    client = MaxFLClient(cfg, model_for(cfg), client_data(cfg, 0), state={"local": own})
    _, metrics = client.answer_train({"arrays": init}, {**settings, "server-round": 2, "lr": 0.1})
    assert metrics["joined"] == 0  # its own model has the lower loss: it keeps training that one
    client = MaxFLClient(cfg, model_for(cfg), client_data(cfg, 0), state={"local": init})
    _, metrics = client.answer_train({"arrays": own}, {**settings, "server-round": 2, "lr": 0.1})
    assert metrics["joined"] == 1
    assert math.isclose(cfg.algo("margin"), 0.0)
    # evaluation follows the same rule: a client whose own model is better is evaluated with it
    client = MaxFLClient(cfg, model_for(cfg), client_data(cfg, 0), state={"local": own})
    own_model = model_for(cfg)
    own_model.load_state_dict(own)
    d = client_data(cfg, 0)
    by_hand = evaluate(own_model, d.test_x, d.test_y, mean=d.mean, std=d.std)
    assert client.evaluate({"arrays": init}, {**settings, "server-round": 3}) == ({}, by_hand)


@pytest.mark.parametrize("strategy", ["ifca", "flsc", "maxfl"])
def test_baselines_run_end_to_end(small_config, strategy):
    run = run_local({**small_config, "strategy": strategy, "num-server-rounds": 2})
    row = run.history[-1]
    assert row["replies"] == 4 and row["dropped-replies"] == 0
    assert 0.3 < row["fed-accuracy"] <= 1


def test_payloads_built_per_client_reach_their_own_client(small_config):
    # IFCA builds each client's evaluation model afresh; the records cache must not hand one client's
    # model to the next (a freed dict's id can be reused by the next one)
    run_config = {**small_config, "strategy": "ifca", "num-server-rounds": 1}
    strategy = run_local(run_config)
    strategy.choices = {0: [0], 1: [1], 2: [2], 3: [0, 1]}
    contents = strategy.driver.sampled_contents("evaluate", 1)
    biases = {pid: c["arrays"]["fc.bias"].numpy() for pid, c in contents.items()}
    for pid, chosen in strategy.choices.items():
        expected = sum(strategy.cluster_models[j]["fc.bias"] for j in chosen) / len(chosen)
        assert torch.allclose(torch.from_numpy(biases[pid]), expected, atol=1e-6)


def test_ifca_and_flsc_evaluate_a_client_that_never_trained(image_config):
    """A new client gets the k models at evaluation and scores them as in training: its metrics are
    those of the average of its `chosen` lowest-loss models on its own test split."""
    for strategy_name, extra in (("ifca", {"ifca.clusters": 3}), ("flsc", {"flsc.clusters": 3, "flsc.n-g": 2})):
        run_config = {**image_config, "strategy": strategy_name, "fraction-evaluate": 1.0, "local-steps": 2, **extra}
        strategy, grid = run_recorded(run_config)
        row = strategy.history[-1]
        assert "client-error" not in " ".join(row) and row["replies"] == 3
        unseen = sorted(strategy.unseen)
        cfg = parse_run_config(run_config)
        accs = []
        for pid in unseen:  # the same choice and evaluation, without Flower
            client = IFCAClient(cfg, model_for(cfg), client_data(cfg, pid))
            client.config = {**type(strategy).client_settings(cfg), "chosen": strategy.chosen()}
            client.load_model({f"model-{j}": m for j, m in enumerate(strategy.cluster_models)})
            assert len(client.chosen) == strategy.chosen()
            m = client.evaluate_local()
            accs.append((m["accuracy"] * m["num-examples"], m["num-examples"]))
        # pooled over the new clients' test examples
        assert row["fed-unseen-accuracy"] == pytest.approx(sum(c for c, _ in accs) / sum(n for _, n in accs))
