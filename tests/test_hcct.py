"""HCCT: the partition rule on hand-built updates, and per-group models end to end."""

import itertools
import math

import numpy as np
import pytest
import torch

import clients.base
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import InProcessGrid, run_local
from strategies.base import weighted_mean
from strategies.hcct import group_utility, hierarchical_partition, merge_benefit


def brute_utility_sum(members, updates, sizes, alpha):
    """Sum_i U_i written out client by client, independently of strategies.hcct."""
    d_g = sum(sizes[i] for i in members)
    g_g = np.zeros_like(updates[members[0]])
    for i in members:
        g_g = g_g + sizes[i] / d_g * updates[i]
    total = 0.0
    for i in members:
        cos = float(np.dot(updates[i], g_g) / (np.linalg.norm(updates[i]) * np.linalg.norm(g_g)))
        total += -(alpha[i] if isinstance(alpha, dict) else alpha) / d_g + cos
    return total


def brute_greedy(updates, sizes, alpha):
    """Algorithm 2 without caching: every step re-evaluates every pair by brute force."""
    groups = [(i,) for i in sorted(updates)]
    while len(groups) > 1:
        def gain(pair):
            a, b = pair
            return (brute_utility_sum(a + b, updates, sizes, alpha) - brute_utility_sum(a, updates, sizes, alpha)
                    - brute_utility_sum(b, updates, sizes, alpha))
        a, b = max(itertools.combinations(groups, 2), key=gain)
        if gain((a, b)) <= 0:
            break
        groups = [g for g in groups if g not in (a, b)] + [tuple(sorted(a + b))]
    return sorted(groups, key=lambda g: g[0])


def random_instance(seed, n=7, dim=20):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(3, dim))
    updates = {i: centres[i % 3] + 0.6 * rng.normal(size=dim) for i in range(n)}
    sizes = {i: float(rng.integers(50, 2000)) for i in range(n)}
    return updates, sizes


# Fig. 2 of the paper illustrates Algorithm 2 as a dendrogram: clients 1 and 2 merge first, then
# clients 4 and 5, then client 3 joins {1, 2}; merging {1, 2, 3} with {4, 5} would lower the summed
# utility, so two groups remain. Construction: equal sizes D_i = 100, so every merge gains exactly
# alpha/100 = 1 in the data term (-alpha |G| / D_G = -alpha/100 for any group); the merge order is then
# set by the cosine loss. 1 and 2 are 5.7 deg apart, 4 and 5 8.5 deg, 3 is 24 deg from {1, 2}, and
# {1, 2, 3} is orthogonal to {4, 5} (cosine loss 1.4 > 1).
FIG2_UPDATES = {1: np.array([1.0, 0.05, 0.0]), 2: np.array([1.0, -0.05, 0.0]), 3: np.array([1.0, 0.5, 0.0]),
                4: np.array([0.0, 0.0, 1.0]), 5: np.array([0.0, 0.15, 1.0])}
FIG2_SIZES = dict.fromkeys(FIG2_UPDATES, 100.0)


def test_fig2_merge_sequence():
    trace = []
    groups = hierarchical_partition(FIG2_UPDATES, FIG2_SIZES, alpha=100.0, trace=trace)
    assert [tuple(sorted(a + b)) for a, b, _ in trace] == [(1, 2), (4, 5), (1, 2, 3)]
    assert groups == [(1, 2, 3), (4, 5)]
    # the benefits are positive and shrink: alpha/100 = 1 minus the cosine loss of each merge
    gains = [g for _, _, g in trace]
    assert gains[0] == pytest.approx(1 - 2 * (1 - np.cos(np.arctan(0.05))), abs=1e-9)
    assert 1 > gains[0] > gains[1] > gains[2] > 0
    assert merge_benefit((1, 2, 3), (4, 5), FIG2_UPDATES, FIG2_SIZES, 100.0) < 0


@pytest.mark.parametrize("seed", range(4))
def test_alpha_limits(seed):
    updates, sizes = random_instance(seed)
    assert hierarchical_partition(updates, sizes, alpha=1e-9) == [(i,) for i in range(7)]
    assert hierarchical_partition(updates, sizes, alpha=1e7) == [tuple(range(7))]


@pytest.mark.parametrize("seed", range(4))
def test_benefit_and_cached_greedy_match_brute_force(seed):
    updates, sizes = random_instance(seed)
    rng = np.random.default_rng(seed + 100)
    for _ in range(20):
        perm = [int(i) for i in rng.permutation(7)]
        k, m = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        a, b = tuple(perm[:k]), tuple(perm[k:k + m])
        brute = (brute_utility_sum(a + b, updates, sizes, 300.0) - brute_utility_sum(a, updates, sizes, 300.0)
                 - brute_utility_sum(b, updates, sizes, 300.0))
        assert merge_benefit(a, b, updates, sizes, 300.0) == pytest.approx(brute, abs=1e-12)
    for alpha in (30.0, 300.0, 3000.0):
        assert hierarchical_partition(updates, sizes, alpha) == brute_greedy(updates, sizes, alpha)
    # with this seed's three centres a middle alpha finds neither extreme
    groups = hierarchical_partition(updates, sizes, 300.0)
    assert 1 < len(groups) < 7
    # alpha_i = D_i (the authors' alpha = -1): the same identities with a per-client alpha
    a, b = (0, 1), (2, 3, 4)
    brute = (brute_utility_sum(a + b, updates, sizes, sizes) - brute_utility_sum(a, updates, sizes, sizes)
             - brute_utility_sum(b, updates, sizes, sizes))
    assert merge_benefit(a, b, updates, sizes, sizes) == pytest.approx(brute, abs=1e-12)
    assert hierarchical_partition(updates, sizes, sizes) == brute_greedy(updates, sizes, sizes)


def test_per_client_alpha_by_hand():
    """alpha_i = D_i: a singleton has U = -1 + 1 = 0; two clients with parallel updates and sizes
    100, 300 merge with benefit (-100/400 + 1) + (-300/400 + 1) - 0 = 1, orthogonal ones with
    (-1/4 + cos) + (-3/4 + cos) where cos(g_i, g_G) is 1/sqrt(10) and 3/sqrt(10): 4/sqrt(10) - 1 > 0."""
    sizes = {0: 100.0, 1: 300.0}
    assert group_utility([0], {0: np.array([1.0, 0.0])}, {0: 100.0}, sizes) == pytest.approx(0.0)
    parallel = {0: np.array([1.0, 0.0]), 1: np.array([2.0, 0.0])}
    assert merge_benefit((0,), (1,), parallel, sizes, sizes) == pytest.approx(1.0)
    orthogonal = {0: np.array([1.0, 0.0]), 1: np.array([0.0, 1.0])}
    assert merge_benefit((0,), (1,), orthogonal, sizes, sizes) == pytest.approx(4 / math.sqrt(10) - 1)


def record_payloads(monkeypatch):
    """(round, pid) -> the arrays the client received for training."""
    seen = {}
    real_fit = clients.base.FedClient.answer_train

    def fit(self, payload, config):
        seen[(int(config["server-round"]), self.data.pid)] = {k: v.clone() for k, v in payload["arrays"].items()}
        return real_fit(self, payload, config)

    monkeypatch.setattr(clients.base.FedClient, "answer_train", fit)
    return seen


def test_each_client_receives_its_groups_model(small_config, monkeypatch):
    seen = record_payloads(monkeypatch)
    strategy = run_local({**small_config, "strategy": "hcct", "hcct.groups": "0,1;2,3", "num-server-rounds": 2})
    assert [r["groups"] for r in strategy.history[1:]] == [[[0, 1], [2, 3]]] * 2
    # round 2 starts from the group models of round 1, which differ between the groups
    for pid, other in ((0, 1), (2, 3)):
        for k in seen[(2, pid)]:
            assert torch.equal(seen[(2, pid)][k], seen[(2, other)][k])
    assert not torch.equal(seen[(2, 0)]["fc.weight"], seen[(2, 2)]["fc.weight"])
    # and a group model is the data-weighted average of its members' local models (checked by hand
    # from the updates the server kept: w_G = start + sum_i D_i g_i / D_G)
    sizes = {pid: strategy.clients[pid].num_train for pid in range(4)}
    for group in ((0, 1), (2, 3)):
        expected = weighted_mean([{k: strategy.starts[group][k] + strategy.updates[p][k] for k in strategy.updates[p]}
                                  for p in group], [sizes[p] for p in group])
        for k, v in expected.items():
            assert torch.allclose(strategy.models[group[0]][k], v, atol=1e-5)
    assert strategy.central_state() is None
    assert strategy.history[-1]["train-bytes-down"] == strategy.history[-1]["train-bytes-up"]


def test_learned_groups_are_logged_and_alpha_decides(small_config, tmp_path):
    import json

    lone = run_local({**small_config, "strategy": "hcct", "hcct.alpha": 0.0, "num-server-rounds": 3})
    assert [r["num-groups"] for r in lone.history[1:]] == [4, 4, 4]
    together = run_local({**small_config, "strategy": "hcct", "hcct.alpha": 1e6, "num-server-rounds": 3,
                          "run-name": "big"})
    assert [r["num-groups"] for r in together.history[1:]] == [4, 1, 1]
    assert together.central_state() is not None  # one group: there is a single model
    doc = json.loads((tmp_path / "results" / "big" / "rounds.json").read_text())
    assert doc["hcct-groups"] == [{"round": 1, "groups": [[0], [1], [2], [3]]},
                                  {"round": 2, "groups": [[0, 1, 2, 3]]}, {"round": 3, "groups": [[0, 1, 2, 3]]}]


def test_newcomer_trains_alone_from_the_initial_model_then_is_placed(small_config, monkeypatch):
    from fedapp.runtime.client_app import app

    seen = record_payloads(monkeypatch)
    run_config = {**small_config, "strategy": "hcct", "hcct.alpha": 1e6, "num-server-rounds": 4,
                  "node-wait-timeout": 0.0}
    grid = InProcessGrid(app, 4, run_config)
    calls = {"n": 0}
    all_nodes = list(grid.contexts)

    def get_node_ids():  # node of partition 3 connects before round 3 (discovery: start, r1, r2, r3)
        calls["n"] += 1
        return all_nodes if calls["n"] > 3 else all_nodes[:3]

    grid.get_node_ids = get_node_ids
    strategy = run_local(run_config, grid=grid)
    assert [r["groups"] for r in strategy.history[1:]] == [
        [[0], [1], [2]], [[0, 1, 2]], [[0, 1, 2], [3]], [[0, 1, 2, 3]]]
    for k, v in seen[(3, 3)].items():  # the newcomer's first round starts from the initial model
        assert torch.equal(v, strategy.init_state[k])
    assert not torch.equal(seen[(3, 0)]["fc.weight"], strategy.init_state["fc.weight"])


def test_full_participation_and_fixed_groups_are_checked():
    with pytest.raises(ConfigError, match="full participation"):
        parse_run_config({"strategy": "hcct", "fraction-train": 0.5})
    with pytest.raises(ConfigError, match="hcct.groups"):
        parse_run_config({"strategy": "hcct", "num-clients": 3, "hcct.groups": "0,1;1,2"})
    with pytest.raises(ConfigError, match="hcct.groups"):
        parse_run_config({"strategy": "hcct", "num-clients": 3, "hcct.groups": "0,a"})
