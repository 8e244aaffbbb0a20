"""Robust aggregation on every strategy, and the default defence against poisoned replies
(``aggregation`` in strategies/base.py, the defence in strategies/driver.py, attacks in fedapp/runtime/faults.py)."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fedapp.runtime import checkpoint, faults, preflight, registry
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.client_app import app
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.runtime.server_app import build_strategy
from strategies.driver import ClientInfo, Driver, Reply
from simulations import attacks
from test_reliability import EXTRA, config, image_tree, run  # noqa: F401

#: what keeps each strategy's run small and makes it combine something in two rounds
SMALL = {**EXTRA, "pefll": {**EXTRA["pefll"], "num-server-rounds": 2},
         "pfedhn": {"model": "lenet", "dataset": "imagefolder", "partition": "iid", "pfedhn.k": 2,
                    "num-server-rounds": 2},
         "fedals-scaffold": EXTRA["fedals"]}
#: checkpointed state that is no combination of replies: HCCT's last update of each client as it
#: sent it, PeFLL's descriptor standardisation (fixed by the first descriptor)
OWN = ("updates", "v_stats")


def state_tensors(strategy) -> dict[str, list[torch.Tensor]]:
    """Every checkpointed attribute that holds tensors, as its tensors in a fixed order."""
    out = {}
    for name in checkpoint.attrs_of(strategy):
        found: list[torch.Tensor] = []

        def walk(v):
            if isinstance(v, torch.Tensor):
                found.append(v)
            elif isinstance(v, dict):
                for k in sorted(v, key=str):
                    walk(v[k])
            elif isinstance(v, (list, tuple)):
                for x in v:
                    walk(x)
        walk(checkpoint._pack(getattr(strategy, name)))
        if found:
            out[name] = found
    return out


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("name", sorted(registry.algorithms()))
def test_every_strategy_honours_aggregation(name, config, image_tree):
    """Every state a strategy combines from replies (model, control variates, duals, perturbation,
    Adam moments, cluster, group and body models, hypernetwork and embedding networks) comes out
    of a median run different from the mean run wherever the mean run changed it; a strategy that
    combines nothing refuses the option at preflight in one line. Every such state goes through
    ``FedStrategy.combine``, so the other options (trimmed mean, Krum: tests/test_security.py) reach
    it the same way."""
    small = {**SMALL.get(name, {}), "num-clients": 4, "min-train-nodes": 2}
    if small.get("dataset") == "imagefolder":
        small["data-dir"] = str(image_tree)
    robust = config(name, **small, aggregation="median")
    spec = registry.get(name).strategy
    if spec.robust_refusal:
        with pytest.raises(ConfigError, match=f"'aggregation' = 'median' is invalid for strategy '{name}'"):
            preflight.check(robust)
        preflight.check(config(name, **small))  # the plain mean is fine
        return
    preflight.check(robust)
    mean = state_tensors(run(config(name, **small))[0])
    initial = state_tensors(build_strategy(parse_run_config(config(name, **small))))
    got = state_tensors(run(robust)[0])
    changed = [a for a in mean if a not in OWN and (a not in initial or not same(mean[a], initial[a]))]
    assert changed, "the mean run changed nothing"
    assert [a for a in changed if same(got[a], mean[a])] == []


# ---- the default defence -----------------------------------------------------------------------
def small(tmp_path, strategy="fedavg", option="default", attack=None, fraction=0.0, **kw):
    return {**attacks.run_config(attacks.SMALL, strategy, option, attack, fraction),
            "results-dir": str(tmp_path), **kw}


def test_attacks_change_the_update_as_documented(tmp_path):
    """Each attack's reply, against the same client's honest one: reference + (factor) u, noise of
    the reply's own norm, and the shift of "a little is enough" by z |u| with Baruch et al.'s z."""
    cfg = parse_run_config(small(tmp_path, attack="alie", fraction=0.3))
    InProcessGrid(app, 2, small(tmp_path))  # sets the task identity that Flower messages carry
    assert faults.alie_z(cfg) == pytest.approx(0.5244, abs=1e-4)  # n = 10, f = 3: s = 3, Phi^-1(0.7)
    ref = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
    honest = np.array([1.5, -2.5, 3.0, 0.0], dtype=np.float32)
    u = honest.astype(np.float64) - ref

    def attacked(kind):
        received = Message(RecordDict({"arrays": ArrayRecord({"w": Array(ref)}),
                                       "config": ConfigRecord({"server-round": 2, "partition-id": 1})}),
                           dst_node_id=1, message_type=MessageType.TRAIN)
        reply = Message(RecordDict({"arrays": ArrayRecord({"w": Array(honest.copy())}),
                                    "metrics": MetricRecord({"num-examples": 5})}), reply_to=received)
        faults.poison(reply, received, kind, cfg)
        return reply.content["arrays"]["w"].numpy().astype(np.float64)

    for kind, factor in (("negate", -10.0), ("sign-flip", -1.0), ("scale", 1e30)):
        np.testing.assert_allclose(attacked(kind), (ref + factor * u).astype(np.float32), rtol=1e-6)
    np.testing.assert_allclose(attacked("alie"), ref + u - faults.alie_z(cfg) * np.abs(u), rtol=1e-6)
    noise = attacked("noise") - ref
    assert np.linalg.norm(noise) == pytest.approx(np.linalg.norm(honest), rel=1e-5)
    np.testing.assert_array_equal(attacked("noise") - ref, noise)  # seeded by (seed, round, partition)


_clean: dict[str, float] = {}


def clean_accuracy(tmp_path) -> float:
    if "fedavg" not in _clean:
        _clean["fedavg"] = attacks.accuracy(run_local(small(tmp_path / "clean")))
    return _clean["fedavg"]


#: what the default does to the 3 attackers' replies in each of the 4 rounds: dropped by the direction
#: screen (-10x and sign flips point against the others' median update, noise of the model's norm no
#: closer to it than a random direction), clipped to 3 lower medians (1e30 u points with it), or neither
#: ("a little is enough" stays within both)
CAUGHT = {"negate": (12, 0), "sign-flip": (12, 0), "noise": (12, 0), "scale": (0, 12), "alie": (0, 0)}


@pytest.mark.parametrize("attack", attacks.ATTACKS)
def test_default_contains_30pct_attackers(attack, tmp_path):
    """FedAvg on 10 IID synthetic clients, 4 rounds of 5 steps: with 3 attackers, the default options
    (no attacker count given) drop or clip exactly the attackers' replies and end within 5 points of
    the run without attackers."""
    strategy = run_local(small(tmp_path, attack=attack, fraction=0.3))
    assert attacks.counts(strategy) == dict(zip(("dropped", "clipped"), CAUGHT[attack]))
    got = attacks.accuracy(strategy)
    assert got is not None and clean_accuracy(tmp_path) - got <= 0.05


def test_default_keeps_honest_runs_within_half_a_point(tmp_path):
    """Without attackers the default drops and clips no honest reply on the CI setting (FedAvg,
    seed 0), so the run ends within 0.5 points of the plain mean's (here: equal)."""
    plain = attacks.accuracy(run_local(small(tmp_path / "plain", option="none")))
    default = run_local(small(tmp_path / "default"))
    assert attacks.counts(default) == {"dropped": 0, "clipped": 0}
    assert abs(attacks.accuracy(default) - plain) <= 0.005


def test_the_norm_screen_clips_to_three_medians(tmp_path):
    """The default norm bound: of update norms 0.5, 1 and 5 (lower median 1), the longest is scaled
    down to 3 against what was sent and counted as clipped; none is dropped."""
    strategy = build_strategy(parse_run_config(small(tmp_path)))
    strategy.clients = {p: ClientInfo(101 + p, 10, 2, False) for p in range(3)}
    strategy.driver.sent = dict.fromkeys(range(3), {"arrays": {"w": torch.tensor([1.0, 1.0])}})
    ups = ([3.0, 4.0], [0.6, 0.8], [0.5, 0.0])
    out = strategy.driver.robust([Reply(p, {"arrays": {"w": 1.0 + torch.tensor(u)}}, {}) for p, u in enumerate(ups)])
    assert [r.pid for r in out] == [0, 1, 2]
    assert torch.allclose(out[0].payload["arrays"]["w"], torch.tensor([2.8, 3.4]))  # 1 + 3 (3, 4) / 5
    assert torch.equal(out[1].payload["arrays"]["w"], 1.0 + torch.tensor([0.6, 0.8]))
    assert (strategy.driver.clipped, sum(strategy.driver.dropped.values())) == (1, 0)


def test_the_direction_screen_drops_sign_flips(tmp_path):
    """screen-direction (on by default) drops exactly the 3 flipped updates each round, which the
    norm screen lets through."""
    strategy = run_local(small(tmp_path, attack="sign-flip", fraction=0.3))
    assert [dict(r["dropped-reasons"]) for r in strategy.history[1:]] == [{"against-median": 3}] * 4
    assert clean_accuracy(tmp_path) - attacks.accuracy(strategy) <= 0.05


def test_the_direction_screen_measures_each_reply_against_the_others_median():
    """Each update's cosine is taken with the coordinate-wise median of the other updates: for (1, 0),
    (0, 1) and (1, 1) the references are (0.5, 1), (1, 0.5) and (0.5, 0.5); in 2 coordinates the
    chance bound 3 / sqrt(2) is above 0.3, so it is 0."""
    pairs = [{("arrays", "w"): (torch.tensor(u), torch.zeros(2))} for u in ([1.0, 0.0], [0.0, 1.0], [1.0, 1.0])]
    got = Driver.median_cosines(pairs)
    assert [c for c, _, _ in got] == pytest.approx([0.5 / 1.25**0.5, 0.5 / 1.25**0.5, 1.0])
    assert {chance for _, chance, _ in got} == {0.0}


def screen(tmp_path, updates: np.ndarray) -> list[int]:
    """The partition ids the default screen keeps of replies sending ``updates`` (one per row)."""
    strategy = build_strategy(parse_run_config(small(tmp_path)))
    n, d = updates.shape
    strategy.clients = {p: ClientInfo(101 + p, 10, 2, False) for p in range(n)}
    strategy.driver.sent = dict.fromkeys(range(n), {"arrays": {"w": torch.zeros(d)}})
    replies = [Reply(p, {"arrays": {"w": torch.tensor(u, dtype=torch.float32)}}, {}) for p, u in enumerate(updates)]
    return [r.pid for r in strategy.driver.robust(replies)]


def test_the_direction_screen_drops_noise_and_keeps_minibatch_noise(tmp_path):
    """In 10,000 coordinates (chance bound 0.03): 7 updates sharing a direction at cosine about 0.7
    keep all 7 and drop the 3 Gaussian ones of the same norm; 10 updates whose shared part is within
    chance (minibatch noise, cosines spread about 0) are all kept; so are 7 with the shared part
    below 3 noise replies."""
    rng = np.random.default_rng(0)
    g, noise = rng.standard_normal(10_000), rng.standard_normal((10, 10_000))
    honest = g + noise[:7]
    attackers = rng.standard_normal((3, 10_000)) * np.linalg.norm(honest[0]) / 100.0
    assert screen(tmp_path / "a", np.vstack([honest, attackers])) == list(range(7))
    assert screen(tmp_path / "b", 0.01 * g + noise) == list(range(10))
    assert screen(tmp_path / "c", np.vstack([0.01 * g + noise[:7], attackers])) == list(range(10))


def test_clip_median_scales_updates_to_the_median_norm(tmp_path):
    """clip-median 1: updates longer than the lower median norm (here 1.0, of norms 0.5, 1, 5) are
    scaled down to it against what was sent; the others pass unchanged."""
    strategy = build_strategy(parse_run_config(small(tmp_path, **{"clip-median": 1.0, "screen-factor": 0.0})))
    strategy.clients = {p: ClientInfo(101 + p, 10, 2, False) for p in range(3)}
    sent = {"arrays": {"w": torch.tensor([1.0, 1.0])}}
    strategy.driver.sent = dict.fromkeys(range(3), sent)
    ups = ([3.0, 4.0], [0.6, 0.8], [0.5, 0.0])
    out = strategy.driver.robust([Reply(p, {"arrays": {"w": 1.0 + torch.tensor(u)}}, {}) for p, u in enumerate(ups)])
    assert torch.allclose(out[0].payload["arrays"]["w"], torch.tensor([1.6, 1.8]))  # 1 + (3, 4) / 5
    assert torch.equal(out[1].payload["arrays"]["w"], 1.0 + torch.tensor([0.6, 0.8]))
    assert torch.equal(out[2].payload["arrays"]["w"], torch.tensor([1.5, 1.0]))


def test_the_default_leaves_honest_runs_alone_and_the_attack_is_real(tmp_path):
    """Without attackers the defaults give the plain mean's run bit for bit; with 3 clients sending
    -10x their update the plain mean ends far below it."""
    clean = run_local(small(tmp_path / "clean"))
    plain = run_local(small(tmp_path / "plain", option="none"))
    assert [r["central-accuracy"] for r in clean.history] == [r["central-accuracy"] for r in plain.history]
    assert all(torch.equal(clean.global_state[k], v) for k, v in plain.global_state.items())
    ruined = attacks.accuracy(run_local(small(tmp_path / "ruined", option="none", attack="negate", fraction=0.3)))
    assert ruined is None or attacks.accuracy(clean) - ruined > 0.2


def test_attack_table_runs_at_the_ci_scale(tmp_path, monkeypatch):
    """The attack table's script at the CI scale: its rows, drop = clean accuracy - accuracy; the same
    call again resumes from its JSON, running only the runs without attackers."""
    setting = {**attacks.SMALL, "num-server-rounds": 2}
    out = tmp_path / "attacks.json"
    rows = attacks.table(setting, str(tmp_path / "runs"), ["scaffold"], ["sign-flip"], ["default", "median"], [0.6], out)
    assert [(r["option"], r["attack"], r["attackers"]) for r in rows] == [
        ("none", None, 0.0), ("default", None, 0.0), ("default", "sign-flip", 0.6), ("median", "sign-flip", 0.6)]
    assert all(r["drop"] == round(rows[1]["accuracy"] - r["accuracy"], 4) for r in rows[2:])
    assert json.loads(out.read_text())["rows"] == rows
    runs = []
    monkeypatch.setattr(attacks, "run_local", lambda cfg: runs.append(cfg["fault-fraction"]) or run_local(cfg))
    assert attacks.table(setting, str(tmp_path / "runs"), ["scaffold"], ["sign-flip"], ["default", "median"],
                         [0.6], out) == rows
    assert runs == [0.0, 0.0]


def test_the_page_table_is_the_committed_sweep():
    """docs/reliability.md's attack table is printed from the committed CI-scale sweep, which covers
    every strategy, attack, option and fraction of the script, and in which the default keeps every
    strategy within 5 points of its run without attackers under every attack at 30%."""
    sweep = json.loads(attacks.CI_SWEEP.read_text())
    assert sweep["setting"] == attacks.SMALL
    rows = sweep["rows"]
    assert attacks.page_table(rows) in (attacks.CI_SWEEP.parents[2] / "docs" / "reliability.md").read_text()
    attacked = {(r["strategy"], r["option"], r["attack"], r["attackers"]) for r in rows if r["attack"]}
    assert attacked == {(s, o, a, f) for s in attacks.STRATEGIES for o in attacks.OPTIONS
                        for a in attacks.ATTACKS for f in (0.3, 0.6)}
    default = [r for r in rows if r["option"] == "default" and r["attackers"] == 0.3]
    assert len(default) == 30 and all(r["drop"] <= 0.05 for r in default)


def test_attack_table_measures_pefll_on_its_honest_clients_own_models(tmp_path):
    """PeFLL has no central model: its accuracy in the attack table is the mean of the last evaluation's
    client accuracies (clients.csv) over the clients that are not attackers."""
    cfg = {**attacks.run_config(attacks.SMALL, "pefll", "none", None, 0.0), "num-server-rounds": 1,
           "results-dir": str(tmp_path)}
    strategy = run_local(cfg)
    with open(strategy.results_path / "clients.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["round"] == "1"]
    assert len(rows) == 10
    honest = [float(r["accuracy"]) for r in rows if int(r["partition-id"]) not in (0, 1, 2)]
    assert attacks.accuracy(strategy, {0, 1, 2}) == round(sum(honest) / 7, 4)
    assert attacks.accuracy(strategy) == round(sum(float(r["accuracy"]) for r in rows) / 10, 4)
