"""Golden numbers from the HCCT authors' code (github.com/hiyuchang/HCCT) on a tiny setting.

Runs with the authors' venv (their requirements) against a scratch copy of their repository (never
part of this one), named as the argument or by ``HCCT_SRC``:

    <authors' venv>/bin/python simulations/hcct/authors_golden.py <authors' checkout>

Setting: 5 clients with 12-60 float examples of 6 features and 3 classes (clients 0-2 from one
labelling, 3-4 from another), a linear model (fedapp's ``logreg``: flatten + Linear, the same
``fc.weight`` / ``fc.bias`` state), batch 64 (one full batch per local epoch, so the order of
the examples does not matter), SGD lr 0.1 * 0.995^t, 1 local epoch, 3 epochs. The loop is
main_cluster.py's for ``--strategy hcct`` (epoch 0: one group of all clients; later epochs
``user_cluster``, ``LocalUpdate.train``, ``FedWeightAvg``), written out here because theirs is
inline in ``__main__``; every step calls their functions. ``n_cluster`` is set to 2: with their
default ``n_cluster`` equal to the number of clients ``user_cluster`` returns singletons without
clustering. Writes tests/data/hcct_authors_golden.json: the data, the initial model and, per alpha,
every epoch's groups and each client's model after the epoch (its group's model).
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

SIZES = [12, 20, 30, 45, 60]
FEATURES, CLASSES, EPOCHS = 6, 3, 3
ALPHAS = [0.0, 30.0, 200.0]  # all alone, two groups, one group
OUT = Path(__file__).resolve().parents[2] / "tests" / "data" / "hcct_authors_golden.json"


def make_data():
    rng = np.random.default_rng(7)
    centres = rng.normal(0, 2.0, (CLASSES, FEATURES))
    data = []
    for pid, n in enumerate(SIZES):
        y = rng.integers(0, CLASSES, n)
        x = centres[y] + rng.normal(0, 1.0, (n, FEATURES))
        if pid >= 3:  # the other labelling: class c is called (c + 1) mod 3
            y = (y + 1) % CLASSES
        data.append((x.astype(np.float32), y.astype(np.int64)))
    return data


class LogReg(torch.nn.Module):
    """fedapp.core.models.LogReg: one Linear on the flattened input."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(FEATURES, CLASSES)

    def forward(self, x):
        return self.fc(x.flatten(1))


def run(repo: str, data, init: dict, alpha: float) -> list[dict]:
    sys.path.insert(0, repo)
    from models.Fed import FedWeightAvg
    from models.Update import LocalUpdate
    from utils.keyfunc import user_cluster

    n = len(data)
    args = SimpleNamespace(alpha=alpha, metrics="cosine", strategy="hcct", fix_D=False, n_cluster=2, num_users=n,
                           local_bs=64, lr=0.1, lr_decay=0.995, local_ep=1, device=torch.device("cpu"), momentum=0.0,
                           personalize=None, epochs=EPOCHS, dataset="synthetic")
    dataset = [(torch.from_numpy(x), int(y)) for xs, ys in data for x, y in zip(xs, ys)]
    starts = np.cumsum([0] + [len(ys) for _, ys in data])
    clients = [LocalUpdate(client_id=i, args=args, dataset=dataset, idxs=range(starts[i], starts[i + 1]),
                           idxs_val=range(starts[i], starts[i + 1])) for i in range(n)]
    ds_locals = [len(ys) for _, ys in data]
    net = LogReg()
    net.load_state_dict(init)
    w_glob = copy.deepcopy(net.state_dict())
    args.model_dim = sum(v.numel() for v in w_glob.values())
    w_globs = {i: copy.deepcopy(w_glob) for i in range(args.n_cluster)}
    w_locals = [None] * n
    g_locals = [copy.deepcopy(w_glob) for _ in range(n)]
    epochs = []
    for it in range(EPOCHS):
        if it == 0:
            groups = {0: list(range(n))}
        else:
            groups, _ = user_cluster(args, ds_locals, g_locals, list(range(n)))
        for c, members in groups.items():
            if it > 0:
                w_globs[c] = (copy.deepcopy(w_locals[members[0]]) if len(members) == 1
                              else FedWeightAvg(w_locals, ds_locals, members))
            net.load_state_dict(w_globs[c])
            for idx in members:
                clients[idx].lr = args.lr * args.lr_decay ** it
                w, _ = clients[idx].train(net=copy.deepcopy(net))
                w_locals[idx] = copy.deepcopy(w)
                for k in w:
                    g_locals[idx][k] = (w_globs[c][k] - w[k]) / clients[idx].lr
            if len(members) == 1:
                w_globs[c] = copy.deepcopy(w_locals[members[0]])
            else:
                w_globs[c] = FedWeightAvg(w_locals, ds_locals, members)
                for idx in members:
                    w_locals[idx] = copy.deepcopy(w_globs[c])
        epochs.append({"groups": sorted(sorted(m) for m in groups.values()),
                       "models": {str(i): {k: v.flatten().tolist() for k, v in w_locals[i].items()} for i in range(n)}})
    return epochs


def main() -> None:
    repo = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("HCCT_SRC")
    if not repo or not (Path(repo) / "main_cluster.py").is_file():
        raise SystemExit(f"the authors' checkout {repo!r}: no main_cluster.py there; give it as the argument "
                         "or HCCT_SRC")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = make_data()
    init = {k: v.detach().clone() for k, v in torch.nn.Linear(FEATURES, CLASSES).state_dict().items()}
    init = {f"fc.{k}": v for k, v in init.items()}
    doc = {"produced-by": "simulations/hcct/authors_golden.py with the authors' code (hiyuchang/HCCT "
                          "5c5b4d53cbaf8db9440528b883244d9528f6b772), torch " + torch.__version__,
           "lr": 0.1, "lr-decay": 0.995, "batch-size": 64, "epochs": EPOCHS,
           "data": [{"x": x.tolist(), "y": y.tolist()} for x, y in data],
           "init": {k: v.flatten().tolist() for k, v in init.items()},
           "runs": {str(a): run(repo, data, init, a) for a in ALPHAS}}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc))
    for a, epochs in doc["runs"].items():
        print("alpha", a, [e["groups"] for e in epochs])


if __name__ == "__main__":
    main()
