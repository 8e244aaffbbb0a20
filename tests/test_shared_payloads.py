"""Payloads several clients of one exchange receive: the strategy names them once per exchange
(``shared_payloads``), client payloads name them (``Shared``), and each is converted once."""

from __future__ import annotations

import pytest
import torch

import fedapp.core.records as records
from fedapp.runtime.registry import parse_run_config
from fedapp.core.records import Shared, from_record
from fedapp.runtime.server_app import build_strategy
from fedapp.server.discovery import ClientInfo
from test_reliability import config, image_tree  # noqa: F401


@pytest.fixture
def conversions(monkeypatch):
    """The tensors of every record the shared store converts, in order."""
    seen = []

    def counting(tensors):
        seen.append(tensors)
        return to_record(tensors)

    to_record = records.to_record
    monkeypatch.setattr(records, "to_record", counting)
    return seen


def strategy_with_clients(cfg, n):
    strategy = build_strategy(parse_run_config(cfg))
    strategy.clients = {pid: ClientInfo(101 + pid, 10, 2, False) for pid in range(n)}
    return strategy


def test_a_named_payload_is_converted_once_and_names_are_not_confused(config, conversions):
    strategy = strategy_with_clients(config("fedavg"), 4)
    x = {"w": torch.tensor([1.0, 2.0])}
    y = {"w": torch.tensor([1.0, 2.0])}  # the same content, another name: its own record
    z = {"w": torch.tensor([3.0, 4.0])}
    own = {"v": torch.zeros(1)}
    contents = strategy.driver.wire.contents(1, {0: {"a": Shared("x")}, 1: {"a": Shared("x")}, 2: {"a": Shared("y")},
                                     3: {"a": Shared("z"), "own": own}},
                                 {}, shared={"x": x, "y": y, "z": z, "unused": {"u": torch.ones(3)}})
    assert len(conversions) == 4 and all(a is b for a, b in zip(conversions, (x, y, z, own)))  # "unused": never
    assert contents[0]["a"] is contents[1]["a"]  # one record in both messages
    assert contents[2]["a"] is not contents[0]["a"]
    for pid, want in ((0, x), (1, x), (2, y), (3, z)):
        assert torch.equal(from_record(contents[pid]["a"])["w"], want["w"])
    assert strategy.driver.wire.sent[3] == {"a": z, "own": own} and strategy.driver.wire.sent[0]["a"] is x  # what the screen measures against
    with pytest.raises(KeyError, match="'nope'"):
        strategy.driver.wire.contents(1, {0: {"a": Shared("nope")}}, {}, shared={"x": x})


def test_fedals_scaffold_shares_body_and_control_variates(config, conversions):
    strategy = strategy_with_clients({**config("fedals"), "strategy": "fedals-scaffold"}, 3)
    strategy.client_body[2] = strategy.body_round  # client 2 holds the current body: head and c_h only
    contents = strategy.driver.sampled_contents("train", 1)
    shared = strategy.shared_payloads("train", 1)
    assert len(conversions) == 3 and all(any(t is s for s in shared.values()) for t in conversions)
    assert contents[0]["body"] is contents[1]["body"] and contents[0]["control"] is contents[1]["control"]
    assert "body" not in contents[2]
    for pid, control in ((0, strategy.full_control), (1, strategy.full_control), (2, strategy.head_control)):
        got = from_record(contents[pid]["control"])
        assert list(got) == list(control) and all(torch.equal(got[k], control[k]) for k in control)
        payload = strategy.train_payload(pid, 1)  # what a client is handed outside a message: the same arrays
        assert payload["control"] is control and payload.get("body") is (strategy.body if pid < 2 else None)
    for pid in (0, 1):
        assert all(torch.equal(from_record(contents[pid]["body"])[k], v) for k, v in strategy.body.items())
