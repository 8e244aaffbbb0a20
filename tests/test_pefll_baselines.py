"""PeFLL's Table 1 baselines: Local, FedRep and pFedHN, checked by hand on tiny image data."""

import numpy as np
import torch

from clients.fedavg import FedAvgClient
from clients.fedrep import FedRepClient
from clients.pefll import PeFLLClient
from fedapp.config import parse_run_config
from fedapp.data import pfedhn_partitions
from fedapp.experiment import ClientData, client_data, dataset, model_for
from fedapp.models import body_head_keys
from strategies.base import weighted_mean
from strategies.fedrep import FedRep
from strategies.local import Local
from strategies.pfedhn import PFedHN
from tests.test_pefll import image_config, run_recorded  # noqa: F401  (fixture)


def test_local_clients_train_alone_and_send_nothing(image_config):
    run_config = {**image_config, "strategy": "local", "fraction-train": 1.0, "local-steps": 3,
                  "fraction-evaluate": 1.0}
    strategy, grid = run_recorded(run_config)
    cfg = parse_run_config(run_config)
    row = strategy.history[-1]
    assert row["replies"] == 6 and row["train-params-down"] == row["train-params-up"] == 0
    client = FedAvgClient(cfg, model_for(cfg), client_data(cfg, 2))  # the same training, without Flower
    expected, _ = client.fit({"arrays": model_for(cfg).state_dict()},
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
        out, m = c.fit({"body": {k: init[k] for k in body}}, {**FedRep.client_settings(cfg), "server-round": 1, "lr": cfg.lr,
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
    client.config = strategy.train_config(0, 1)
    assert client.head_steps() == 5 * 3  # 10 examples in batches of 4: 3 a pass
    client.config = strategy.eval_config(0, 1)
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

    settings = sorted(p.parent for p in (Path(__file__).parents[1] / "simulations" / "pefll").glob("*/pefll.toml"))
    assert len(settings) >= 7
    for setting in settings:
        files = sorted(setting.glob("*.toml"))
        assert {f.stem for f in files} == {"pefll", "fedavg", "local", "fedrep", "pfedhn"}, setting.name
        for f in files:
            keys = tomllib.loads(f.read_text())
            assert parse_run_config(keys).strategy == f.stem, f
            if setting.name.startswith("table1-cifar") and f.stem != "local":  # 5% of all clients per step,
                n = keys["num-clients"]                                          # drawn from the 90% seen
                assert round(keys["fraction-train"] * round(0.9 * n)) == n // 20, f
