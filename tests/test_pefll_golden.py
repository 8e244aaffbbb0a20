"""PeFLL over Flower messages against the authors' own train.py on one tiny identical setting.

tests/data/pefll_authors_golden.json comes from simulations/pefll/authors_golden.py (their code
run unmodified from a scratch copy, torch 2.14): identical initial networks, data, client samples
and batches; their eta_v and eta_h after each of 2 steps. Here the same setting runs through our
strategy and clients in the in-process grid, in the authors' configuration (Adam 2e-4 with joint
clipping at 50, no L2 term, standardised descriptors, their hypernetwork layout, inner SGD 2e-3
with momentum 0.9, weight decay 5e-5 and clipping at 50).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import fedapp.runtime.client_app
from clients.pefll import PeFLLClient
from fedapp.core.experiment import ClientData
from fedapp.runtime.inprocess import run_local
from simulations.pefll.authors_golden import CLASSES, client_tensors, init_value
from fedapp.server.rounds import Driver
from strategies.pefll import PeFLL

GOLDEN = json.loads((Path(__file__).parent / "data" / "pefll_authors_golden.json").read_text())
S = GOLDEN["setting"]
HEADS = ["c1_weights", "c1_bias", "c2_weights", "c2_bias", "l1_weights", "l1_bias", "l2_weights", "l2_bias",
         "l3_weights", "l3_bias"]


def authors_name(net: str, name: str) -> str:
    """Our parameter name -> theirs (models.py: CNNEmbed, CNNHyper)."""
    if net == "embed":  # our LeNet inside CNNEmbedding: net.{conv1,conv2,fc1,fc2,fc}
        return "embednet." + name.removeprefix("net.").replace("fc.", "fc3.")
    if name.startswith("body."):  # Linear layers at the same Sequential indices 0, 2, 4, 6
        return "hypernet.mlp." + name.removeprefix("body.")
    _, j, kind = name.split(".")  # heads.j.weight, in the order of the client model's tensors
    return f"hypernet.{HEADS[int(j)]}.{kind}"


@pytest.fixture
def golden_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    for split in ("train", "test"):  # the server only reads the shapes: 3x32x32, 10 classes
        for c in range(10):
            (tmp_path / "tree" / split / str(c)).mkdir(parents=True)
            Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "tree" / split / str(c) / "0.png")
    data = {}
    for pid in range(S["num_nodes"]):
        d = client_tensors(pid)
        data[pid] = ClientData(pid, torch.from_numpy(d["train_x"]), torch.from_numpy(d["train_y"]),
                               torch.from_numpy(d["test_x"]), torch.from_numpy(d["test_y"]), 10, (), (), False)
    monkeypatch.setattr(fedapp.runtime.client_app, "client_data", lambda cfg, pid, data_dir=None: data[pid])

    # the recorded batches, consumed in their order: one for the descriptor, then k inner ones
    queue = {pid: list(b) for pid, b in enumerate(GOLDEN["batches"])}

    class Loader:
        def __init__(self, client):
            self.client = client

        def next_batch(self):
            idx = torch.tensor(queue[self.client.data.pid].pop(0))
            return self.client.batch_tensors(idx)

    monkeypatch.setattr(PeFLLClient, "descriptor_batch", lambda self, rnd, size: torch.tensor(queue[self.data.pid].pop(0)))
    monkeypatch.setattr(PeFLLClient, "loader", lambda self, seed: Loader(self))
    monkeypatch.setattr(Driver, "round_sample", lambda self, phase, rnd: GOLDEN["sampled"][rnd - 1])

    real_init, real_fit = PeFLL.__init__, PeFLL.train_round
    snapshots, inputs = [], []

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        with torch.no_grad():
            for net in ("embed", "hnet"):
                for name, p in getattr(self, net).named_parameters():
                    p.copy_(torch.from_numpy(init_value(authors_name(net, name), tuple(p.shape))))
        self.hnet.register_forward_pre_hook(lambda m, args: inputs.append(args[0].detach().clone()))

    def fit(self, rnd, grid):
        out = real_fit(self, rnd, grid)
        snapshots.append({authors_name(net, n): p.detach().clone() for net in ("embed", "hnet")
                          for n, p in getattr(self, net).named_parameters()})
        return out

    monkeypatch.setattr(PeFLL, "__init__", init)
    monkeypatch.setattr(PeFLL, "train_round", fit)
    config = {
        "strategy": "pefll", "dataset": "imagefolder", "data-dir": str(tmp_path / "tree"), "model": "lenet",
        "partition": "iid",  # unused: the clients get the recorded data
        "num-clients": S["num_nodes"], "num-server-rounds": S["steps"], "fraction-evaluate": 0.0,
        "central-eval": False, "batch-size": S["bs"], "results-dir": str(tmp_path / "results"), "run-name": "g",
        "pefll.k": S["inner_steps"], "pefll.beta": S["inner_lr"], "pefll.momentum": 0.9,
        "pefll.inner-wd": S["inner_wd"], "pefll.clip": 50.0, "pefll.server-opt": "adam",
        "pefll.server-lr": S["lr"], "pefll.server-clip": 50.0, "pefll.lambda-h": 0.0, "pefll.lambda-v": 0.0,
        "pefll.embed-dim": S["embed_dim"], "pefll.hyper-hidden": S["hyper_hid"],
        "pefll.hyper-layers": S["hyper_nhid"] + 1, "pefll.hypernet": "code", "pefll.descriptor-batch": S["bs"],
    }
    strategy = run_local(config)
    return strategy, snapshots, inputs


def test_matches_authors_pefll_code(golden_run):
    strategy, snapshots, inputs = golden_run
    assert len(snapshots) == len(GOLDEN["steps"]) == 2
    assert [sorted(c) for c in GOLDEN["sampled"]] == [[1, 2], [0, 1]]
    # the standardised descriptors their hypernetwork received (each first use per client and step)
    theirs = torch.tensor(GOLDEN["descriptors"])
    ours = torch.cat([i.reshape(-1, i.shape[-1]) for i in inputs])  # h sees one row or a stack of them
    for v in theirs:
        assert torch.cdist(v[None], ours).min() < 1e-4
    # eta_v and eta_h after each step: sums, absolute sums and fixed coordinates of every tensor
    moved = 0
    for step, (mine, gold) in enumerate(zip(snapshots, GOLDEN["steps"])):
        assert mine.keys() == gold.keys()
        for name, g in gold.items():
            t = mine[name].flatten().double()
            init = torch.from_numpy(init_value(name, tuple(mine[name].shape))).flatten().double()
            moved += int(not torch.allclose(t, init))
            # Adam moves each coordinate by at most lr per step: tolerances far below that
            assert t.sum().item() == pytest.approx(g["sum"], rel=1e-5, abs=1e-4), (step, name)
            assert t.abs().sum().item() == pytest.approx(g["abs_sum"], rel=1e-5, abs=1e-4), (step, name)
            np.testing.assert_allclose(t[g["coords"]].numpy(), g["values"], rtol=0, atol=2e-6,
                                       err_msg=f"step {step} {name}")
    assert moved == 2 * len(GOLDEN["steps"][0])  # every tensor of both networks changed
    assert CLASSES == GOLDEN["classes"]
