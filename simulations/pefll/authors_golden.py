"""Golden numbers from the PeFLL authors' public code (jonnyascott/PeFLL), for
tests/test_pefll_golden.py::test_matches_authors_pefll_code.

Runs the authors' own ``train.train`` (their train.py, unmodified, from a scratch copy) on a tiny
setting every part of which is fixed from outside, so our implementation can be run on the
identical one: 3 clients (all seen), 2 sampled per step, 2 steps, k = 3 inner steps, batch 4,
descriptor dimension 4, hypernetwork hidden width 8 with their 3 hidden layers, their Adam
(lr 2e-4) with joint clipping at 50, inner SGD lr 2e-3, momentum 0.9, weight decay 5e-5,
clipping at 50. What is replaced around their code, and how:

* the networks' initial weights: after their constructors ran, every parameter is overwritten by
  ``init_value(name, shape)`` (numpy, by the parameter's name in their modules), which the test
  applies to our networks through the name map there;
* the data: ``BaseNodes`` is replaced by loaders over fixed tensors (CIFAR-shaped, numpy-seeded),
  whose ``iter()`` yields the next batch of a recorded index sequence per client (their step
  takes one batch for the descriptor, then one per inner step, each from a fresh ``iter``);
* ``eval_model`` (evaluation only; it changes no parameter) returns a stub, so a checkpoint of
  eta_v, eta_h is written after each step (``eval_every = 1``) without consuming batches.

Recorded: the clients each step sampled (their order), every standardised descriptor their
hypernetwork received, and after each step for each parameter of eta_v (``embednet``) and
eta_h (``hypernet``) its sum, sum of absolute values and 6 fixed coordinates.

    $PEFLL_PY simulations/pefll/authors_golden.py --src <authors' checkout> [--work SCRATCH]

run with the python of the authors' venv (``$PEFLL_PY``; torch and torchvision); ``--src`` (default
``$PEFLL_SRC``) is their checkout (jonnyascott/PeFLL at 18659a1ae5910ae62cddc832c72cd54841a7111e),
copied to the scratch folder ``--work`` (default: a temporary one) and run from there. Writes
tests/data/pefll_authors_golden.json.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import zlib
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "pefll_authors_golden.json"
SETTING = dict(num_nodes=3, clients_per_step=2, steps=2, inner_steps=3, bs=4, embed_dim=4, hyper_hid=8,
               hyper_nhid=3, n_train=12, n_test=4, lr=2e-4, inner_lr=2e-3, inner_wd=5e-5, seed=0)
CLASSES = [[0, 1], [2, 3], [1, 3]]  # each client's two classes


def init_value(name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A fixed initial value for the authors' parameter ``name``: uniform in +-1/sqrt(fan-in)
    (PyTorch's default scale) for weights, +-0.1 for biases, seeded by the name."""
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    bound = 1 / np.sqrt(np.prod(shape[1:])) if len(shape) > 1 else 0.1
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def coordinates(name: str, numel: int) -> list[int]:
    return np.random.RandomState(zlib.crc32(name.encode()) + 1).randint(numel, size=6).tolist()


def client_tensors(pid: int) -> dict[str, np.ndarray]:
    """Client pid's images (already normalised floats) and labels, train and test."""
    rng = np.random.RandomState(100 + pid)
    s = SETTING
    out = {}
    for split, n in (("train", s["n_train"]), ("test", s["n_test"])):
        y = np.array([CLASSES[pid][i % 2] for i in range(n)])
        x = (rng.normal(size=(n, 3, 32, 32)) + 0.5 * y[:, None, None, None]).astype(np.float32)
        out[f"{split}_x"], out[f"{split}_y"] = x, y
    return out


def batch_sequence(pid: int) -> list[list[int]]:
    """The index batches client pid's training loader hands out, in order: per step in which it
    is sampled, one for the descriptor and then one per inner step (enough for every step)."""
    s = SETTING
    rng = np.random.RandomState(200 + pid)
    return [rng.choice(s["n_train"], s["bs"], replace=False).tolist()
            for _ in range(s["steps"] * (1 + s["inner_steps"]))]


class Loader:
    """A stand-in DataLoader: every ``iter()`` starts at the next recorded batch."""

    def __init__(self, x, y, batches):
        self.x, self.y, self.batches, self.pos = torch.from_numpy(x), torch.from_numpy(y), batches, 0

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        while self.pos < len(self.batches):
            idx = self.batches[self.pos]
            self.pos += 1
            yield self.x[idx], torch.nn.functional.one_hot(self.y[idx], 10).float()


def main(src: Path) -> None:
    """Run their ``train.train`` from ``src`` (a scratch copy of their checkout) and write the fixture."""
    sys.path.insert(0, str(src))
    import train as T  # the authors' train.py

    s = SETTING
    data = [client_tensors(p) for p in range(s["num_nodes"])]

    class Nodes:
        def __init__(self, *args, **kwargs):
            self.train_loaders = [Loader(d["train_x"], d["train_y"], batch_sequence(p)) for p, d in enumerate(data)]
            self.test_loaders = [Loader(d["test_x"], d["test_y"], [list(range(s["n_test"]))] * 100) for d in data]
            self.val_loaders = self.test_loaders

    def stub_eval(nodes, train_idxs, test_idxs, *args, **kwargs):
        r = {"avg_loss": 0.0, "avg_acc": 0.0, "all_acc": [0.0]}
        return {"train_nodes": dict(r), "test_nodes": dict(r)}, np.zeros((1, s["embed_dim"]))

    descriptors, sampled, modules = [], [], {}

    def fixed_init(cls, key):
        class Fixed(cls):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                with torch.no_grad():
                    for name, p in self.named_parameters():
                        p.copy_(torch.from_numpy(init_value(f"{key}.{name}", tuple(p.shape))))
                modules[key] = self

            def forward(self, v):
                if key == "hypernet":
                    descriptors.append(v.detach().tolist())
                return super().forward(v)
        return Fixed

    real_sample = random.sample

    def sample(pop, k):
        out = real_sample(pop, k)
        sampled.append(list(out))
        return out

    T.BaseNodes, T.eval_model = Nodes, stub_eval
    T.CNNHyper, T.CNNEmbed = fixed_init(T.CNNHyper, "hypernet"), fixed_init(T.CNNEmbed, "embednet")
    T.random.sample = sample
    random.seed(s["seed"])
    torch.manual_seed(s["seed"])
    work = src / "golden-run"
    work.mkdir(exist_ok=True)
    import os
    os.chdir(work)
    T.train(data_name="cifar10", data_path="unused", classes_per_node=2, num_nodes=s["num_nodes"],
            num_train_nodes=s["num_nodes"], clients_per_step=s["clients_per_step"], partition_type="by_class",
            alpha_train=0.1, alpha_test=0.1, steps=s["steps"], inner_steps=s["inner_steps"], optim="adam",
            lr=s["lr"], inner_lr=s["inner_lr"], embed_lr=None, wd=1e-3, inner_wd=s["inner_wd"],
            embed_dim=s["embed_dim"], embed_hid=20, embed_nlayers=3, embed_batches=1, embed_split="train",
            embed_y=True, embed_model="cnn", hyper_hid=s["hyper_hid"], hyper_nhid=s["hyper_nhid"], n_kernels=16,
            bs=s["bs"], device="cpu", eval_every=1, save_path=str(work / "results"), mask_absent=True,
            seed=s["seed"])
    ckpts = sorted(work.glob("saved_models/*/step_*.ckpt"), key=lambda p: int(p.stem.split("_")[1]))
    steps = []
    for ck in ckpts:
        state = torch.load(ck, map_location="cpu")
        params = {}
        for key, sd_key in (("embednet", "enet_state_dict"), ("hypernet", "hnet_state_dict")):
            for name, t in state[sd_key].items():
                flat = t.flatten().double()
                full = f"{key}.{name}"
                params[full] = {"sum": flat.sum().item(), "abs_sum": flat.abs().sum().item(),
                                "coords": coordinates(full, flat.numel()),
                                "values": flat[coordinates(full, flat.numel())].tolist()}
        steps.append(params)
    doc = {"setting": s, "classes": CLASSES, "torch": torch.__version__, "sampled": sampled,
           "descriptors": descriptors, "batches": [batch_sequence(p) for p in range(s["num_nodes"])],
           "steps": steps}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=0))
    print(f"wrote {OUT}: {len(steps)} steps, sampled {sampled}")


if __name__ == "__main__":
    import argparse
    import os
    import tempfile

    parser = argparse.ArgumentParser(description="Golden numbers from the PeFLL authors' train.py.")
    parser.add_argument("--src", type=Path, default=os.environ.get("PEFLL_SRC"),
                        help="the authors' checkout (default: $PEFLL_SRC)")
    parser.add_argument("--work", type=Path, help="scratch folder of the copy they run from (default: a temporary one)")
    args = parser.parse_args()
    if args.src is None or not (args.src / "train.py").is_file():
        raise SystemExit(f"--src: {args.src} is not the authors' checkout (no train.py); give --src or $PEFLL_SRC")
    work = (args.work or Path(tempfile.mkdtemp(prefix="pefll-golden-"))) / "PeFLL"
    if not work.exists():
        shutil.copytree(args.src, work)
    main(work)
