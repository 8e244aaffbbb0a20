"""Poisoned replies, inflated example counts and partition claims: what a misbehaving site can
do to a run (robust aggregation in strategies/base.py, attacks in fedapp/runtime/faults.py)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict

from fedapp.runtime.client_app import app
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.faults import INFLATED, faulty_partitions
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.runtime.server_app import build_strategy
from fedapp.server.discovery import ClientInfo
from fedapp.server.replies import Reply
from fedapp.server.screens import updates_norm
from test_reliability import (BASELINES, _reference, config, image_tree, run, same_rows,  # noqa: F401
                              strategies, tensors)


def accuracy(strategy) -> float:
    last = strategy.history[-1]
    return last["central-accuracy"] if "central-accuracy" in last else last["fed-accuracy"]


def honest_accuracy(strategy, grid, bad) -> float:
    """The final model(s) evaluated again with the attackers offline: accuracy over the honest
    clients (the global test set when there is one model, else their local test splits)."""
    grid.offline = {101 + pid for pid in bad}
    row = strategy.driver.evaluate_round(strategy.cfg.num_server_rounds, grid)
    return row["central-accuracy"] if "central-accuracy" in row else row["fed-accuracy"]


def finite(strategy) -> bool:
    return all(torch.isfinite(t.float()).all() for t in tensors(strategy))


@pytest.mark.parametrize("name", strategies("fedavg", "scaffold", "fedsmoo", "fedals", "hcct", "pefll", *BASELINES))
def test_scaled_updates_are_contained(name, config):
    """30% of the clients send their updates times 1e30: robust's norm bound clips exactly those
    replies to the lower median norm of each record (where 1e30 u overflows, validation drops them as
    non-finite; where u points against the median update, the direction screen does). A clipped reply
    is the attacker's own update at the median norm, an honest one in all but name, so every strategy
    ends within 5 points of the run with the attackers offline or of the honest run under robust,
    whichever is lower (HCCT's groups of these 2 rounds are the honest run's, 29.4 points below the
    offline run's, which groups 7 clients)."""
    attacked = config(name, **{"fault-fraction": 0.3, "fault-kind": "scale", "defence": "robust"})
    bad = faulty_partitions(parse_run_config(attacked))
    if name not in _reference:
        _reference[name] = run(config(name), offline=bad)
    ref, ref_grid = _reference[name]
    honest, honest_grid = run(config(name, defence="robust"))
    strategy, grid = run(attacked)
    assert finite(strategy)
    floor = min(honest_accuracy(ref, ref_grid, bad), honest_accuracy(honest, honest_grid, bad))
    assert honest_accuracy(strategy, grid, bad) >= floor - 0.05
    for row in strategy.history[1:]:
        # an attacker's 1e30 u that points against the median update is dropped instead
        caught = row["clipped-replies"] + sum(row["dropped-reasons"].get(k, 0)
                                              for k in ("non-finite", "against-median"))
        assert caught >= 3, row


def test_scaled_updates_poison_an_unscreened_mean(config):
    """The attack is real: without the screen the plain mean is ruined."""
    strategy, _ = run(config("fedavg", **{"fault-fraction": 0.3, "fault-kind": "scale"}))
    assert max(float(t.abs().max()) for t in strategy.global_state.values()) > 1e20


@pytest.mark.parametrize("option", [{"aggregation": "median"}, {"aggregation": "trimmed-mean", "trim-fraction": 0.3},
                                    {"aggregation": "krum", "krum-byzantine": 3, "krum-select": 4},
                                    {"clip-norm": 1.0}])
def test_each_robust_option_contains_scaled_updates_without_the_screen(option, config):
    ref = run(config("fedavg", **option), offline=faulty_partitions(
        parse_run_config(config("fedavg", **{"fault-fraction": 0.3}))))[0]
    strategy, _ = run(config("fedavg", **option, **{"fault-fraction": 0.3, "fault-kind": "scale"}))
    assert finite(strategy)
    assert abs(accuracy(strategy) - accuracy(ref)) <= 0.05


@pytest.mark.parametrize("name", strategies("fedavg", "scaffold"))
def test_the_screen_leaves_honest_runs_bit_identical(name, config):
    """A norm bound at 3 lower medians (``screen-factor``) clips no honest reply here, so the run is the
    plain mean's bit for bit."""
    screened = run(config(name, **{"screen-factor": 3.0}))[0]
    plain = run(config(name))[0]
    assert same_rows(screened.history, plain.history)
    assert all(torch.equal(a, b) for a, b in zip(tensors(screened), tensors(plain), strict=True))


def test_inflated_num_examples_is_capped(config):
    """30% claim 10^12 examples: each counts as the training-set size it reported at discovery,
    which is what honest clients send, so the run equals the honest one."""
    honest = run(config("fedavg"))[0]
    attacked = run(config("fedavg", **{"fault-fraction": 0.3, "fault-kind": "num-examples"}))[0]
    assert same_rows(attacked.history, honest.history)
    assert all(torch.equal(a, b) for a, b in zip(tensors(attacked), tensors(honest), strict=True))

    strategy = build_strategy(parse_run_config(config("fedavg")))
    strategy.clients = {0: ClientInfo(101, 10, 2, False)}
    sent = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=101, message_type=MessageType.TRAIN)
    metrics = MetricRecord({"partition-id": 0, "num-examples": INFLATED})
    reply = Message(RecordDict({"metrics": metrics, "w": ArrayRecord({"w": Array(np.ones(2, np.float32))})}),
                    reply_to=sent)
    assert [r.num_examples for r in strategy.driver.parse_replies([reply], {0: {"w": {"w": ((2,), torch.float32)}}})] == [10]
    assert [r.num_examples for r in strategy.driver.parse_replies([reply], {0: None})] == [2]  # evaluation: the test split


def test_robust_combinations_by_hand(config):
    def strategy(**kw):
        return build_strategy(parse_run_config(config("fedavg", **kw)))

    states = [{"w": torch.tensor([x, -x]), "n": torch.tensor(i)} for i, x in enumerate([1.0, 2.0, 3.0, 4.0, 100.0])]
    w = [1.0, 1.0, 1.0, 1.0, 6.0]
    assert torch.equal(strategy().combine(states, w)["w"], torch.tensor([61.0, -61.0]))  # sum w_i x_i / 10
    median = strategy(aggregation="median").combine(states, w)
    assert torch.equal(median["w"], torch.tensor([3.0, -3.0])) and median["n"].item() == 2
    trimmed = strategy(aggregation="trimmed-mean", **{"trim-fraction": 0.2}).combine(states, w)  # 1 cut at each end
    assert torch.equal(trimmed["w"], torch.tensor([3.0, -3.0]))
    # Krum, f = 1: each state's score is its squared distance to its n - f - 2 = 2 nearest
    # (2.0: 1 + 1 = 2, the lowest); Multi-Krum m = 3 averages 1.0, 2.0, 3.0 with their weights
    krum = strategy(aggregation="krum", **{"krum-byzantine": 1})
    assert torch.equal(krum.combine(states, w)["w"], torch.tensor([2.0, -2.0]))
    krum.cfg = krum.cfg.replace(krum_select=3)
    assert torch.equal(krum.combine(states, w)["w"], torch.tensor([2.0, -2.0]))
    krum.cfg = krum.cfg.replace(krum_select=4)
    assert torch.equal(krum.combine(states, w)["w"], torch.tensor([2.5, -2.5]))


def test_clipping_scales_the_update_against_what_was_sent(config):
    strategy = build_strategy(parse_run_config(config("fedavg", **{"clip-norm": 1.0, "screen-factor": 0.0})))
    strategy.clients = {0: ClientInfo(101, 10, 2, False), 1: ClientInfo(102, 10, 2, False)}
    sent = {"arrays": {"w": torch.tensor([1.0, 1.0])}}
    strategy.driver.wire.sent = {0: sent, 1: sent}
    far = Reply(0, {"arrays": {"w": torch.tensor([4.0, 5.0])}, "delta": {"d": torch.tensor([0.0])}}, {})
    near = Reply(1, {"arrays": {"w": torch.tensor([1.5, 1.0])}, "delta": {"d": torch.tensor([0.0])}}, {})
    out = strategy.driver.robust([far, near])
    assert torch.allclose(out[0].payload["arrays"]["w"], torch.tensor([1.6, 1.8]))  # 1 + (3, 4) / 5
    assert torch.equal(out[1].payload["arrays"]["w"], torch.tensor([1.5, 1.0]))  # norm 0.5: unchanged
    assert updates_norm(strategy.driver.reply_updates(near)) == 0.5


@pytest.mark.parametrize("bad,key", [({"aggregation": "mode"}, "aggregation"), ({"trim-fraction": 0.5}, "trim-fraction"),
                                     ({"clip-norm": -1.0}, "clip-norm"), ({"screen-factor": -2}, "screen-factor"),
                                     ({"krum-select": 0}, "krum-select")])
def test_bad_robust_settings_are_refused_with_one_line(bad, key):
    with pytest.raises(ConfigError, match=f"'{key}'") as err:
        parse_run_config(bad)
    assert "\n" not in str(err.value)


def test_duplicate_partition_claim_is_refused(config, caplog):
    """Node 103 claims partition 0, which node 101 serves: 101 keeps it for the whole run, 103 is
    refused once, with its reason in the log, and never gets a training or evaluation message."""
    cfg = config("fedavg", **{"num-clients": 2, "num-server-rounds": 3})
    nodes = [{"partition-id": p, "num-partitions": 2} for p in (0, 1, 0)]
    grid = InProcessGrid(app, 3, cfg, nodes)
    sent: list[tuple[int, str]] = []
    push = grid.push_messages
    grid.push_messages = lambda msgs: push([sent.append((m.metadata.dst_node_id, m.metadata.message_type)) or m
                                            for m in msgs])
    strategy = build_strategy(parse_run_config(cfg))
    with caplog.at_level(logging.WARNING, logger="flwr"):
        strategy.start(grid)
    assert {pid: c.node_id for pid, c in strategy.clients.items()} == {0: 101, 1: 102}
    assert [t for n, t in sent if n == 103] == [MessageType.QUERY]
    assert [r["replies"] for r in strategy.history[1:]] == [2, 2, 2]
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals == ["node 103 refused: it claims partition 0, which node 101 serves"]


def test_results_are_never_overwritten(config, tmp_path, monkeypatch):
    """A second run with the same run-name writes to run-name-2; the first run's files stay as
    they were, and it can still be resumed in its own folder."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    base = config("fedavg", **{"num-clients": 4, "checkpoint-every": 1})
    run_local(base)
    first = tmp_path / "results" / "r"
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    run_local({**base, "lr": 0.1})
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    second = json.loads((tmp_path / "results" / "r-2" / "rounds.json").read_text())
    assert second["config"]["lr"] == 0.1
    resumed = run_local({**base, "num-server-rounds": 3, "resume-from": str(first)})
    assert [r["round"] for r in json.loads((first / "rounds.json").read_text())["rounds"]] == [0, 1, 2, 3]
    assert resumed.history[-1]["round"] == 3 and not (tmp_path / "results" / "r-3").exists()
