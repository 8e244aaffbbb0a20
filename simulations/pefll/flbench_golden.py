"""Golden numbers from FL-bench (KarhouTam/FL-bench), on whose code PeFLL built its Per-FedAvg, pFedMe
and kNN-Per baselines, for tests/test_pefll_baselines.py::test_matches_fl_bench.

Runs FL-bench's own client classes (``src/client/{perfedavg,pfedme,knnper}.py``, unmodified, from
its checkout) and their servers' ``aggregate_client_updates`` on one tiny setting every part of
which is fixed from outside, so fedapp's clients and strategies can be run on the identical one:
two clients (20 and 16 training examples of 12 features, 3 classes, 8 test examples each), a
two-layer network (``base`` = Linear(12, 8) + ReLU, ``classifier`` = Linear(8, 3)), every
parameter set by ``init_value``, batches of 4 in the recorded order ``batches`` (FL-bench's
train loader is replaced by that list), one local epoch, SGD lr 0.05 with momentum 0.9.

* Per-FedAvg (first order, beta 0.01): each client's fit from the initial model, the unweighted
  mean the server forms, and client 0's one-epoch fine-tuning of that mean (FL-bench's evaluation);
* pFedMe (lambda 15, K 3, personal lr 0.01, mu 1e-3, beta 0.7): each client's local model w and
  personal model theta after its fit, the personal model its package returns, the server's mix;
* kNN-Per (k 5, weight 0.5, scale 100): client 0's kNN probabilities (``get_knn_logits``) on its
  test features from a datastore of its training features, and the test loss and accuracy of
  FL-bench's mixture, with the initial model.

What is replaced around their code: the modules their servers import only for running experiments
(ray, hydra, rich) are stubbed when absent; nothing of the code that computes is.

    $FLBENCH_PY simulations/pefll/flbench_golden.py --src <FL-bench checkout>

run with a python that has torch, torchvision, numpy, omegaconf, pynvml, scikit-learn and
faiss-cpu (``$FLBENCH_PY``); ``--src`` (default ``$FLBENCH_SRC``) is FL-bench at
06e658bca5af6ce732e25bb7c0f8be321e14a85e. Writes tests/data/flbench_golden.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import types
import zlib
from functools import partial
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "data" / "flbench_golden.json"
SETTING = dict(features=12, hidden=8, classes=3, n_train=[20, 16], n_test=8, batch_size=4, lr=0.05,
               momentum=0.9, perfedavg_beta=0.01, pfedme_lambda=15.0, pfedme_k=3, pfedme_personal_lr=0.01,
               pfedme_mu=1e-3, pfedme_beta=0.7, knn_k=5, knn_weight=0.5, knn_scale=100.0)
SHAPES = {"base.0.weight": (8, 12), "base.0.bias": (8,), "classifier.weight": (3, 8), "classifier.bias": (3,)}


def init_value(name: str) -> np.ndarray:
    """A fixed initial value for parameter ``name``: uniform in +-1/sqrt(fan-in), seeded by the name."""
    shape = SHAPES[name]
    rng = np.random.RandomState(zlib.crc32(name.encode()))
    bound = 1 / np.sqrt(shape[1]) if len(shape) > 1 else 0.1
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def client_tensors(pid: int) -> dict[str, np.ndarray]:
    """Client pid's features and labels, train and test: Gaussian, the class shifting the mean."""
    rng = np.random.RandomState(300 + pid)
    out = {}
    for split, n in (("train", SETTING["n_train"][pid]), ("test", SETTING["n_test"])):
        y = rng.randint(0, SETTING["classes"], size=n)
        x = (rng.normal(size=(n, SETTING["features"])) + y[:, None] * np.linspace(-1, 1, SETTING["features"]))
        out[f"{split}_x"], out[f"{split}_y"] = x.astype(np.float32), y.astype(np.int64)
    return out


def batches(pid: int) -> list[list[int]]:
    """Client pid's training batches of one epoch, in order (a seeded permutation in fours)."""
    perm = np.random.RandomState(400 + pid).permutation(SETTING["n_train"][pid]).tolist()
    bs = SETTING["batch_size"]
    return [perm[i:i + bs] for i in range(0, len(perm), bs)]


def stub_missing(*names: str) -> None:
    """Modules only FL-bench's experiment runner uses, so that its server modules import."""
    class Anything(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return type(attr, (), {})

    missing = {n.split(".")[0] for n in names if importlib.util.find_spec(n.split(".")[0]) is None}
    for name in names:
        if name.split(".")[0] in missing:
            for i in range(1, name.count(".") + 2):
                module = sys.modules.setdefault(".".join(name.split(".")[:i]), Anything(name))
                module.__path__ = []  # a package, so that its submodules import


def flat(params) -> dict[str, list]:
    return {k: v.detach().cpu().double().numpy().tolist() for k, v in params.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", default=os.environ.get("FLBENCH_SRC"), help="FL-bench checkout")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not args.src or not (Path(args.src) / "src" / "client" / "pfedme.py").is_file():
        sys.exit(f"--src {args.src!r} is not an FL-bench checkout (src/client/pfedme.py missing)")
    sys.path.insert(0, str(Path(args.src).resolve()))
    stub_missing("ray.actor", "hydra.core.hydra_config", "rich.console", "rich.pretty", "rich.progress", "rich.json",
                 "visdom", "tensorboard")
    from omegaconf import OmegaConf
    from src.client.knnper import kNNPerClient
    from src.client.perfedavg import PerFedAvgClient
    from src.client.pfedme import pFedMeClient
    from src.server.fedavg import FedAvgServer
    from src.server.pfedme import pFedMeServer
    from src.utils.models import DecoupledModel

    torch.manual_seed(0)
    s = SETTING

    class Net(DecoupledModel):
        def __init__(self):
            super().__init__()
            self.base = torch.nn.Sequential(torch.nn.Linear(s["features"], s["hidden"]), torch.nn.ReLU())
            self.classifier = torch.nn.Linear(s["hidden"], s["classes"])

    def initial() -> dict[str, torch.Tensor]:
        return {k: torch.from_numpy(init_value(k)) for k in SHAPES}

    class Data(torch.utils.data.Dataset):  # what FL-bench's clients call on their dataset
        classes = list(range(s["classes"]))
        enable_train_transform = True

        def __len__(self):
            return 64

        def __getitem__(self, i):
            return torch.zeros(s["features"]), 0

        def train(self):
            pass

        def eval(self):
            pass

    cfg = OmegaConf.create({
        "common": {"buffers": "global", "local_epoch": 1, "batch_size": s["batch_size"], "use_cuda": False,
                   "reset_optimizer_on_global_epoch": True, "client_side_evaluation": True,
                   "test": {"client": {"finetune_epoch": 1, "train": False, "val": False, "test": True}}},
        "optimizer": {"lr": s["lr"]},
        "perfedavg": {"version": "fo", "beta": s["perfedavg_beta"], "delta": 1e-3},
        "pfedme": {"lamda": s["pfedme_lambda"], "k": s["pfedme_k"], "pers_lr": s["pfedme_personal_lr"],
                   "mu": s["pfedme_mu"], "beta": s["pfedme_beta"]},
        "knnper": {"k": s["knn_k"], "weight": s["knn_weight"], "scale": s["knn_scale"], "capacity": 500},
    })
    sgd = partial(torch.optim.SGD, lr=s["lr"], momentum=s["momentum"], weight_decay=0.0)
    indices = [{"train": list(range(n)), "val": [], "test": list(range(s["n_test"]))} for n in s["n_train"]]

    def client(cls, pid: int, params: dict[str, torch.Tensor], **extra):
        c = cls(model=Net(), optimizer_cls=sgd, lr_scheduler_cls=None, args=cfg, dataset=Data(),
                data_indices=indices, device=torch.device("cpu"), return_diff=False)
        c.set_parameters({"client_id": pid, "local_epoch": 1, "optimizer_state": None, "lr_scheduler_state": None,
                          "regular_model_params": params, "personal_model_params": {}, **extra})
        d = client_tensors(pid)
        x, y = torch.from_numpy(d["train_x"]), torch.from_numpy(d["train_y"])
        c.trainloader = [(x[b], y[b]) for b in batches(pid)]
        c.testloader = [(torch.from_numpy(d["test_x"]), torch.from_numpy(d["test_y"]))]
        return c

    def aggregate(server_cls, packages) -> dict[str, torch.Tensor]:
        server = types.SimpleNamespace(args=cfg, return_diff=False, model=Net(),
                                       public_model_params={k: v.clone() for k, v in initial().items()})
        server_cls.aggregate_client_updates(server, dict(enumerate(packages)))
        return server.public_model_params

    golden: dict = {"setting": s, "flbench_commit": "06e658bca5af6ce732e25bb7c0f8be321e14a85e",
                    "torch": torch.__version__}

    packages, fitted = [], []
    for pid in range(2):
        c = client(PerFedAvgClient, pid, initial())
        c.fit()
        packages.append(c.package())
        fitted.append(flat(dict(c.model.named_parameters())))
    mean = aggregate(FedAvgServer, packages)
    c = client(PerFedAvgClient, 0, mean)
    c.finetune()
    golden["perfedavg"] = {"weights": [p["weight"] for p in packages], "fitted": fitted, "global": flat(mean),
                           "finetuned": flat(dict(c.model.named_parameters()))}

    packages, local, personal, returned = [], [], [], []
    for pid in range(2):
        c = client(pFedMeClient, pid, initial(), personalized_model_params=initial())
        c.fit()
        p = c.package()
        packages.append(p)
        local.append(flat(dict(zip(SHAPES, p["local_model_params"]))))
        personal.append(flat(dict(c.model.named_parameters())))
        returned.append(flat(p["personalized_model_params"]))
    golden["pfedme"] = {"weights": [p["weight"] for p in packages], "local": local, "personal": personal,
                        "returned-personal": returned, "global": flat(aggregate(pFedMeServer, packages))}

    c = client(kNNPerClient, 0, initial())
    c.testing = True
    c.testset.indices = indices[0]["test"]
    features = torch.cat([c.model.get_last_features(x) for x, _ in c.testloader])
    c.datastore.build([c.model.get_last_features(x) for x, _ in c.trainloader], [y for _, y in c.trainloader])
    knn = c.get_knn_logits(features)
    c.datastore.clear()
    metrics = c.evaluate()["test"]
    golden["knnper"] = {"knn-probabilities": knn.double().numpy().tolist(), "loss": metrics.loss,
                        "accuracy": metrics.accuracy}

    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
