"""Replies spilled to disk as they arrive (``reply-memory-mb``) aggregate to exactly the numbers of
replies held in memory, for every way the strategies read them; the server holds one reply's
arrays at a time."""

import pickle

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord, RecordDict

import fedapp.server.exchange
import fedapp.server.spill
from fedapp.runtime.client_app import app
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.core.records import payload_of
from fedapp.server.spill import spill
from test_pefll import image_config  # noqa: F401  (a fixture)

STRATEGIES = {
    "fedavg": {},
    "fedsmoo": {},  # FedDyn's dual, the perturbation: two arrays a reply, unweighted means
    "scaffold": {},  # control deltas
    "hcct": {"hcct.alpha": 1e6, "num-server-rounds": 3},  # keeps the clients' models (and checkpoints them)
    "pefll": None,  # descriptors and hypernetwork deltas, three exchanges a step: test_pefll's setting
    "fedavg-clipped": {"strategy": "fedavg", "clip-norm": 1e-3, "screen-factor": 3.0},  # robust()'s clipping
}


def rows(strategy):
    return [{k: v for k, v in r.items() if "seconds" not in k and k != "wall-time"} for r in strategy.history]


@pytest.mark.parametrize("name", STRATEGIES)
def test_spilled_replies_give_the_same_run(name, small_config, image_config, tmp_path, monkeypatch):
    if STRATEGIES[name] is None:
        cfg = {**image_config, "num-server-rounds": 2, "fraction-evaluate": 1.0}
    else:
        extra = dict(STRATEGIES[name])
        cfg = {**small_config, "strategy": extra.pop("strategy", name), "fraction-evaluate": 0.5, **extra}
    in_memory = run_local({**cfg, "run-name": "memory"})
    written = []
    monkeypatch.setattr(fedapp.server.spill.SpilledContent, "__init__", _counting(written))
    spilled = run_local({**cfg, "run-name": "spilled", "reply-memory-mb": 0.0,
                         "state-spill-dir": str(tmp_path / "spill")})
    rounds = cfg["num-server-rounds"]
    assert len(written) >= rounds * 2  # every training reply went to disk
    assert rows(spilled) == rows(in_memory)
    for k, v in in_memory.global_state.items():
        assert torch.equal(spilled.global_state[k], v), k
    assert spilled.driver.wire.spilled == {}  # read back and let go


def _counting(written):
    init = fedapp.server.spill.SpilledContent.__init__

    def counted(self, content, directory=None):
        init(self, content, directory)
        written.append(sum(len(a.data) for rec in content.array_records.values() for a in rec.values()))
    return counted


def test_a_spilled_reply_reads_back_bit_for_bit_and_pickles_as_tensors(tmp_path):
    content = RecordDict({"arrays": ArrayRecord({"w": torch.randn(3, 4), "n": torch.arange(5)}),
                          "metrics": MetricRecord({"num-examples": 7}), "config": ConfigRecord({"a": 1}),
                          "perturbation": ArrayRecord({"s": torch.randn(6).double()})})
    expected = payload_of(content)
    light, spilled = spill(content, str(tmp_path))
    assert list(light) == ["metrics", "config"] and not light.array_records
    assert list(tmp_path.iterdir()) == []  # an anonymous file: nothing left behind, ever
    payload = spilled.payload()
    for name, tensors in expected.items():
        assert list(payload[name]) == list(tensors)
        for k, v in tensors.items():
            assert payload[name][k].dtype == v.dtype and torch.equal(payload[name][k], v)
            assert payload[name][k] is not payload[name][k]  # read when used, nothing kept
    again = spilled.content(light)
    assert sorted(again) == sorted(content)
    for name, rec in content.array_records.items():
        assert [(k, a.data) for k, a in again[name].items()] == [(k, a.data) for k, a in rec.items()]
    payload["arrays"]["w"] = torch.zeros(3, 4)  # robust clipping replaces a tensor
    assert torch.equal(payload["arrays"]["w"], torch.zeros(3, 4))
    plain = pickle.loads(pickle.dumps(payload["perturbation"]))
    assert type(plain) is dict and torch.equal(plain["s"], expected["perturbation"]["s"])


def test_the_server_holds_one_reply_at_a_time(small_config, tmp_path, monkeypatch):
    """In process, each reply is spilled as the client returns it: no two replies' arrays are in
    the server's memory together (counted by the decoded payloads alive at each spill)."""
    import gc
    import weakref

    alive = []
    spill_at = fedapp.server.spill.spill

    def watching(content, directory=None):
        gc.collect()
        alive.append(sum(1 for r in seen if r() is not None))
        light, spilled = spill_at(content, directory)
        seen.append(weakref.ref(content))
        return light, spilled

    seen: list = []
    monkeypatch.setattr(fedapp.server.exchange, "spill", watching)
    cfg = {**small_config, "strategy": "fedsmoo", "num-clients": 6, "fraction-evaluate": 0.0,
           "reply-memory-mb": 0.0, "num-server-rounds": 1}
    run_local(cfg, grid=InProcessGrid(app, 6, cfg))
    assert alive == [0, 0, 0, 0, 0, 0]
