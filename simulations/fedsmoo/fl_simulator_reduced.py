"""Run the FedSMOO authors' simulator (FL-Simulator, unmodified classes, from a scratch copy) on fedapp's
reduced Table 1 settings, for a side-by-side with ``reduced-cifar10-mlp-{dir0.1,path3}-10pct-of-100.toml``.

    python simulations/fedsmoo/fl_simulator_reduced.py --simulator <authors' checkout> --venv <their venv> \
        --data <folder with cifar-10-batches-py> --method FedSMOO --seed 20 --out OUT/FedSMOO-s20.json \
        --config simulations/fedsmoo/reduced-cifar10-mlp-dir0.1-10pct-of-100.toml

The checkout and venv may also come from ``$FL_SIMULATOR`` and ``$FL_SIMULATOR_VENV`` (as
``fl_simulator_golden.py``); ``summaries/table1/<column>/authors.json`` holds what these runs gave.

Everything the simulator decides stays its own: its ``DatasetObject`` partition (rule 'Dirichlet' for
``dirichlet-hsu``, 'Pathological' for ``pathological-hsu``; its per-client class counts go to the output), its
Bernoulli client sampling, normalisation, augmentation, clipping at 10, local solvers and servers. From the
run-config file come the numbers (clients, ratio, rounds, epochs, batch, lr, per-method lr decay, weight
decay, rho, lamb = 1/beta, alpha) and the model: fedapp's ``mlp``, passed as the simulator's model function
(its own model zoo has no MLP for CIFAR). Shims, all outside the training path: torchvision's MD5 check and
download are disabled (our converted CIFAR-10 batches), and ``_test_`` evaluates only the test set, every
``eval-every`` rounds and after the last (the simulator evaluates train and test sets every round).

Ablations (each removes one difference to fedapp; off by default): ``--sampling fedapp`` replaces the
simulator's Bernoulli draw by fedapp's (exactly round(ratio x clients), from ``default_rng([seed, 7])`` as
``FedStrategy.sample``, so the same client sets as fedapp's run of that seed); ``data-augment = false`` in the
config (or ``--set data-augment=false``) builds the clients' datasets without the simulator's flip and crop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tomllib
import types
from pathlib import Path

RULES = {"dirichlet-hsu": ("Dirichlet", "partition-alpha"), "pathological-hsu": ("Pathological", "partition-classes")}
PREFIX = {"FedAvg": "fedavg", "FedAdam": "fedadam", "SCAFFOLD": "scaffold", "FedCM": "fedcm", "FedDyn": "feddyn",
          "FedSAM": "fedsam", "MoFedSAM": "mofedsam", "FedSpeed": "fedspeed", "FedSMOO": "fedsmoo"}


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from simulations.fedsmoo.fl_simulator_golden import authors_code, enter

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    authors_code(p)
    p.add_argument("--data", required=True, type=Path, help="folder holding cifar-10-batches-py")
    p.add_argument("--config", required=True)
    p.add_argument("--method", required=True, choices=list(PREFIX))
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--rounds", type=int, help="fewer rounds than the config (smoke runs)")
    p.add_argument("--sampling", choices=["bernoulli", "fedapp"], default="bernoulli",
                   help="bernoulli: the simulator's own; fedapp: fedapp's fixed-size draw (same sets)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, TOML values")
    p.add_argument("--summary", type=Path, help="also put this run's row in this summary (summaries/table1/"
                                                "<column>/authors.json), replacing one of the same method and seed")
    a = p.parse_args()
    column = reduced_column(a.config) if a.summary else None
    enter(a)
    import numpy as np
    import torch
    import torchvision.datasets.cifar as tv_cifar

    torch.set_num_threads(1)
    tv_cifar.check_integrity = lambda fpath, md5=None: Path(fpath).exists()
    tv_cifar.CIFAR10.download = lambda self, *x, **k: None
    raw = a.work / "Data" / "Raw"
    raw.mkdir(parents=True, exist_ok=True)
    link = raw / "cifar-10-batches-py"
    if not link.exists():
        link.symlink_to(a.data / "cifar-10-batches-py")

    import server as sim_server
    from dataset import DatasetObject
    from utils import get_mdl_params

    from fedapp.core.models import MLP

    with open(a.config, "rb") as f:
        cfg = tomllib.load(f)
    cfg.update(tomllib.loads("\n".join(a.set)))
    pre = PREFIX[a.method]
    assert cfg["partition"] in RULES and cfg["model"] == "mlp" and cfg["dataset"] == "cifar10"
    rule, coef_key = RULES[cfg["partition"]]
    args = types.SimpleNamespace(
        dataset="CIFAR10", total_client=cfg["num-clients"], active_ratio=cfg["fraction-train"],
        comm_rounds=a.rounds or cfg["num-server-rounds"], local_epochs=cfg["local-epochs"], batchsize=cfg["batch-size"],
        weight_decay=cfg["weight-decay"], local_learning_rate=cfg["lr"],
        # FedAdam's server step: the simulator's global lr is fedapp's eta, its epsilon fedapp's tau
        global_learning_rate=cfg.get("fedadam.eta", 1.0) if pre == "fedadam" else 1.0,
        lr_decay=cfg.get(f"{pre}.lr-decay") or cfg["lr-decay"], seed=a.seed, use_RI=False,
        alpha=cfg.get(f"{pre}.alpha", 0.1), beta=0.1, beta1=cfg.get("fedadam.beta-1", 0.9),
        beta2=cfg.get("fedadam.beta-2", 0.99), lamb=1.0 / cfg.get(f"{pre}.beta", 10.0),
        rho=cfg.get(f"{pre}.rho", 0.1), gamma=1.0, epsilon=cfg.get("fedadam.tau", 0.01),
        method=a.method, out_file=str(a.work / "out"), non_iid=True, split_rule=rule,
        split_coef=float(cfg[coef_key]))  # a float, as train.py's --split-coef
    torch.manual_seed(a.seed)  # as the simulator's train.py, in its order
    np.random.seed(a.seed)
    data = DatasetObject(dataset="CIFAR10", n_client=args.total_client, seed=a.seed, rule=rule,
                         rule_arg=args.split_coef, data_path=str(a.work) + "/")
    model_func = lambda: MLP((3, 32, 32), 10)  # noqa: E731
    init = model_func()
    srv = getattr(sim_server, a.method)(device=torch.device("cpu"), model_func=model_func, init_model=init,
                                        init_par_list=get_mdl_params(init), datasets=data, method=a.method,
                                        args=args)
    counts = [np.bincount(np.asarray(y).ravel(), minlength=10).tolist() for y in data.client_y]
    rows, t0, every = [], time.time(), cfg.get("eval-every", 1)

    def test(t, selected):
        row = {"round": t + 1, "clients": len(selected), "selected": [int(i) for i in selected], "lr": srv.lr, "wall-time": time.time() - t0}
        if (t + 1) % every == 0 or t + 1 == args.comm_rounds:
            loss, acc = srv._validate_((data.test_x, data.test_y))
            row.update({"central-loss": float(loss), "central-accuracy": float(acc)})
            print(row, flush=True)
        rows.append(row)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"method": a.method, "seed": a.seed, "config": a.config, "set": a.set,
                                        "sampling": a.sampling, "rounds": rows,
                                        "class-counts": counts}) + "\n")

    srv._test_ = test
    if a.sampling == "fedapp":
        rng, m = np.random.default_rng([a.seed, 7]), int(round(args.active_ratio * args.total_client))
        srv._activate_clients_ = lambda t: np.sort(rng.choice(list(range(args.total_client)), size=m, replace=False))
    if not cfg.get("data-augment", True):
        sim_dataset = sys.modules["dataset"].Dataset
        init_ds = sim_dataset.__init__
        sim_dataset.__init__ = lambda self, x, y=True, train=False, dataset_name="": init_ds(self, x, y, False,
                                                                                             dataset_name)
    srv.train()
    if a.summary:
        add_to_summary(a.summary, column, {"method": pre, "seed": a.seed, "seconds": round(time.time() - t0, 1),
                                           "command": command(a)}, rows)


def command(a: argparse.Namespace) -> str:
    """The command line that made a run (paths to the authors' code and the data as placeholders)."""
    extra = "".join(f" --{k} {v}" for k, v in (("rounds", a.rounds), ("sampling", a.sampling if a.sampling !=
                                                                                  "bernoulli" else None)) if v)
    extra += f" --set {' '.join(a.set)}" if a.set else ""
    return (f"python simulations/fedsmoo/fl_simulator_reduced.py --simulator <FL-Simulator 502bec6> --venv <its venv> "
            f"--data <cifar-10-batches-py folder> --method {a.method} --seed {a.seed} --out OUT "
            f"--config simulations/fedsmoo/{Path(a.config).name}{extra}")


def reduced_column(config: str) -> str:
    """The Table 1 column whose cpu setting ``config`` is."""
    from simulations.fedsmoo.tables import REDUCED

    column = {name: cid for cid, name in REDUCED.items()}.get(Path(config).name)
    if column is None:
        raise SystemExit(f"--config: {config} is not one of Table 1's cpu settings ({', '.join(REDUCED.values())})")
    return column


def add_to_summary(path: Path, column: str, row: dict, history: list[dict]) -> None:
    """Put one run's condensed row (Table 1's metric and curve, as fedapp's runs have) in the authors'
    summary of ``column``, replacing a row of the same method and seed (and a recorded mean of the method's
    seeds, a row without a seed of its own)."""
    from simulations.fedsmoo.tables import TABLE1
    from simulations.tables import dumps

    curve = TABLE1.metric.curve(history)
    row |= {"value": round(TABLE1.metric.value(curve), 6), "rounds": history[-1]["round"], "curve": curve}
    doc = json.loads(path.read_text()) if path.exists() else {
        "paper": "fedsmoo", "table": "table1", "column": column, "scale": "cpu", "rows": []}
    doc["rows"] = [r for r in doc["rows"] if r["method"] != row["method"] or r["seed"] not in (row["seed"], None)]
    doc["rows"] = sorted(doc["rows"] + [row], key=lambda r: (list(PREFIX.values()).index(r["method"]), r["seed"]))
    if all(r["seed"] is not None for r in doc["rows"]):  # no recorded mean left for a note to describe
        doc.pop("note", None)
    doc["code"] = "woodenchild95/FL-Simulator 502bec6, simulations/fedsmoo/fl_simulator_reduced.py (its Bernoulli client draw)"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(doc))


if __name__ == "__main__":
    main()
