"""Input a run reads from outside: checkpoints given as ``resume-from`` (fedapp/checkpoint.py) and
client replies, which must belong to the message they answer (strategies/driver.py)."""

from __future__ import annotations

import os

import pytest
import torch
from flwr.app import Message, MessageType

from fedapp import checkpoint
from fedapp.client_app import app
from fedapp.config import ConfigError, parse_run_config
from fedapp.inprocess import run_local
from fedapp.server_app import build_strategy
from test_reliability import config, image_tree, same_rows, tensors  # noqa: F401


class RunsCode:
    """Unpickled, it calls ``os.mkdir(marker)``: what a crafted checkpoint could do instead."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def test_checkpoint_load_runs_no_code(config, tmp_path, monkeypatch):
    """A checkpoint that would call a function when unpickled is refused with one line naming
    ``resume-from`` and the function, before the function runs; a checkpoint fedapp wrote loads
    back to the same state."""
    monkeypatch.setattr("fedapp.results.plot", lambda *a, **kw: None)
    base = config("scaffold", **{"num-clients": 4})
    strategy = build_strategy(parse_run_config(base))
    good = tmp_path / checkpoint.FILENAME
    checkpoint.save(strategy, good, 0)
    again = build_strategy(parse_run_config(base))
    for t in tensors(again):
        t.data.add_(1.0)
    assert checkpoint.resume(again, good) == 1
    assert all(torch.equal(a, b) for a, b in zip(tensors(again), tensors(strategy), strict=True))

    doc = checkpoint.load(good)
    marker = tmp_path / "code-ran"
    doc["attrs"]["history"] = [RunsCode(marker)]
    crafted = tmp_path / "crafted" / checkpoint.FILENAME
    crafted.parent.mkdir()
    torch.save(doc, crafted)
    with pytest.raises(ConfigError) as err:
        run_local({**base, "resume-from": str(crafted.parent)})
    assert str(err.value) == (f"run config 'resume-from' = {str(crafted)!r}: refused, it would call posix.mkdir "
                              "when loaded (a checkpoint holds only tensors and plain data, so this one could run code)")
    assert not marker.exists()


class Replaying:
    """fedapp's ClientApp, except that partition 0 trains every round as usual but answers rounds
    2 and later with its round-1 reply (``replay``) or with an error (the same reply dropped)."""

    def __init__(self, replay: bool):
        self.replay, self.first = replay, None

    def __call__(self, msg: Message, context) -> Message:
        reply = app(msg, context)
        if msg.metadata.message_type != MessageType.TRAIN or context.node_config["partition-id"] != 0:
            return reply
        if self.first is None:
            self.first = reply.content
            return reply
        if self.replay:
            return Message(self.first, reply_to=msg)
        raise RuntimeError("reply withheld")


def test_replayed_reply_refused(config, monkeypatch):
    """Partition 0 sends its round-1 training reply again in rounds 2 and 3 (valid arrays and
    metrics, only made for another message): it is dropped as ``replayed``, and the run's rows and
    state equal those of a run where that reply was an error (but for the bytes it brought)."""
    monkeypatch.setattr("fedapp.results.plot", lambda *a, **kw: None)
    cfg = config("fedavg", **{"num-clients": 4, "num-server-rounds": 3, "fraction-train": 1.0})
    replayed = run_local(cfg, client_app=Replaying(replay=True))
    dropped = run_local({**cfg, "run-name": "dropped"}, client_app=Replaying(replay=False))
    assert [r["replies"] for r in replayed.history[1:]] == [4, 3, 3]
    assert [r["dropped-reasons"] for r in replayed.history[1:]] == [{}, {"replayed": 1}, {"replayed": 1}]
    up = [k for k in replayed.history[-1] if "-up" in k]  # the replayed reply's bytes did arrive
    assert same_rows(replayed.history, dropped.history, skip=("dropped-reasons", *up))
    assert all(torch.equal(a, b) for a, b in zip(tensors(replayed), tensors(dropped), strict=True))
