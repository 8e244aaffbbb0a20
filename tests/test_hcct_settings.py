"""HCCT's experimental settings (Table III and the authors' code): models, client sizes, options."""

import math

import numpy as np
import pytest
import torch

from fedapp.runtime.registry import parse_run_config
from fedapp.core.data.partitioners import half_classes_test_split, hcct_shard_counts, partition_indices
from fedapp.core.experiment import dataset, model_for
from fedapp.core.models import build_model
from strategies.ifca import IFCA
from fedapp.runtime.inprocess import run_local
from simulations.hcct.report import errors


def test_authors_models_have_their_parameter_counts():
    cnn = build_model("hcct-cnn", (3, 32, 32), 10)
    mlp = build_model("hcct-mlp", (1, 28, 28), 10)
    assert sum(p.numel() for p in cnn.parameters()) == 1_126_950
    assert sum(p.numel() for p in mlp.parameters()) == 50_890
    assert [k for k in cnn.state_dict()][::2] == [f"conv{i}.weight" for i in range(1, 5)] + ["fc1.weight", "fc.weight"]
    assert list(mlp.state_dict()) == ["fc1.weight", "fc1.bias", "fc.weight", "fc.bias"]
    cnn.eval()
    assert cnn(torch.zeros(2, 3, 32, 32)).shape == (2, 10)
    # the authors' forward ends in a softmax (rows sum to one); ours gives the logits under it
    torch.manual_seed(0)
    soft = build_model("hcct-mlp-softmax", (1, 28, 28), 10).eval()
    torch.manual_seed(0)
    plain = build_model("hcct-mlp", (1, 28, 28), 10).eval()
    x = torch.rand(3, 1, 28, 28)
    assert torch.allclose(soft(x), plain(x).softmax(1))


def authors_rule(draws, num_shards=100):
    """utils/sampling.py, imbalanced(): floor(r / sum r * num_shards), a 0 raised to 1."""
    counts = [math.floor(r / sum(draws) * num_shards) for r in draws]
    return [c if c > 0 else 1 for c in counts]


def test_shard_counts_follow_the_authors_rule_without_clamping():
    draws = np.abs(np.random.default_rng(0).normal(0, 1.0, 10))
    assert hcct_shard_counts(draws, 100).tolist() == authors_rule(draws.tolist())
    tiny = np.array([0.001, 0.002, 1.0, 2.0, 3.0])
    assert hcct_shard_counts(tiny, 100).tolist() == [1, 1, 16, 33, 49]  # floors 0, 0, 16, 33, 49
    # the same draws through the partitioner (CIFAR-10 sizes: 100 shards of 500): the data-poor clients
    # stay (1, 2, 2 shards), where shards-halfnormal's clamp of each draw to >= 1 evens them out
    labels = np.repeat(np.arange(10), 5000)
    parts = partition_indices("hcct-shards", labels, 10, 0, num_shards=100, sigma=1.0)
    assert [len(p) // 500 for p in parts] == authors_rule(draws.tolist()) == [2, 2, 10, 1, 8, 5, 21, 15, 11, 20]
    assert all(len(p) % 500 == 0 and len(np.unique(labels[p])) <= len(p) // 500 for p in parts)
    assert len(np.unique(np.concatenate(parts))) == 95 * 500  # disjoint; the 5 shards left over unused
    clamped = sorted(len(p) // 500 for p in partition_indices("shards-halfnormal", labels, 10, 0, num_shards=100))
    assert clamped[0] >= 5 and clamped != sorted(authors_rule(draws.tolist()))


def test_table3_client_sizes_come_from_the_train_ratio():
    # CIFAR-10: 20% of each client's shards for training, avg 950 (Table III); FMNIST IID half-normal
    # sizes with 4% for training, avg 120 (Table III)
    cifar = partition_indices("hcct-shards", np.repeat(np.arange(10), 5000), 10, 0, num_shards=100)
    assert sum(len(p) for p in cifar) * 0.2 / 10 == 950
    fmnist = partition_indices("hcct-quantity", np.repeat(np.arange(10), 6000), 20, 0, sigma=1.0)
    assert abs(sum(len(p) for p in fmnist) * 0.04 / 20 - 120) < 0.1
    assert len(np.unique(np.concatenate(fmnist))) == sum(len(p) for p in fmnist)
    assert parse_run_config({"test-fraction": 0.96}).test_fraction == 0.96


def test_first_round_global_puts_everyone_in_one_group(small_config):
    run = run_local({**small_config, "strategy": "hcct", "hcct.alpha": 0.0, "hcct.first-round": "global"})
    assert [r["groups"] for r in run.history[1:]] == [[[0, 1, 2, 3]], [[0], [1], [2], [3]]]


def test_new_clients_arrive_on_schedule(small_config):
    run = run_local({**small_config, "strategy": "hcct", "hcct.alpha": 0.0, "num-server-rounds": 5,
                     "hcct.initial-clients": 2, "hcct.new-clients": 1, "hcct.arrival-every": 2})
    assert [r["groups"] for r in run.history[1:]] == [[[0], [1]], [[0], [1]], [[0], [1], [2]],
                                                      [[0], [1], [2]], [[0], [1], [2], [3]]]
    assert [sorted(r["fed-client-accuracy"]) for r in run.history[1:]] == [[0, 1], [0, 1], [0, 1, 2],
                                                                           [0, 1, 2], [0, 1, 2, 3]]


def test_ifca_identical_init_option(small_config):
    for same in (True, False):
        cfg = parse_run_config({**small_config, "strategy": "ifca", "ifca.clusters": 3, "ifca.identical-init": same})
        models = IFCA(cfg, model_for(cfg), dataset(cfg)).cluster_models
        assert all(torch.equal(models[0][k], models[2][k]) for k in models[0]) == same


def test_both_error_metrics():
    history = [{"round": 1, "fed-accuracy": 0.5, "fed-client-accuracy": {0: 0.6, 1: 0.2}, "round-seconds": 2.0},
               {"round": 2, "fed-accuracy": 0.5, "fed-client-accuracy": {0: 0.5, 1: 0.4}, "round-seconds": 4.0}]
    e = errors(history)
    assert e["error"] == pytest.approx(55.0)  # after the last epoch: (50 + 60) / 2
    assert e["error-best"] == pytest.approx(50.0)  # each client's best epoch: (40 + 60) / 2
    assert e["client-error-best"] == {0: pytest.approx(40.0), 1: pytest.approx(60.0)}
    assert e["seconds-per-epoch"] == 3.0


def test_hcct_p_group_head_start_is_the_authors(small_config):
    """head-start "group": members keep the group's body with their own trained heads, and the next
    group start averages those heads (it is what the client trains from)."""
    from strategies.base import weighted_mean

    run = run_local({**small_config, "strategy": "hcct-p", "hcct.groups": "0,1;2,3", "hcct.head-start": "group",
                     "num-server-rounds": 1})
    m0, m1 = run.models[0], run.models[1]
    assert torch.equal(m0["fc1.weight"], m1["fc1.weight"]) and not torch.equal(m0["fc.weight"], m1["fc.weight"])
    sizes = [run.clients[p].num_train for p in (0, 1)]
    assert torch.allclose(run.group_start((0, 1))["fc.weight"], weighted_mean([m0, m1], sizes)["fc.weight"])
    # the default keeps the head on the client: the server holds bodies only
    own = run_local({**small_config, "strategy": "hcct-p", "hcct.groups": "0,1;2,3", "num-server-rounds": 1,
                     "run-name": "own"})
    assert "fc.weight" not in own.models[0]


def test_same_round_newcomer_is_placed_when_it_arrives(small_config):
    """newcomer = "same-round" (the authors'): the arriving client first trains from the initial model
    and joins a group in its arrival round; "next-round" (default) leaves it alone that round."""
    base = {**small_config, "strategy": "hcct", "hcct.alpha": 1e6, "num-server-rounds": 3,
            "hcct.initial-clients": 3, "hcct.new-clients": 1, "hcct.arrival-every": 2}
    later = run_local(base)
    assert [r["groups"] for r in later.history[1:]] == [[[0], [1], [2]], [[0, 1, 2]], [[0, 1, 2], [3]]]
    now = run_local({**base, "hcct.newcomer": "same-round", "run-name": "now"})
    assert [r["groups"] for r in now.history[1:]] == [[[0], [1], [2]], [[0, 1, 2]], [[0, 1, 2, 3]]]
    assert now.history[-1]["train-bytes-down"] > later.history[-1]["train-bytes-down"]  # the extra pass


def test_independent_with_partial_participation_keeps_every_client_alone(small_config):
    run = run_local({**small_config, "strategy": "independent", "fraction-train": 0.5, "num-server-rounds": 1})
    assert run.history[1]["groups"] == [[0], [1], [2], [3]]
    assert len(run.updates) == 2  # half the clients trained; the others keep their models


def test_table2_local_test_from_the_test_split():
    # Table II: each client trains on its whole share; its local test set is the test split cut the
    # same way (clients 1 and 2 share classes 0-4 as 1:4, on different examples; client 3 classes 5-9)
    from fedapp.core.config import ConfigError
    from fedapp.core.experiment import client_data, partitions

    cfg = parse_run_config({"dataset": "synthetic", "partition": "half-classes", "num-clients": 3, "seed": 1,
                            "test-fraction": 0.5, "local-test": "test-split"})
    ds = dataset(cfg)
    data = [client_data(cfg, p) for p in range(3)]
    for p, d in enumerate(data):
        assert torch.equal(d.train_y, ds.train_y[partitions(cfg)[p]])  # test-fraction unused
    held = np.unique(ds.train_y.numpy())  # this synthetic draw lacks classes 1, 5, 7, 8 (0 in training only)
    first = set(held[: len(held) // 2].tolist())  # the halves of the training classes, whatever the test split holds
    test = [np.bincount(d.test_y.numpy(), minlength=ds.num_classes) for d in data]
    total = np.bincount(ds.test_y.numpy(), minlength=ds.num_classes)
    assert np.array_equal(test[0] + test[1] + test[2], total)  # every test example once
    for c in range(ds.num_classes):
        if c in first:
            assert test[2][c] == 0 and abs(test[0][c] - total[c] / 5) <= 1
        else:
            assert test[0][c] == test[1][c] == 0
    for d in data:  # a client is tested on the classes it trains on
        assert set(d.test_y.tolist()) <= set(d.train_y.tolist())
    with pytest.raises(ConfigError, match="'local-test' = 'test-split' needs partition 'half-classes'"):
        parse_run_config({"partition": "iid", "local-test": "test-split"})
    # CIFAR-10's class sizes over 100 (5,000 / 1,000 per class): 5,000 / 20,000 / 25,000 training and
    # 1,000 / 4,000 / 5,000 test examples
    train = partition_indices("half-classes", np.repeat(np.arange(10), 50), 3, 0)
    test = half_classes_test_split(np.repeat(np.arange(10), 50), np.repeat(np.arange(10), 10), 3, 0)
    assert [len(p) for p in train] == [50, 200, 250] and [len(p) for p in test] == [10, 40, 50]
