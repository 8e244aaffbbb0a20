"""Write docs/results/fedals.claims.json from the stored run summaries.

    python simulations/fedals/claims.py [simulations/fedals/results/cpu-cifar10-resnet20]

Reads <dir>/<method>/rounds.json of the ResNet-20 CPU runs (fedavg, fedals); accuracy is the mean of
the last 5 central evaluations of the averaged model (fewer when the run has fewer).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def last5(path: Path) -> tuple[float, int, int]:
    rows = json.loads(path.read_text())["rounds"]
    evals = [r for r in rows if r["round"] > 0 and "central-accuracy" in r][-5:]
    return sum(r["central-accuracy"] for r in evals) / len(evals), len(evals), rows[-1]["round"]


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "simulations/fedals/results/cpu-cifar10-resnet20"
    claims = []
    runs = {m: out / m / "rounds.json" for m in ("fedavg", "fedals")}
    if all(p.exists() for p in runs.values()):
        (avg, n_avg, r_avg), (als, n_als, r_als) = last5(runs["fedavg"]), last5(runs["fedals"])
        tuning = json.loads((out / "lr-tuning.json").read_text())
        anchor = out / "authors-fedals-alpha10.json"  # the authors' code on the same reduced setting
        reference = None
        if anchor.exists():
            acc = json.loads(anchor.read_text())["final_accuracy"]
            reference = {"fedals": acc, "note": "authors' code (run_FedALS.sh 10 151 150, lr 2**-5.643856 = 0.02 "
                         "constant, heavy-ball momentum, their own random seed), test accuracy after 150 "
                         "iterations"}
        claims.append({
            "id": "noniid-alpha10-over-fedavg",
            "claim": "Non-IID CIFAR-10 (labels sorted then split, 5 clients), ResNet-20, tau = 5: FedALS with "
                     "alpha = 10 is more accurate than FedAvg (Table 1 / Table 2). Measured at a reduced scale: "
                     f"{r_avg} / {r_als} rounds ({5 * r_avg} / {5 * r_als} iterations instead of 2x10^4), one seed "
                     "instead of 20, each method at the lr its 25-iteration probes picked; accuracy is the mean "
                     f"over the last {min(n_avg, n_als)} evaluations (every 50 iterations), not 5 rounds of a "
                     "converged run.",
            "model": "resnet20",
            "paper": {"fedavg": 0.4651, "fedals": 0.5224},
            "ours": {"fedavg": round(avg, 4), "fedals": round(als, 4)},
            "reference_code": reference,
            "seeds": [0],
            "holds": als > avg,
            "setting": "simulations/fedals/cpu-cifar10-resnet20.toml",
            "command": "python simulations/fedals/tune_lr.py simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                       "fedavg fedals --rounds 5 --eval-every 5 --test-subset 1000 --max-extend 0; python "
                       "simulations/fedals/run.py simulations/fedals/cpu-cifar10-resnet20.toml --methods fedavg "
                       "(then fedals) --lr-from results/fedals/cpu-cifar10-resnet20/lr-tuning.json --set "
                       "num-server-rounds=30 eval-every=10",
            "lr": {m: tuning["winner"][m]["lr"] for m in ("fedavg", "fedals")},
        })
    sweep = {"1": out / "fedavg", "5": out / "fedals-fedals.alpha=5", "10": out / "fedals",
             "25": out / "fedals-fedals.alpha=25"}
    sweep = {a: p for a, p in sweep.items() if (p / "rounds.json").exists()}
    if len(sweep) > 2:
        acc = {a: round(last5(p / "rounds.json")[0], 4) for a, p in sweep.items()}
        rounds = min(last5(p / "rounds.json")[2] for p in sweep.values())
        missing = sorted({"1", "5", "10", "25"} - set(acc), key=int)
        claims.append({
            "id": "alpha-sweep",
            "claim": "Table 2's shape on non-IID CIFAR-10, ResNet-20, tau = 5: alpha = 5 and 10 more accurate than "
                     "alpha = 1 (FedAvg), alpha = 25 less. Measured at a reduced scale: "
                     f"{rounds} rounds ({5 * rounds} iterations instead of 2x10^4), one seed, FedAvg at its tuned "
                     "lr and every alpha > 1 at FedALS's (alpha = 10) tuned lr; mean over the last evaluations "
                     "(every 50 iterations)." + (f" Not run (budget): alpha = {', '.join(missing)}; holds is "
                                                 "judged on the values measured." if missing else ""),
            "model": "resnet20",
            "paper": {"1": 0.4651, "5": 0.5201, "10": 0.5224, "25": 0.3814},
            "ours": acc,
            "reference_code": None,
            "seeds": [0],
            "holds": all(acc[a] > acc["1"] for a in ("5", "10") if a in acc) and acc.get("25", -1.0) < acc["1"],
            "setting": "simulations/fedals/cpu-cifar10-resnet20.toml",
            "command": "python simulations/fedals/run.py simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                       "fedals --sweep fedals.alpha=5,25 --lr-from results/fedals/cpu-cifar10-resnet20/lr-tuning.json "
                       "--set num-server-rounds=30 eval-every=10 (alpha 1 and 10: the runs of the claim above)",
        })
    claims.append({
        "id": "table2-params",
        "claim": "Parameters communicated per client in 2x10^4 iterations (ResNet-20, 5 clients, tau = 5, up plus "
                 "down) for alpha = 1, 5, 10, 25, 50, 100, counted in fedapp's records (exact).",
        "paper": {"1": "2.344B", "5": "0.473B", "10": "0.239B", "25": "0.099B", "50": "0.052B", "100": "0.029B"},
        # the exact counts test_table2_parameters_per_client_resnet20_cifar10 finds in the records
        "ours": {str(a): 2 * 4000 * 650 + 2 * (4000 // a) * 292_304 for a in (1, 5, 10, 25, 50, 100)},
        "reference_code": None,
        "seeds": [],
        "holds": True,
        "setting": "simulations/fedals/table2-cifar10-noniid.toml",
        "command": "python -m pytest tests/test_fedals.py -k table2",
    })
    t2 = claims[-1]
    t2["holds"] = all(f"{t2['ours'][a] / 1e9:.3f}B" == t2["paper"][a] for a in t2["paper"])
    (ROOT / "docs/results/fedals.claims.json").write_text(json.dumps(claims, indent=2) + "\n")


if __name__ == "__main__":
    main()
