"""PeFLL's Table 1 baselines: Local, FedRep, pFedHN, Per-FedAvg, pFedMe and kNN-Per, checked by hand
on tiny image data and against FL-bench, on whose code PeFLL built the last three."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from clients.fedavg import FedAvgClient
from clients.fedrep import FedRepClient
from clients.knnper import KNNPerClient, knn_probabilities
from clients.pefll import PeFLLClient
from clients.perfedavg import PerFedAvgClient
from clients.pfedme import PFedMeClient
from fedapp.runtime.registry import parse_run_config
from fedapp.core.data import pfedhn_partitions
from fedapp.core.experiment import ClientData, client_data, dataset, model_for
from fedapp.core.models import body_head_keys
from simulations.pefll.flbench_golden import SHAPES, batches, client_tensors, init_value
from strategies.base import weighted_mean
from fedapp.server.replies import Reply
from strategies.fedrep import FedRep
from strategies.knnper import KNNPer
from strategies.local import Local
from strategies.perfedavg import PerFedAvg
from strategies.pfedhn import PFedHN
from strategies.pfedme import PFedMe
from tests.test_pefll import image_config, run_recorded  # noqa: F401  (fixture)


def test_local_clients_train_alone_and_send_nothing(image_config):
    run_config = {**image_config, "strategy": "local", "fraction-train": 1.0, "local-steps": 3,
                  "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    cfg = parse_run_config(run_config)
    row = strategy.history[-1]
    assert row["replies"] == 6 and row["train-params-down"] == row["train-params-up"] == 0
    client = FedAvgClient(cfg, model_for(cfg), client_data(cfg, 2))  # the same training, without Flower
    expected, _ = client.answer_train({"arrays": model_for(cfg).state_dict()},
                             {**Local.client_settings(cfg), "server-round": 1, "lr": cfg.lr})
    kept = grid.contexts[103].state["state.model"]
    for k, v in expected["arrays"].items():
        torch.testing.assert_close(torch.from_numpy(kept[k].numpy()), v)
    assert 0 <= row["fed-unseen-accuracy"] <= 1 and "fed-seen-acc-client-std" in row


def test_fedrep_averages_bodies_and_keeps_heads(image_config):
    run_config = {**image_config, "strategy": "fedrep", "fraction-train": 1.0, "local-steps": 2,
                  "fedrep.head-steps": 2, "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    cfg = parse_run_config(run_config)
    body, head = body_head_keys(strategy.model)
    assert head == ["fc.weight", "fc.bias"]
    seen = [p for p in range(6) if p not in strategy.unseen]
    bodies, weights = [], []
    for pid in seen:  # head steps with the body frozen, then body steps with the head frozen
        c = FedRepClient(cfg, model_for(cfg), client_data(cfg, pid))
        init = model_for(cfg).state_dict()
        out, m = c.answer_train({"body": {k: init[k] for k in body}}, {**FedRep.client_settings(cfg), "server-round": 1, "lr": cfg.lr,
                                                               "head-steps": 2, "head-epochs": 0})
        assert not torch.equal(c.state["head"]["fc.weight"], init["fc.weight"])
        bodies.append(out["body"])
        weights.append(m["num-examples"])
        assert torch.equal(torch.from_numpy(grid.contexts[101 + pid].state["state.head"]["fc.weight"].numpy()),
                           c.state["head"]["fc.weight"])
    for k, v in weighted_mean(bodies, weights).items():
        torch.testing.assert_close(strategy.global_state[k], v)
    row = strategy.history[-1]
    n_body = sum(strategy.global_state[k].numel() for k in body)
    assert row["train-params-down"] == row["train-params-up"] == len(seen) * n_body
    assert all("state.head" not in grid.contexts[101 + p].state.array_records for p in strategy.unseen)
    assert 0 <= row["fed-unseen-accuracy"] <= 1


def test_pfedhn_step_is_the_vjp_of_each_clients_delta(image_config):
    run_config = {**image_config, "strategy": "pfedhn", "pfedhn.k": 3, "pfedhn.beta": 0.05,
                  "pfedhn.new-client-rounds": 2, "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    cfg = parse_run_config(run_config)
    ref = PFedHN(cfg, model_for(cfg), dataset(cfg))
    sampled = sorted({n - 101 for n, m, p, _ in grid.sent if m == "train"} - {p for p in strategy.unseen})
    assert len(sampled) == 3
    surrogate = 0.0
    for pid in sampled:
        theta = ref.hnet(ref.embed.weight[pid])
        client = PeFLLClient(cfg, model_for(cfg), client_data(cfg, pid))
        delta, _ = client.phase_train({"theta": {k: t.detach() for k, t in theta.items()}},
                                      {"server-round": 1, **ref.sgd_config()})
        surrogate = surrogate + sum((theta[k] * delta["delta"][k]).sum() for k in theta) / len(sampled)
        grad_e = torch.autograd.grad(sum((theta[k] * delta["delta"][k]).sum() for k in theta), ref.embed.weight,
                                     retain_graph=True)[0][pid]
        torch.testing.assert_close(strategy.embed.weight[pid].detach(), ref.embed.weight[pid].detach() + grad_e)
    grads = torch.autograd.grad(surrogate, list(ref.hnet.parameters()))
    for p, new, g in zip(ref.hnet.parameters(), strategy.hnet.parameters(), grads):
        torch.testing.assert_close(new.detach(), (1 - 2 * 0.05 * 1e-3) * p.detach() + g, rtol=1e-4, atol=1e-6)
    untouched = [p for p in range(6) if p not in sampled]
    assert torch.equal(strategy.embed.weight[untouched], ref.embed.weight[untouched])
    # each new client fits its embedding over new-client-rounds round trips, then evaluates
    for pid in strategy.unseen:
        assert [m for n, m, p, _ in grid.sent if n == 101 + pid] == ["query", "train", "train", "evaluate"]
    assert 0 <= strategy.history[-1]["fed-unseen-accuracy"] <= 1


def test_fedrep_epochs_as_the_pefll_paper_runs_it():
    """Head 5 epochs per round and a new client's fresh head 20 epochs, counted in full batches."""
    cfg = parse_run_config({"strategy": "fedrep", "batch-size": 4, "fedrep.head-epochs": 5,
                            "fedrep.new-head-epochs": 20})
    strategy = FedRep(cfg, model_for(cfg))
    assert strategy.head_config() == {"head-steps": 50, "head-epochs": 5}
    assert strategy.head_config(new=True) == {"head-steps": 50, "head-epochs": 20}
    data = ClientData(0, torch.zeros(10, 60), torch.zeros(10, dtype=torch.long), torch.zeros(2, 60),
                      torch.zeros(2, dtype=torch.long), 10, (), (), False)
    client = FedRepClient(cfg, model_for(cfg), data)
    client.config = strategy.client_config("train", 0, 1)
    assert client.head_steps() == 5 * 3  # 10 examples in batches of 4: 3 a pass
    client.config = strategy.client_config("evaluate", 0, 1)
    assert client.head_steps() == 20 * 3
    client.config = {"head-steps": 7, "head-epochs": 0}
    assert client.head_steps() == 7


def test_pfedhn_class_split_with_validation_and_test_set():
    """The authors' data recipe: each class to 2n/C clients, equal shares; validation held out of
    the training set evenly per class; test examples of the client's classes from the test set."""
    train_labels = np.repeat(np.arange(10), 50)
    test_labels = np.repeat(np.arange(10), 10)
    train, val, test = pfedhn_partitions(train_labels, test_labels, 10, 2, seed=3)
    holders = np.zeros(10, int)
    for i in range(10):
        classes = set(train_labels[train[i]])
        assert len(classes) == 2 and set(train_labels[val[i]]) == classes == set(test_labels[test[i]])
        assert (len(train[i]), len(val[i]), len(test[i])) == (40, 10, 10)  # 100 of 500 held out: 10 a class
        holders[list(classes)] += 1
    assert (holders == 2).all()
    everything = np.concatenate(train + val)
    assert len(np.unique(everything)) == len(everything)  # disjoint, validation never trained on
    assert len(np.unique(np.concatenate(test))) == 100


def test_pefll_settings_files_parse():
    """Every method file of every PeFLL setting is a valid run config (bad keys fail in one line)."""
    import tomllib
    from pathlib import Path

    pefll = Path(__file__).parents[1] / "simulations" / "pefll"
    settings = sorted([*pefll.glob("table1-*"), pefll / "cifar10-100c-authors"])
    assert len(settings) == 8
    for setting in settings:
        files = sorted(setting.glob("*.toml"))
        assert {"pefll", "fedavg", "local", "fedrep", "pfedhn", "perfedavg", "pfedme", "knnper"} <= {
            f.stem for f in files}, setting.name
        for f in files:
            keys = tomllib.loads(f.read_text())
            assert parse_run_config(keys).strategy == f.stem.removesuffix("-paper"), f  # pefll-paper: the paper's
            if setting.name.startswith("table1-cifar") and f.stem != "local":  # 5% of all clients per step,
                n = keys["num-clients"]                                          # drawn from the 90% seen
                assert round(keys["fraction-train"] * round(0.9 * n)) == n // 20, f


# ---- Per-FedAvg, pFedMe and kNN-Per against FL-bench ---------------------------------------------
FLB = json.loads((Path(__file__).parent / "data" / "flbench_golden.json").read_text())


class TinyNet(torch.nn.Module):
    """simulations/pefll/flbench_golden.py's network: its body ends in the ReLU, so the classifier's
    input (our kNN features) is FL-bench's ``get_last_features``."""

    head = "classifier"

    def __init__(self):
        super().__init__()
        self.base = torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU())
        self.classifier = torch.nn.Linear(8, 3)
        self.load_state_dict({k: torch.from_numpy(init_value(k)) for k in SHAPES})

    def forward(self, x):
        return self.classifier(self.base(x))


def golden_tensors(params):
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in params.items()}


def assert_params(got, want):
    for k, v in golden_tensors(want).items():
        torch.testing.assert_close(got[k], v, rtol=1e-5, atol=1e-6)


def golden_client(name, cls, strategy_cls, pid, state=None):
    """Client ``pid`` of the golden setting with its recorded batches in their order, and its message
    config (one epoch, lr 0.05, momentum 0.9 and each method's settings as there)."""
    s = FLB["setting"]
    cfg = parse_run_config({"strategy": name, "batch-size": 4, "lr": s["lr"], "momentum": s["momentum"],
                            "perfedavg.beta": s["perfedavg_beta"], "pfedme.lambda": s["pfedme_lambda"],
                            "pfedme.k": s["pfedme_k"], "pfedme.personal-lr": s["pfedme_personal_lr"],
                            "pfedme.mu": s["pfedme_mu"], "pfedme.beta": s["pfedme_beta"],
                            "knnper.scale": s["knn_scale"]})
    d = {k: torch.from_numpy(v) for k, v in client_tensors(pid).items()}
    client = cls(cfg, TinyNet(), ClientData(pid, d["train_x"], d["train_y"], d["test_x"], d["test_y"], 3, (), (),
                                            False), state)

    class Replay:  # FL-bench's loader: the recorded batches, epoch after epoch
        def __init__(self, seed):
            self.queue = []

        def next_batch(self):
            self.queue = self.queue or list(batches(pid))
            b = torch.tensor(self.queue.pop(0))
            return d["train_x"][b], d["train_y"][b]

    client.loader = Replay
    config = {**strategy_cls.client_settings(cfg), "server-round": 1, "lr": s["lr"]}
    return cfg, client, config


def initial():
    return TinyNet().state_dict()


def golden_replies(name, client_cls, strategy_cls, check):
    """Both golden clients' replies to the initial model, each checked by ``check(pid, out, client)``."""
    replies = []
    for pid in range(2):
        cfg, c, config = golden_client(name, client_cls, strategy_cls, pid)
        out, m = c.answer_train({"arrays": initial()}, config)
        check(pid, out, c)
        replies.append(Reply(pid, out, m))
    return cfg, replies


@pytest.mark.parametrize("name", ["perfedavg", "pfedme", "knnper"])
def test_matches_fl_bench(name):
    """Our clients and aggregation against FL-bench's on simulations/pefll/flbench_golden.py's setting
    (tests/data/flbench_golden.json), float tolerance; each documented difference asserted."""
    if name == "perfedavg":  # first-order steps of one epoch, unweighted mean, one epoch of fine-tuning
        g = FLB["perfedavg"]
        cfg, replies = golden_replies(name, PerFedAvgClient, PerFedAvg,
                                      lambda pid, out, c: assert_params(out["arrays"], g["fitted"][pid]))
        assert g["weights"] == [1, 1] and [r.num_examples for r in replies] == [20, 16]
        strategy = PerFedAvg(cfg, TinyNet())
        strategy.aggregate(1, replies)
        assert_params(strategy.global_state, g["global"])
        cfg, c, config = golden_client(name, PerFedAvgClient, PerFedAvg, 0)
        c.evaluate({"arrays": golden_tensors(g["global"])}, {**strategy.client_config("evaluate", 0, 1), "server-round": 1})
        assert_params(c.model.state_dict(), g["finetuned"])
    elif name == "pfedme":  # w replied, theta kept; the server's beta-mix of the n_i-weighted mean
        g = FLB["pfedme"]

        def check(pid, out, c):
            assert_params(out["arrays"], g["local"][pid])
            assert_params(c.state["personal"], g["personal"][pid])
            # documented difference: FL-bench's client returns the personal model the server sent it (its
            # server never stores theta), so it evaluates the initial model; ours evaluates theta
            assert_params(initial(), g["returned-personal"][pid])

        cfg, replies = golden_replies(name, PFedMeClient, PFedMe, check)
        assert [r.num_examples for r in replies] == g["weights"]
        strategy = PFedMe(cfg, TinyNet())
        strategy.aggregate(1, replies)
        assert_params(strategy.global_state, g["global"])
    else:  # the kNN probabilities; documented difference: FL-bench mixes them with logits, we with probabilities
        g, s = FLB["knnper"], FLB["setting"]
        cfg, c, config = golden_client(name, KNNPerClient, KNNPer, 0)
        c.config = config
        _, train_feats = c.train_features()
        logits, feats = c.features(c.data.test_x)
        knn = knn_probabilities(feats, train_feats, c.data.train_y, s["knn_k"], s["knn_scale"], 3)
        torch.testing.assert_close(knn, torch.tensor(g["knn-probabilities"], dtype=torch.float32), rtol=1e-5, atol=1e-6)
        theirs = s["knn_weight"] * knn + (1 - s["knn_weight"]) * logits
        y = c.data.test_y
        assert F.cross_entropy(theirs, y).item() == pytest.approx(g["loss"], rel=1e-5)
        assert 100 * (theirs.argmax(1) == y).float().mean().item() == pytest.approx(g["accuracy"])
        ours = c.mixture(logits, feats, train_feats, c.data.train_y, s["knn_k"], s["knn_weight"])
        torch.testing.assert_close(ours, s["knn_weight"] * knn + (1 - s["knn_weight"]) * logits.softmax(1))
        torch.testing.assert_close(ours.sum(1), torch.ones(len(y)))


def test_perfedavg_fine_tunes_every_client_and_averages_unweighted(image_config):  # noqa: F811
    run_config = {**image_config, "strategy": "perfedavg", "fraction-train": 1.0, "local-steps": 4,
                  "perfedavg.beta": 0.02, "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    cfg = parse_run_config(run_config)
    seen = [p for p in range(6) if p not in strategy.unseen]
    replies = []
    for pid in seen:  # 4 batches: 2 first-order iterations from the initial model
        c = PerFedAvgClient(cfg, model_for(cfg), client_data(cfg, pid))
        out, m = c.answer_train({"arrays": model_for(cfg).state_dict()},
                       {**PerFedAvg.client_settings(cfg), "server-round": 1, "lr": cfg.lr})
        replies.append(out["arrays"])
    for k, v in weighted_mean(replies, [1.0] * len(seen)).items():  # every client counts once
        torch.testing.assert_close(strategy.global_state[k], v)
    # evaluation: the global model fine-tuned one epoch on the client's data, seen or new, nothing kept
    c = PerFedAvgClient(cfg, model_for(cfg), client_data(cfg, min(strategy.unseen)))
    config = {**strategy.client_config("evaluate", 0, 1), "server-round": 1}
    _, metrics = c.evaluate({"arrays": strategy.global_state}, config)
    assert not torch.equal(c.model.state_dict()["fc.weight"], strategy.global_state["fc.weight"])
    assert c.state == {} and all("state.model" not in ctx.state.array_records for ctx in grid.contexts.values())
    assert 0 <= metrics["accuracy"] <= 1


def test_pfedme_keeps_theta_mixes_w_and_fits_new_clients(image_config):  # noqa: F811
    run_config = {**image_config, "strategy": "pfedme", "fraction-train": 1.0, "local-steps": 2, "pfedme.k": 2,
                  "pfedme.beta": 0.5, "pfedme.new-epochs": 1, "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    cfg = parse_run_config(run_config)
    init = model_for(cfg).state_dict()
    seen = [p for p in range(6) if p not in strategy.unseen]
    ws, ns = [], []
    for pid in seen:
        c = PFedMeClient(cfg, model_for(cfg), client_data(cfg, pid))
        out, m = c.answer_train({"arrays": init}, {**PFedMe.client_settings(cfg), "server-round": 1, "lr": cfg.lr})
        ws.append(out["arrays"])
        ns.append(m["num-examples"])
        kept = grid.contexts[101 + pid].state["state.personal"]
        for k, v in c.state["personal"].items():  # theta stays on the client, w goes to the server
            torch.testing.assert_close(torch.from_numpy(kept[k].numpy()), v)
        assert not torch.equal(c.state["personal"]["fc.weight"], out["arrays"]["fc.weight"])
    for k, v in weighted_mean(ws, ns).items():  # w_{t+1} = (1 - beta) w_t + beta * mean
        torch.testing.assert_close(strategy.global_state[k], 0.5 * init[k] + 0.5 * v)
    assert all("state.personal" not in grid.contexts[101 + p].state.array_records for p in strategy.unseen)
    pid = min(strategy.unseen)  # a new client fits theta at evaluation: not the global model's accuracy
    c = PFedMeClient(cfg, model_for(cfg), client_data(cfg, pid))
    c.evaluate({"arrays": strategy.global_state}, {**strategy.client_config("evaluate", pid, 1), "server-round": 1})
    assert not torch.equal(c.model.state_dict()["fc.weight"], strategy.global_state["fc.weight"])


def test_knnper_cross_validation_picks_what_predicts():
    """Separable features and a clueless model (uniform): the smallest weight that lets the kNN decide,
    0.1 at k = 5; random features and a model that knows the labels: weight 0."""
    cfg = parse_run_config({"strategy": "knnper", "knnper.folds": 4})
    data = ClientData(0, torch.zeros(40, 60), torch.arange(40) % 2, torch.zeros(2, 60), torch.zeros(2, dtype=torch.long),
                      2, (), (), False)
    c = KNNPerClient(cfg, model_for(cfg, data), data)
    c.config = KNNPer.client_settings(cfg)
    y = data.train_y
    separable = torch.nn.functional.one_hot(y, 2).float() * 5 + 0.01 * torch.randn(40, 2)
    assert c.choose(torch.zeros(40, 2), separable, y, seed=0) == (5, 0.1)
    knowing = torch.nn.functional.one_hot(y, 2).float() * 10
    assert c.choose(knowing, torch.randn(40, 2), y, seed=0) == (5, 0.0)


@pytest.mark.parametrize("key,value", [("perfedavg.beta", 0.0), ("perfedavg.finetune-epochs", -1), ("pfedme.k", 0),
                                       ("pfedme.lambda", -1.0), ("pfedme.beta", 3.0), ("knnper.scale", 0.0),
                                       ("knnper.folds", 1)])
def test_new_baselines_refuse_bad_keys_in_one_line(key, value):
    from fedapp.core.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_run_config({"strategy": key.split(".")[0], key: value})
    assert f"'{key}'" in str(err.value) and "\n" not in str(err.value)
