"""FedSMOO and its family: hand-computed steps, reductions between methods, state and bytes."""

import math

import numpy as np
import pytest
import torch

from clients.fedavg import FedAvgClient
from clients.fedcm import FedCMClient
from clients.fedsam import FedSAMClient, MoFedSAMClient
from clients.fedsmoo import FedSMOOClient
from fedapp.runtime.client_app import app
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import model_for
from fedapp.runtime import registry
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.server.discovery import ClientInfo
from fedapp.server.replies import Reply
from strategies.fedavg import FedAvg
from strategies.fedcm import FedCM
from strategies.fedsmoo import FedSMOO

A = torch.tensor([1.0, 2.0])  # f(w) = sum_j a_j w_j^2 / 2, gradient a * w


class Vector(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor(w))


def quadratic(cls, run_config, w):
    cfg = parse_run_config(run_config)
    client = cls(cfg, Vector(w), data=None)
    client.config = registry.get(cfg.strategy).strategy.client_settings(cfg)  # what the server sends
    client.loss = lambda x, y: 0.5 * (A * client.model.w ** 2).sum()
    return client


def one_step(client, lr):
    opt = client.make_optimizer(lr)
    opt.zero_grad(set_to_none=False)
    client.compute_gradient(None, None)
    client.correct_gradient()
    opt.step()


def test_sam_step_by_hand_on_quadratic():
    client = quadratic(FedSAMClient, {"strategy": "fedsam", "fedsam.rho": 0.5}, [3.0, 2.0])
    one_step(client, lr=0.1)
    # g = [3, 4], ||g|| = 5, s_hat = 0.5 g / 5 = [0.3, 0.4], g(w + s_hat) = [3.3, 4.8]
    assert torch.allclose(client.sam.s_hat["w"], torch.tensor([0.3, 0.4]))
    assert torch.allclose(client.model.w.detach(), torch.tensor([3 - 0.33, 2 - 0.48]))


@pytest.mark.parametrize("simulator", [False, True])
def test_fedsmoo_client_step_by_hand(simulator):
    cfg = {"strategy": "fedsmoo", "fedsmoo.rho": 0.5, "fedsmoo.beta": 2.0,
           "fedsmoo.simulator-perturbation": simulator}
    client = quadratic(FedSMOOClient, cfg, [3.0, 2.0])
    payload = {"arrays": {"w": torch.tensor([3.0, 2.0])}, "perturbation": {"w": torch.tensor([-3.0, -4.0])}}
    client.receive(payload, {})
    one_step(client, lr=0.1)
    # S = g - mu - s = [3, 4] - 0 + [3, 4] = [6, 8], s_hat = 0.5 S / 10 = [0.3, 0.4];
    # mu = s_hat - s = [3.3, 4.4]; w = anchor, lambda = 0, so the step is g(w + s_hat) = [3.3, 4.8]
    assert torch.allclose(client.mu["w"], torch.tensor([3.3, 4.4]))
    assert torch.allclose(client.model.w.detach(), torch.tensor([2.67, 1.52]))
    client.after_train(payload, {})
    # lambda_i = -(w_i - w) / beta = [0.33, 0.48] / 2; s_tilde = mu - s_hat = [3, 4] (simulator: mu)
    assert torch.allclose(client.state["dual"]["w"], torch.tensor([0.165, 0.24]))
    assert torch.allclose(client.state["perturbation-dual"]["w"], torch.tensor([3.3, 4.4]))
    sent = client.reply(payload, {})["perturbation"]["w"]
    assert torch.allclose(sent, torch.tensor([3.3, 4.4]) if simulator else torch.tensor([3.0, 4.0]))


def fake_strategy(cls, run_config, w, num_clients):
    cfg = parse_run_config({**run_config, "num-clients": num_clients})
    strategy = cls(cfg, Vector(w))
    strategy.clients = {pid: ClientInfo(100 + pid, 10, 2, False) for pid in range(num_clients)}
    return strategy


def test_fedsmoo_server_update_by_hand_two_clients_of_four():
    strategy = fake_strategy(FedSMOO, {"strategy": "fedsmoo", "fedsmoo.rho": 0.5, "fedsmoo.beta": 2.0},
                             [1.0, 1.0], num_clients=4)
    replies = [Reply(0, {"arrays": {"w": torch.tensor([2.0, 0.0])}, "perturbation": {"w": torch.tensor([2.0, 2.0])}},
                     {"num-examples": 10}),
               Reply(1, {"arrays": {"w": torch.tensor([4.0, 2.0])}, "perturbation": {"w": torch.tensor([4.0, 6.0])}},
                     {"num-examples": 30})]
    strategy.aggregate(1, replies)
    # lambda = -([1, -1] + [3, 1]) / (beta m) = -[4, 0] / 8; w = mean w_i - beta lambda = [3, 1] + [1, 0]
    assert torch.allclose(strategy.dual["w"], torch.tensor([-0.5, 0.0]))
    assert torch.allclose(strategy.global_state["w"], torch.tensor([4.0, 1.0]))
    # S = mean s_tilde = [3, 4], s = r S / ||S|| = 0.5 [3, 4] / 5
    assert torch.allclose(strategy.perturbation["w"], torch.tensor([0.3, 0.4]))


def test_fedcm_server_direction_by_hand():
    strategy = fake_strategy(FedCM, {"strategy": "fedcm", "lr": 0.5}, [1.0, 1.0], num_clients=2)
    replies = [Reply(0, {"arrays": {"w": torch.tensor([0.0, 1.0])}}, {"num-examples": 1, "local-steps": 2}),
               Reply(1, {"arrays": {"w": torch.tensor([0.0, -2.0])}}, {"num-examples": 2, "local-steps": 2})]
    strategy.aggregate(1, replies)
    # w = (1 [0, 1] + 2 [0, -2]) / 3 = [0, -1]; Delta = (w_old - w) / (lr K) = [1, 2] / 1
    assert torch.allclose(strategy.global_state["w"], torch.tensor([0.0, -1.0]))
    assert torch.allclose(strategy.momentum["w"], torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("in_mix", [True, False])
@pytest.mark.parametrize("algo", ["fedcm", "mofedsam"])
def test_fedcm_client_step_weight_decay_by_hand(algo, in_mix):
    """decay-in-mix: v = alpha (g + wd w) + (1 - alpha) Delta; default (authors' simulator):
    v = alpha g + (1 - alpha) Delta + wd w."""
    cfg = {"strategy": algo, f"{algo}.alpha": 0.25, "weight-decay": 0.1, "mofedsam.rho": 0.5,
           f"{algo}.decay-in-mix": in_mix}
    client = quadratic(MoFedSAMClient if algo == "mofedsam" else FedCMClient, cfg, [3.0, 2.0])
    client.receive({"arrays": {"w": torch.tensor([3.0, 2.0])}, "momentum": {"w": torch.tensor([1.0, -2.0])}}, {})
    one_step(client, lr=0.1)
    # fedcm: g = a w = [3, 4]; mofedsam: g(w + s_hat) = [3.3, 4.8] (test_sam_step_by_hand_on_quadratic).
    # in the mix g + wd w adds [0.3, 0.2]: v = 0.25 [3.3, 4.2] + 0.75 [1, -2] = [1.575, -0.45]  (fedcm)
    #                                      v = 0.25 [3.6, 5.0] + 0.75 [1, -2] = [1.65, -0.25]   (mofedsam)
    # after the mix: 0.25 [3, 4] + 0.75 [1, -2] + [0.3, 0.2] = [1.8, -0.3]; mofedsam [1.875, -0.1]
    v = {(True, "fedcm"): [1.575, -0.45], (True, "mofedsam"): [1.65, -0.25],
         (False, "fedcm"): [1.8, -0.3], (False, "mofedsam"): [1.875, -0.1]}[in_mix, algo]
    assert torch.allclose(client.model.w.detach(), torch.tensor([3.0, 2.0]) - 0.1 * torch.tensor(v))


def test_fedcm_step_at_its_fixed_point_is_the_plain_sgd_step():
    """With decay-in-mix, Delta = g + wd w (the fixed point of Delta <- alpha g + (1 - alpha) Delta with
    g regularised): the FedCM step is the plain weight-decayed SGD step for any alpha, decay counted once."""
    w, wd, lr = torch.tensor([3.0, 2.0]), 0.1, 0.1
    plain = quadratic(FedAvgClient, {"weight-decay": wd}, w.tolist())
    one_step(plain, lr)
    for alpha in (0.1, 0.5):
        client = quadratic(FedCMClient, {"strategy": "fedcm", "fedcm.alpha": alpha, "weight-decay": wd,
                                         "fedcm.decay-in-mix": True}, w.tolist())
        client.receive({"arrays": {"w": w}, "momentum": {"w": A * w + wd * w}}, {})
        one_step(client, lr)
        assert torch.allclose(client.model.w.detach(), plain.model.w.detach()), alpha


@pytest.mark.parametrize("algo, reference, alpha_key", [("fedcm", "fedavg", "fedcm.alpha"),
                                                         ("mofedsam", "fedsam", "mofedsam.alpha")])
def test_fedcm_and_mofedsam_with_alpha_one_are_fedavg_and_fedsam(small_config, algo, reference, alpha_key):
    run_config = {**small_config, "num-server-rounds": 2, "fraction-train": 0.5, "fraction-evaluate": 0.0,
                  "weight-decay": 0.01}
    cm = run_local({**run_config, "strategy": algo, alpha_key: 1.0})
    ref = run_local({**run_config, "strategy": reference})
    for k, v in ref.global_state.items():
        assert torch.allclose(cm.global_state[k], v, atol=1e-6), k


def test_fedsmoo_with_rho_zero_is_feddyn(small_config):
    run_config = {**small_config, "num-server-rounds": 3, "fraction-train": 0.5, "fraction-evaluate": 0.0}
    smoo = run_local({**run_config, "strategy": "fedsmoo", "fedsmoo.rho": 0.0, "fedsmoo.beta": 5.0})
    dyn = run_local({**run_config, "strategy": "feddyn", "feddyn.beta": 5.0})
    for k, v in dyn.global_state.items():
        assert torch.allclose(smoo.global_state[k], v, atol=1e-6), k
        if k in dyn.dual:
            assert torch.allclose(smoo.dual[k], dyn.dual[k], atol=1e-6), k
    assert all(v.abs().sum() == 0 for v in smoo.perturbation.values())
    assert [r.get("train-loss") for r in smoo.history] == pytest.approx([r.get("train-loss") for r in dyn.history])


def test_feddyn_with_huge_beta_is_fedavg_on_clients_and_doubles_the_server_step(small_config, monkeypatch):
    """beta -> inf removes the client terms, but not the server's: beta lambda = -mean(w_i - w) for any
    beta, so with full participation round 1 gives w_1 = 2 mean_i w_i - w_0, not FedAvg's mean_i w_i."""
    run_config = {**small_config, "num-server-rounds": 1, "fraction-evaluate": 0.0}
    dyn = run_local({**run_config, "strategy": "feddyn", "feddyn.beta": 1e9})
    monkeypatch.setattr(FedAvg, "weighted", False)
    avg = run_local(run_config)
    w0 = model_for(parse_run_config(run_config)).state_dict()
    for k, v in avg.global_state.items():
        assert torch.allclose(dyn.global_state[k], 2 * v - w0[k], atol=1e-5), k
        assert torch.allclose(1e9 * dyn.dual[k], -(v - w0[k]), atol=1e-5), k


def client_states(grid, name):
    out = []
    for ctx in grid.contexts.values():
        rec = ctx.state.array_records.get(f"state.{name}")
        out.append({k: torch.from_numpy(a.numpy()) for k, a in rec.items()} if rec else None)
    return out


@pytest.mark.parametrize("algo", ["feddyn", "fedsmoo"])
def test_client_duals_persist_across_rounds_and_for_unsampled_clients(small_config, algo):
    """The server's lambda equals (1/m) sum_i lambda_i over all m clients only if every client's
    lambda_i survives the rounds it is not sampled in (a lost state would restart at zero)."""
    run_config = {**small_config, "strategy": algo, "num-server-rounds": 4, "fraction-train": 0.5,
                  "fraction-evaluate": 0.0}
    grid = InProcessGrid(app, 4, run_config)
    strategy = run_local(run_config, grid=grid)
    duals = client_states(grid, "dual")
    assert sum(d is not None for d in duals) >= 3  # 2 of 4 sampled per round, over 4 rounds
    for k, lam in strategy.dual.items():
        total = sum(d[k] for d in duals if d is not None)
        assert torch.allclose(lam, total / 4, atol=1e-6), k
    if algo == "fedsmoo":
        mus = client_states(grid, "perturbation-dual")
        assert [m is None for m in mus] == [d is None for d in duals]
        assert all(m["fc.weight"].abs().sum() > 0 for m in mus if m is not None)


@pytest.mark.parametrize("algo", ["fedsmoo", "fedcm"])  # SCAFFOLD: tests/test_scaffold.py
def test_bytes_per_round_from_the_records(small_config, algo):
    run_config = {**small_config, "num-server-rounds": 1, "fraction-evaluate": 0.0}
    other = run_local({**run_config, "strategy": algo}).history[-1]
    fedavg = run_local(run_config).history[-1]
    ratio = {way: other[f"train-bytes-{way}"] / fedavg[f"train-bytes-{way}"] for way in ("down", "up")}
    if algo == "fedcm":  # momentum direction down, model only up
        assert 1.9 < ratio["down"] <= 2.0 and ratio["up"] == 1.0
    else:
        assert 1.9 < ratio["down"] <= 2.0 and 1.9 < ratio["up"] <= 2.0, ratio


def test_fedadam_matches_flower_formula_by_hand():
    from strategies.fedadam import FedAdam

    strategy = fake_strategy(FedAdam, {"strategy": "fedadam", "fedadam.eta": 0.1, "fedadam.tau": 0.01},
                             [1.0, 1.0], num_clients=1)
    strategy.aggregate(1, [Reply(0, {"arrays": {"w": torch.tensor([3.0, 0.0])}}, {"num-examples": 5})])
    # Delta = [2, -1]; m = 0.1 Delta; v = 0.01 Delta^2; eta_t = eta sqrt(1 - 0.99^2) / (1 - 0.9^2)
    eta_t = 0.1 * math.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2)
    delta = torch.tensor([2.0, -1.0])
    expected = 1.0 + eta_t * 0.1 * delta / (0.1 * delta.abs() + 0.01)
    assert torch.allclose(strategy.global_state["w"], expected)


def test_fedadam_is_flowers_fedadam_bit_for_bit(monkeypatch):
    """Three rounds of three weighted replies: fedapp's FedAdam and Flower's FedAdam, driven by its
    own aggregate_train on the reply messages (the model kept in float32 between rounds), give the
    same global model, bit for bit."""
    from flwr.app import Message, MessageType
    from flwr.serverapp.strategy import FedAdam as FlowerFedAdam
    from flwr.supercore.task_identity import TaskIdentity

    from fedapp.core.records import make_content
    from strategies.fedadam import FedAdam

    strategy = fake_strategy(FedAdam, {"strategy": "fedadam", "fedadam.eta": 0.05, "fedadam.beta-1": 0.8},
                             [0.3, -1.2, 2.5], num_clients=3)
    flower = FlowerFedAdam(eta=0.05, beta_1=0.8, beta_2=0.99, tau=1e-3)
    for ident in ("_task_id", "_run_id", "_node_id"):  # Flower's messages name their task, run and node
        monkeypatch.setattr(TaskIdentity, ident, 1)
    w = strategy.global_state["w"].numpy().copy()
    gen = torch.Generator().manual_seed(0)
    for rnd in (1, 2, 3):
        states = [strategy.global_state["w"] + torch.randn(3, generator=gen) for _ in range(3)]
        strategy.aggregate(rnd, [Reply(pid, {"arrays": {"w": s}}, {"num-examples": 5 + 7 * pid})
                                 for pid, s in enumerate(states)])
        flower.current_arrays = {"w": w}
        msgs = [Message(make_content({"arrays": {"w": s}}, metrics={"num-examples": 5 + 7 * pid}),
                        dst_node_id=100 + pid, message_type=MessageType.TRAIN) for pid, s in enumerate(states)]
        arrays, _ = flower.aggregate_train(rnd, msgs)
        w = arrays["w"].numpy().astype(np.float32)  # Flower computes in float64; the model is float32
        assert torch.equal(strategy.global_state["w"], torch.from_numpy(w)), rnd
