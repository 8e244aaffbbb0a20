"""FedALS Fig. 1: the consensus distance of each layer while FedAvg trains ResNet-20 on CIFAR-10 split
over 5 clients of 2 classes each, tau = 50 local steps a round: the observation FedALS is built on
(early layers drift apart less than late ones).

    OMP_NUM_THREADS=1 PYTHONPATH=. python simulations/fedals/figure1.py --rounds 10 --out simulations/fedals/figure1-cpu.json
    PYTHONPATH=. python simulations/fedals/figure1.py --plot --out simulations/fedals/figure1-cpu.json

The consensus distance of layer l in round t is the paper's (1/K) sum_k ||theta_hat^l - theta_k^l||^2 over the K
client models a round returns (theta_hat their plain mean), over the layer's parameters (its norm layer's affine
parameters joined to it as ``fedapp.core.models.layer_groups`` groups them; running statistics left out),
measured at each aggregation, after the round's tau steps; ``per_parameter`` divides it by the layer's size. The
setting is the FedAvg row of the page's cpu Table 1 (``cpu/cifar10-noniid/fedavg.toml``: label-sorted CIFAR-10
over 5 clients, batch 64, lr 0.02, momentum 0.9, weight decay 1e-4) with tau = 50 as the paper's Fig. 1.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from fedapp.core.models import layer_groups
from fedapp.runtime.client_app import app
from fedapp.runtime.inprocess import InProcessGrid
from fedapp.runtime.preflight import check
from fedapp.runtime.server_app import build_strategy
from simulations.run import read

HERE = Path(__file__).parent
#: the cpu Table 1 FedAvg row's setting; FedAvg itself, tau = 50 (Fig. 1), evaluated after the last round
BASE = HERE / "cpu" / "cifar10-noniid" / "fedavg.toml"
FIGURE = {"strategy": "fedavg", "local-steps": 50, "checkpoint-every": 0, "num-threads": 1}
#: a few seconds' run of the same code (tests): synthetic features, the MLP, 2 steps a round
SMOKE = {"dataset": "synthetic", "model": "mlp", "local-steps": 2}


def run_config(rounds: int, seed: int, smoke: bool = False) -> dict:
    base = {k: v for k, v in read(BASE).items() if not k.startswith("fedals.")}  # FedAvg's keys only
    return {**base, **FIGURE, **(SMOKE if smoke else {}), "num-server-rounds": rounds, "eval-every": rounds,
            "seed": seed}


def consensus(states: list[dict[str, torch.Tensor]], groups: list[list[str]]) -> list[float]:
    """Per layer (``groups`` of state keys), (1/K) sum_k ||mean - state_k||^2 over its float keys."""
    out = []
    for keys in groups:
        flat = torch.stack([torch.cat([s[k].double().flatten() for k in keys]) for s in states])
        out.append(float(((flat - flat.mean(0)) ** 2).sum(1).mean()))
    return out


def measure(rounds: int, seed: int, smoke: bool = False) -> dict:
    """Run FedAvg in process, recording every round's consensus distance per layer before it averages."""
    rc = run_config(rounds, seed, smoke)
    cfg = check(rc)
    strategy = build_strategy(cfg)
    model_keys = dict(strategy.global_state)
    groups = [[k for k in g if model_keys[k].is_floating_point() and not k.endswith(("running_mean", "running_var"))]
              for g in layer_groups(strategy.model)]
    sizes = [sum(model_keys[k].numel() for k in g) for g in groups]
    per_round: list[list[float]] = []
    aggregate = strategy.aggregate

    def watched(server_round, replies):
        per_round.append(consensus([r.payload["arrays"] for r in replies], groups))
        return aggregate(server_round, replies)

    strategy.aggregate = watched
    t0 = time.time()
    grid = InProcessGrid(app, cfg.num_clients, rc)
    try:
        strategy.start(grid)
    finally:
        grid.close()
    return {"config": rc, "seconds": round(time.time() - t0, 1), "layers": [g[0].rpartition(".")[0] for g in groups],
            "sizes": sizes, "distance": per_round,
            "final-accuracy": strategy.history[-1].get("central-accuracy")}


def summary_table(result: dict) -> str:
    """One column a layer (in forward order): its consensus distance averaged over the rounds, and that
    per parameter."""
    rounds, n = len(result["distance"]), len(result["layers"])
    mean = [sum(r[i] for r in result["distance"]) / rounds for i in range(n)]
    return "\n".join([
        "| layer | " + " | ".join(str(i + 1) for i in range(n)) + " |", "|---|" + "---|" * n,
        "| distance | " + " | ".join(f"{m:.2g}" for m in mean) + " |",
        "| per parameter | " + " | ".join(f"{m / size:.1e}" for m, size in zip(mean, result["sizes"])) + " |"])


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    n = len(result["layers"])
    tau = result["config"]["local-steps"]
    steps = [tau * (t + 1) for t in range(len(result["distance"]))]
    for i in range(n):
        ax.plot(steps, [r[i] for r in result["distance"]], color=plt.cm.viridis(i / max(n - 1, 1)),
                label=f"layer {i + 1}" if i in (0, n // 2, n - 1) else None)
    ax.set(yscale="log", xlabel="iteration", ylabel="consensus distance",
           title="FedAvg, ResNet-20, CIFAR-10, 5 clients of 2 classes, tau = 50")
    ax.legend()
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", action="store_true", help="draw and print the table of --out, run nothing")
    a = p.parse_args()
    if not a.plot:
        torch.set_num_threads(1)
        result = measure(a.rounds, a.seed)
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    result = json.loads(a.out.read_text())
    plot(result, HERE / "figure1.png")
    print(summary_table(result))


if __name__ == "__main__":
    main()
