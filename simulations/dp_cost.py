"""The accuracy cost of differential privacy (docs/reliability.md, "Differential privacy"): FedAvg's
final central accuracy without ``dp`` and under ``server-fixed`` and ``client-fixed`` at one noise
multiplier and clipping norm, with the epsilon the last round's row reports at ``dp-delta``.

    OMP_NUM_THREADS=1 PYTHONPATH=. python simulations/dp_cost.py --results-dir OUT [--small]

The setting is the attack table's (``simulations/attacks.py``: MNIST, 10 IID clients, every client
every round, seed 0; ``--small``: its CI scale on synthetic data); the three runs differ only in
``dp``. z and C were set before any run; one seed.
"""

from __future__ import annotations

import argparse
import json

import torch

from fedapp.runtime.inprocess import run_local
from simulations.attacks import SETTING, SMALL, accuracy

#: z, C and delta of the table
DP = {"dp-noise-multiplier": 1.0, "dp-clipping-norm": 1.0, "dp-delta": 1e-5}
MECHANISMS = ("none", "server-fixed", "client-fixed")


def table(setting: dict, results_dir: str, mechanisms=MECHANISMS) -> list[dict]:
    """One row per mechanism: final central accuracy and the last row's ``dp-epsilon``."""
    rows = []
    for dp in mechanisms:
        strategy = run_local({**setting, **DP, "strategy": "fedavg", "dp": dp, "run-name": f"fedavg-dp-{dp}",
                              "results-dir": results_dir})
        epsilon = strategy.history[-1].get("dp-epsilon")
        rows.append({"dp": dp, "accuracy": accuracy(strategy),
                     "epsilon": None if epsilon is None else round(float(epsilon), 2)})
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--results-dir", required=True)
    p.add_argument("--small", action="store_true", help="the CI scale (synthetic data, 4 rounds)")
    a = p.parse_args()
    torch.set_num_threads(1)
    setting = SMALL if a.small else SETTING
    rows = table(setting, a.results_dir)
    print(json.dumps({"setting": {**setting, **DP, "strategy": "fedavg"}, "rows": rows}))
    print(f"| dp | accuracy | epsilon at delta {DP['dp-delta']:g} |\n|---|---|---|")
    for r in rows:
        print(f"| {r['dp']} | {r['accuracy']} | {r['epsilon'] if r['epsilon'] is not None else '-'} |")


if __name__ == "__main__":
    main()
