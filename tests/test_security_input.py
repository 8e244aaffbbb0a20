"""Input a run reads from outside: checkpoints given as ``resume-from`` (fedapp/checkpoint.py) and
client replies, which must belong to the message they answer (strategies/driver.py)."""

from __future__ import annotations

import os

import pytest
import torch

from fedapp import checkpoint
from fedapp.config import ConfigError, parse_run_config
from fedapp.inprocess import run_local
from fedapp.server_app import build_strategy
from test_reliability import config, image_tree, tensors  # noqa: F401


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
