"""Golden numbers from the FedSMOO authors' simulator (github woodenchild95/FL-Simulator) on a tiny setting
that fedapp can reproduce exactly; ``tests/test_fedsmoo_golden.py`` replays the setting with fedapp.

    python simulations/fedsmoo/fl_simulator_golden.py --simulator <authors' checkout> --venv <their venv> \
        --out tests/fixtures/fl_simulator_golden.json

The checkout (a scratch copy, never committed) and its venv may also come from ``$FL_SIMULATOR`` and
``$FL_SIMULATOR_VENV``; the script re-runs itself with the venv's python.

The simulator's own ``Server``/``Client`` classes run unmodified: its ``train.py`` is replaced by the few lines
that build ``args``, the data object and the model. The setting (``SETTING``, ``data()``, ``initial_vector()``)
is shared with the test, numpy-only, so both sides start from the same numbers:

* 3 clients of 20 examples each (3x4x4 Gaussian "images", 4 classes), fedapp's ``mlp`` (FC 200-200-4);
* batch 20 = a client's whole data, so each local epoch is one full-batch step and the simulator's shuffled
  ``DataLoader`` order cannot matter; 2 local epochs, 3 rounds; ``args.dataset = "mnist"``, the simulator's
  tensor path without augmentation;
* every client active in every round (``active_ratio = 1``): the simulator samples each client with
  probability ``active_ratio`` (a Bernoulli draw per client, seeded by the round), fedapp a fixed-size sample, so
  only full participation gives both the same clients. ``sampling`` records the simulator's draw for
  100 clients at 10% to show the difference;
* inputs scaled by 8 so the simulator's gradient clipping at norm 10 is active (``clipped_steps`` counts it).

It also records the simulator's per-client class counts (``DatasetObject``, rules 'Dirichlet' and
'Pathological') for 100 clients on CIFAR-10's class sizes (5,000 per class) with its default seed 20; the data
source is swapped for a labels-only stand-in, which its partition loop never looks past.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import types
from pathlib import Path

import numpy as np

SETTING = {
    "clients": 3, "examples": 20, "shape": (3, 4, 4), "classes": 4, "scale": 8.0, "rounds": 3,
    "local_epochs": 2, "batchsize": 20, "lr": 0.1, "lr_decay": 0.9, "weight_decay": 1e-3, "max_norm": 10.0,
    "rho": 0.05, "lamb": 0.1, "alpha": 0.1, "seed": 20,
}
METHODS = ["FedAvg", "SCAFFOLD", "FedDyn", "FedSAM", "MoFedSAM", "FedSpeed", "FedSMOO", "FedCM"]
PROBE = 17  # coordinates recorded per model, evenly spread over the flat parameter vector


def data() -> tuple[np.ndarray, np.ndarray]:
    """x: (clients, examples, 3, 4, 4) float32, y: (clients, examples) int64."""
    s = SETTING
    rng = np.random.RandomState(0)
    x = (s["scale"] * rng.randn(s["clients"], s["examples"], *s["shape"])).astype(np.float32)
    y = rng.randint(0, s["classes"], size=(s["clients"], s["examples"])).astype(np.int64)
    return x, y


def initial_vector(num_params: int) -> np.ndarray:
    """The initial flat parameter vector (named_parameters order)."""
    return (0.1 * np.random.RandomState(1).randn(num_params)).astype(np.float32)


def summary(vec) -> dict:
    """Checksums and probe coordinates of a flat float vector (numpy or torch)."""
    v = np.asarray(vec, dtype=np.float64)
    idx = np.linspace(0, len(v) - 1, PROBE).astype(int)
    return {"sum": float(v.sum()), "abs_sum": float(np.abs(v).sum()), "norm": float(np.sqrt((v * v).sum())),
            "probe_index": idx.tolist(), "probe": v[idx].tolist()}


def run_method(method: str, sim: Path, out_dir: Path) -> dict:
    import torch

    import server as sim_server  # the simulator's package (sys.path set in main)
    from utils import get_mdl_params, set_client_from_params

    from fedapp.core.models import MLP

    s = SETTING
    x, y = data()
    args = types.SimpleNamespace(
        dataset="mnist", total_client=s["clients"], active_ratio=1.0, comm_rounds=s["rounds"],
        local_epochs=s["local_epochs"], batchsize=s["batchsize"], weight_decay=s["weight_decay"],
        local_learning_rate=s["lr"], global_learning_rate=1.0, lr_decay=s["lr_decay"], seed=s["seed"],
        use_RI=False, alpha=s["alpha"], beta=0.1, beta1=0.9, beta2=0.99, lamb=s["lamb"], rho=s["rho"], gamma=1.0,
        epsilon=0.01, method=method, out_file=str(out_dir), non_iid=True, split_rule="Dirichlet", split_coef=0.1)
    datasets = types.SimpleNamespace(client_x=[xi for xi in x], client_y=[yi.reshape(-1, 1) for yi in y],
                                     test_x=x[0], test_y=y[0].reshape(-1, 1))
    model_func = lambda: MLP(s["shape"], s["classes"])  # noqa: E731
    init = model_func()
    n = sum(p.numel() for p in init.parameters())
    set_client_from_params("cpu", init, torch.from_numpy(initial_vector(n)))
    torch.manual_seed(s["seed"])
    np.random.seed(s["seed"])
    srv = getattr(sim_server, method)(device=torch.device("cpu"), model_func=model_func, init_model=init,
                                      init_par_list=get_mdl_params(init), datasets=datasets, method=method, args=args)
    rounds, test = [], srv._test_

    def record(t, selected):
        rounds.append({"round": t + 1, "selected": [int(c) for c in selected], "lr": srv.lr,
                       **summary(srv.server_model_params_list.numpy())})
        test(t, selected)

    srv._test_ = record
    clipped = [0]
    clip = torch.nn.utils.clip_grad_norm_

    def counting_clip(parameters, max_norm, *a, **k):
        norm = clip(parameters, max_norm, *a, **k)
        clipped[0] += int(norm > max_norm)
        return norm

    torch.nn.utils.clip_grad_norm_ = counting_clip
    try:
        srv.train()
    finally:
        torch.nn.utils.clip_grad_norm_ = clip
    return {"initial": summary(initial_vector(n)), "rounds": rounds, "clipped_steps": clipped[0],
            "total_steps": s["rounds"] * s["clients"] * s["local_epochs"]}


def sampling(rounds: int = 4, total: int = 100, ratio: float = 0.1, seed: int = 20) -> list[list[int]]:
    """The simulator's ``Server._activate_clients_`` draw for rounds 1..``rounds``."""
    import server.server as base

    stub = types.SimpleNamespace(args=types.SimpleNamespace(seed=seed, total_client=total, active_ratio=ratio))
    return [[int(c) for c in base.Server._activate_clients_(stub, t)] for t in range(rounds)]


def class_counts(rule: str, arg: float, n_client: int = 100, seed: int = 20, work: Path = Path(".")) -> list[list[int]]:
    """Per-client class counts of the simulator's ``DatasetObject`` on CIFAR-10's class sizes."""
    import torch
    import torchvision

    import dataset as sim_dataset

    class Labels(torch.utils.data.Dataset):  # CIFAR-10's 50,000 labels, 5,000 per class, images all zero
        def __init__(self, root, train, download, transform):
            self.targets = np.repeat(np.arange(10), 5000) if train else np.repeat(np.arange(10), 1000)

        def __len__(self):
            return len(self.targets)

        def __getitem__(self, i):
            return torch.zeros(3, 32, 32), int(self.targets[i])

    real, save = torchvision.datasets.CIFAR10, np.save
    torchvision.datasets.CIFAR10, np.save = Labels, lambda *_a, **_k: None  # nothing written but its folder
    (work / "Data").mkdir(parents=True, exist_ok=True)
    try:
        obj = sim_dataset.DatasetObject(dataset="CIFAR10", n_client=n_client, seed=seed, rule=rule, rule_arg=arg,
                                        data_path=str(work) + "/")
    finally:
        torchvision.datasets.CIFAR10, np.save = real, save
    return [np.bincount(np.asarray(cy).reshape(-1), minlength=10).tolist() for cy in obj.client_y]


def authors_code(p: argparse.ArgumentParser) -> None:
    """The options naming the authors' code: its checkout, its venv and a scratch folder."""
    p.add_argument("--simulator", type=Path, default=os.environ.get("FL_SIMULATOR"),
                   help="scratch copy of the FL-Simulator checkout (default: $FL_SIMULATOR)")
    p.add_argument("--venv", type=Path, default=os.environ.get("FL_SIMULATOR_VENV"),
                   help="the simulator's venv, whose python runs this script (default: $FL_SIMULATOR_VENV)")
    p.add_argument("--work", type=Path, help="scratch folder for the simulator's files (default: a new temporary one)")


def enter(a: argparse.Namespace) -> None:
    """Re-run this script with the venv's python unless it already runs there; then put the simulator's
    checkout and this repository first on the import path."""
    if a.simulator is None or not a.simulator.is_dir():
        raise SystemExit(f"--simulator: {a.simulator} is not the FL-Simulator checkout (or set $FL_SIMULATOR)")
    if a.venv is not None and Path(sys.prefix).resolve() != a.venv.resolve():
        python = str(a.venv / "bin" / "python")
        os.execv(python, [python, *sys.argv])
    a.work = a.work or Path(tempfile.mkdtemp(prefix="fl_simulator_"))
    sys.path[:0] = [str(a.simulator), str(Path(__file__).resolve().parents[2])]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    authors_code(p)
    p.add_argument("--out", required=True, type=Path)
    a = p.parse_args()
    enter(a)
    import torch

    torch.set_num_threads(1)
    a.work.mkdir(parents=True, exist_ok=True)
    fixture = {"setting": SETTING, "simulator": "woodenchild95/FL-Simulator 502bec65570165d1ff1a6ce76375297145c734e3",
               "torch": torch.__version__, "methods": {}}
    for method in METHODS:
        fixture["methods"][method] = run_method(method, a.simulator, a.work / method)
        print(method, fixture["methods"][method]["rounds"][-1]["norm"], flush=True)
    fixture["sampling_100_clients_10pct_seed20"] = sampling()
    fixture["class_counts_cifar10_100_clients_seed20"] = {
        "Dirichlet-0.1": class_counts("Dirichlet", 0.1, work=a.work / "dir"),
        "Pathological-3": class_counts("Pathological", 3, work=a.work / "path")}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(fixture, indent=1) + "\n")


if __name__ == "__main__":
    main()
