"""A client's memory goes when its message is answered, by reference counting alone: nothing it held
(its model, its state read back from disk, the arrays it received) waits for Python's cycle
collector, which visits its oldest objects rarely. A FedSMOO client that kept its own method in its
SAM component was such a cycle: in the paper's ResNet-18-GN setting every client that trained left
hundreds of MiB behind until a full collection (docs/performance.md, FedSMOO's memory)."""

import gc
import weakref

import pytest
import torch

import fedapp.runtime.client_app
from fedapp.runtime.client_app import app
from fedapp.runtime.inprocess import InProcessGrid, run_local


@pytest.mark.parametrize("strategy", ["fedsmoo", "fedspeed", "fedsam", "mofedsam", "feddyn", "scaffold"])
def test_a_trained_client_is_freed_without_the_cycle_collector(strategy, small_config, tmp_path, monkeypatch):
    made = []
    make_client = fedapp.runtime.client_app.make_client

    def tracked(*args, **kwargs):
        client = make_client(*args, **kwargs)
        made.append(weakref.ref(client))
        return client

    monkeypatch.setattr(fedapp.runtime.client_app, "make_client", tracked)
    cfg = {**small_config, "strategy": strategy, "num-clients": 6, "fraction-train": 0.5, "local-steps": 1,
           "fraction-evaluate": 0.0, "central-eval": False, "state-memory-mb": 1e-6,
           "state-spill-dir": str(tmp_path / "spill")}
    # torch's first optimizer imports its compiler stack, which keeps a traceback (and so the
    # calling client's frame) in a cycle once per process: done here, before counting
    torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    gc.collect()
    gc.disable()
    try:
        run_local(cfg, grid=InProcessGrid(app, 6, cfg))
        alive = sum(ref() is not None for ref in made)
    finally:
        gc.enable()
    assert len(made) == 6  # 3 clients in each of 2 rounds, their state spilled
    assert alive == 0
