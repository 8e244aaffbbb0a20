"""Write docs/results/fedals.claims.json from the stored run summaries.

    python simulations/fedals/claims.py [--long RUNS_DIR [RUNS_DIR ...]]

``--long`` first condenses the 2000-iteration ResNet-20 runs in the RUNS_DIRs (``<method>[-KEY=VALUE]-s<s>/rounds.json``
of ``python -m simulations.run ... --seeds S --set num-server-rounds=400``; the earlier runner's ``<method>-seed=<s>``
too) into ``LONG`` (every evaluation's accuracy and training loss, per run; a ``--sweep`` value of
``partition`` or ``fedals.scaffold-variant`` becomes part of the method: ``fedavg-iid``,
``fedals-scaffold-authors``); the claims ``noniid-alpha10-over-fedavg``, ``alpha-sweep``, ``iid-control`` and
``scaffold-noniid`` are built from ``LONG`` (complete runs only), the others from the 150-iteration runs in
``simulations/fedals/results/cpu-cifar10-resnet20``. Accuracy is the mean of the last 5 central
evaluations of the averaged model (fewer when the run has fewer).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LONG = ROOT / "simulations/fedals/results/cpu-cifar10-resnet20-2000.json"
LONG_ROUNDS = 400
# the authors' code on the same 2000-iteration setting (anchor harness summaries; alpha 1 is their FedAvg)
AUTHORS_LONG = {"fedavg": "authors-2000-alpha1.json", "fedals": "authors-2000-alpha10.json"}


def condense(runs_dirs: list[Path]) -> dict:
    """Per run: method, seed, lr, rounds done, every evaluation (round, accuracy, train loss), mean of the last 5."""
    runs = {}
    for path in sorted(p for d in runs_dirs for p in d.glob("*/rounds.json")):
        doc = json.loads(path.read_text())
        name = re.sub(r"-(?:partition|fedals\.scaffold-variant)=", "-", path.parent.name)
        run = re.fullmatch(r"(.+)-(?:seed=|s)(\d+)", name)
        alpha = re.fullmatch(r"fedals-fedals\.alpha=(\d+)", path.parent.name)  # the earlier runner's --sweep
        if run is not None:
            method, seed = run.groups()
        elif alpha is not None:
            method, seed = f"fedals-alpha{alpha.group(1)}", doc["config"].get("seed", 0)
        else:
            continue
        rows = doc["rounds"]
        evals = [[r["round"], r["central-accuracy"], r.get("train-loss")] for r in rows if "central-accuracy" in r]
        after = [acc for rnd, acc, _ in evals if rnd > 0][-5:]  # last5's rule, on the rows already read
        # one entry per run name and lr: a rerun at another method's tuned lr sits beside the first
        runs[f"{path.parent.name}@lr{doc['config']['lr']:g}"] = {
            "method": method, "seed": int(seed), "lr": doc["config"]["lr"], "rounds": rows[-1]["round"],
            "evals": evals, "acc-last5": sum(after) / len(after), "seconds": round(rows[-1]["wall-time"], 1),
            "train-params-per-client": (rows[-1]["total-train-params-down"] + rows[-1]["total-train-params-up"]) / 5,
        }
    return runs


def last5(path: Path) -> tuple[float, int, int]:
    rows = json.loads(path.read_text())["rounds"]
    evals = [r for r in rows if r["round"] > 0 and "central-accuracy" in r][-5:]
    return sum(r["central-accuracy"] for r in evals) / len(evals), len(evals), rows[-1]["round"]


def authors_last5(summary: dict, iterations: int = 5 * LONG_ROUNDS) -> float | None:
    """Mean of the authors' code's last 5 evaluations (iterations after 0), None unless it reached ``iterations``."""
    evals = [r for r in summary["accuracy_per_round"] if r["iteration"] > 0]
    if not evals or evals[-1]["iteration"] < iterations:
        return None
    return round(sum(r["test_acc"] for r in evals[-5:]) / len(evals[-5:]), 4)


def authors_reference(out: Path) -> dict | None:
    """The authors' FedAvg and FedALS on the 2000-iteration setting, when both summaries are stored and complete."""
    paths = {m: out / name for m, name in AUTHORS_LONG.items()}
    if not all(p.exists() for p in paths.values()):
        return None
    acc = {m: authors_last5(json.loads(p.read_text())) for m, p in paths.items()}
    if None in acc.values():
        return None
    return {**acc, "note": "authors' code, unmodified (anchor harness run_FedALS.sh ALPHA 2001 100, alpha 1 and 10, "
                           "L = 19, constant lr 2**-5.643856 = 0.02, heavy-ball momentum, seeds from os.urandom): "
                           "mean of the last 5 evaluations (iterations 1600-2000) of their averaged model"}


def long_claim(runs: dict, tuning: dict, reference: dict | None = None) -> dict | None:
    done = {(r["method"], r["seed"]): r for r in runs.values() if r["rounds"] == LONG_ROUNDS}
    seeds = sorted(s for m, s in done if m == "fedavg" and ("fedals", s) in done)
    if not seeds:
        return None
    mean = {m: round(sum(done[m, s]["acc-last5"] for s in seeds) / len(seeds), 4) for m in ("fedavg", "fedals")}
    return {
        "id": "noniid-alpha10-over-fedavg",
        "claim": "Non-IID CIFAR-10 (labels sorted then split, 5 clients), ResNet-20, tau = 5: FedALS with alpha = 10 "
                 "is more accurate than FedAvg (Table 1 / Table 2). Measured at a reduced scale: 400 rounds (2000 "
                 f"iterations instead of 2x10^4), {len(seeds)} seed(s) instead of 20, each method at the lr its "
                 "25-iteration probes picked; accuracy of the averaged model on the 10,000 test images, mean of "
                 "the last 5 evaluations (every 100 iterations: iterations 1600-2000).",
        "model": "resnet20",
        "paper": {"fedavg": 0.4651, "fedals": 0.5224},
        "ours": {**mean, "iterations": 5 * LONG_ROUNDS,
                 "per-seed": {m: [round(done[m, s]["acc-last5"], 4) for s in seeds] for m in ("fedavg", "fedals")}},
        "reference_code": reference,
        "seeds": seeds,
        "holds": mean["fedals"] > mean["fedavg"],
        "setting": "simulations/fedals/cpu-cifar10-resnet20.toml",
        "command": "python -m simulations.run simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                   "simulations/fedals/methods/fedavg.toml (then fedals.toml) --seeds S --lr-from "
                   "simulations/fedals/results/cpu-cifar10-resnet20/lr-tuning.json --set num-server-rounds=400 "
                   "eval-every=20; python simulations/fedals/claims.py --long results/fedals/cpu-cifar10-resnet20",
        "lr": {m: tuning["winner"][m]["lr"] for m in ("fedavg", "fedals")},
    }


def finished(runs: dict, lrs: dict | None = None) -> dict:
    """(method, seed) -> mean of the last 5 evaluations, for the runs that completed LONG_ROUNDS; a method
    named in ``lrs`` counts only at that lr (its E.3 winner)."""
    lrs = lrs or {}
    return {(r["method"], r["seed"]): r["acc-last5"] for r in runs.values()
            if r["rounds"] == LONG_ROUNDS and r["lr"] == lrs.get(r["method"], r["lr"])}


def other_lrs(runs: dict, lrs: dict) -> dict:
    """'<method>@lr<lr>' -> mean of the last 5 evaluations, seed 0, for complete runs away from the method's tuned lr."""
    return {f"{r['method']}@lr{r['lr']:g}": round(r["acc-last5"], 4) for r in runs.values()
            if r["rounds"] == LONG_ROUNDS and r["seed"] == 0 and r["method"] in lrs and r["lr"] != lrs[r["method"]]}


def long_sweep_claim(runs: dict) -> dict | None:
    """Table 2's alpha sweep from the 2000-iteration runs of seed 0 (alpha 1 is FedAvg, alpha 10 FedALS's run)."""
    done = finished(runs)
    methods = {"1": "fedavg", "5": "fedals-alpha5", "10": "fedals", "25": "fedals-alpha25"}
    acc = {a: round(done[m, 0], 4) for a, m in methods.items() if (m, 0) in done}
    if not {"5", "25"} & set(acc):
        return None
    missing = sorted(set(methods) - set(acc), key=int)
    return {
        "id": "alpha-sweep",
        "claim": "Table 2's shape on non-IID CIFAR-10, ResNet-20, tau = 5: alpha = 5 and 10 more accurate than "
                 "alpha = 1 (FedAvg), alpha = 25 less. Measured at a reduced scale: 400 rounds (2000 iterations "
                 "instead of 2x10^4), seed 0, FedAvg at its tuned lr and every alpha > 1 at FedALS's (alpha = 10) "
                 "tuned lr; mean of the last 5 evaluations (iterations 1600-2000)."
                 + (f" Not run (budget): alpha = {', '.join(missing)}; holds is judged on the values measured."
                    if missing else ""),
        "model": "resnet20",
        "paper": {"1": 0.4651, "5": 0.5201, "10": 0.5224, "25": 0.3814},
        "ours": {**acc, "iterations": 5 * LONG_ROUNDS},
        "reference_code": None,
        "seeds": [0],
        "holds": all(acc[a] > acc["1"] for a in ("5", "10") if a in acc) and acc.get("25", -1.0) < acc["1"],
        "setting": "simulations/fedals/cpu-cifar10-resnet20.toml",
        "command": "python -m simulations.run simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                   "simulations/fedals/methods/fedals.toml --sweep fedals.alpha=5,25 --seeds 0 --lr-from "
                   "simulations/fedals/results/cpu-cifar10-resnet20/lr-tuning.json --set num-server-rounds=400 "
                   "eval-every=20 (alpha 1 and 10: seed 0 of the claim above); python simulations/fedals/claims.py "
                   "--long results/fedals/cpu-cifar10-resnet20",
    }


def iid_claim(runs: dict, lrs: dict) -> dict | None:
    """The iid control: FedAvg and FedALS (alpha = 10) on a shuffled split, seed 0, each at its IID probes' winner
    (``lrs``: 'fedavg-iid' and 'fedals-iid'); runs at other lrs are reported beside."""
    done = {m: acc for (m, seed), acc in finished(runs, lrs).items() if seed == 0}
    if not {"fedavg-iid", "fedals-iid"} <= set(done):
        return None
    acc = {"fedavg": round(done["fedavg-iid"], 4), "fedals": round(done["fedals-iid"], 4)}
    return {
        "id": "iid-control",
        "claim": "IID CIFAR-10 (shuffled, then split over 5 clients), ResNet-20, tau = 5: FedALS with alpha = 10 is "
                 "about as accurate as FedAvg (Table 1: 0.8865 against 0.8761); judged here as FedALS at most 1 "
                 "point below FedAvg. Measured at a reduced scale: 400 rounds (2000 iterations; the paper runs 10^4 "
                 "for IID), seed 0, each method at the winner of its own IID probes (E.3, 25 iterations); mean of "
                 "the last 5 evaluations (iterations 1600-2000).",
        "model": "resnet20",
        "paper": {"fedavg": 0.8761, "fedals": 0.8865},
        "ours": {**acc, "iterations": 5 * LONG_ROUNDS, "lr": {"fedavg": lrs["fedavg-iid"], "fedals": lrs["fedals-iid"]},
                 "at-other-lr": other_lrs(runs, lrs)},
        "reference_code": None,
        "seeds": [0],
        "holds": acc["fedals"] >= acc["fedavg"] - 0.01,
        "setting": "simulations/fedals/cpu-cifar10-resnet20.toml",
        "command": "python simulations/fedals/tune_lr.py simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                   "simulations/fedals/methods/fedavg.toml simulations/fedals/methods/fedals.toml --rounds 5 "
                   "--eval-every 5 --test-subset 1000 --max-extend 3 --set 'partition=\"iid\"' --name lr-tuning-iid; "
                   "python -m simulations.run simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                   "simulations/fedals/methods/fedavg.toml --sweep partition=iid --seeds 0 --set num-server-rounds=400 "
                   "eval-every=20 lr=0.04 (then fedals.toml, lr=0.01); python simulations/fedals/claims.py --long DIRS",
    }


def scaffold_claim(runs: dict, lrs: dict) -> dict | None:
    """FedALS + SCAFFOLD (alpha = 10), both variants, against FedAvg and FedALS of the same seed (0), each method
    at its probes' winner (``lrs``, keyed by condensed method); runs at other lrs are reported beside."""
    done = {m: acc for (m, seed), acc in finished(runs, lrs).items() if seed == 0}
    variants = {v: done[f"fedals-scaffold-{v}"] for v in ("algorithm4", "authors") if f"fedals-scaffold-{v}" in done}
    if "algorithm4" not in variants or not {"fedavg", "fedals"} <= set(done):
        return None
    ours = {**{v: round(a, 4) for v, a in variants.items()}, "fedals": round(done["fedals"], 4),
            "fedavg": round(done["fedavg"], 4), "iterations": 5 * LONG_ROUNDS,
            "lr": {m.removeprefix("fedals-scaffold-"): lr for m, lr in lrs.items()}, "at-other-lr": other_lrs(runs, lrs)}
    return {
        "id": "scaffold-noniid",
        "claim": "Non-IID CIFAR-10, ResNet-20, tau = 5: FedALS + SCAFFOLD (alpha = 10) keeps FedALS's gain over "
                 "FedAvg (Table 1: 0.5121 against 0.4651; FedALS 0.5224). Judged on Algorithm 4 (the default "
                 "variant); the authors' variant (their separate momentum-free control step and x_pre shared "
                 "with the model) is reported beside it. Reduced scale: 400 rounds (2000 iterations), seed 0, "
                 "each variant at the winner of its own probes (E.3, 25 iterations), FedAvg and FedALS of seed 0 "
                 "of the claim above; mean of the last 5 evaluations (iterations 1600-2000).",
        "model": "resnet20",
        "paper": {"fedals-scaffold": 0.5121, "fedals": 0.5224, "fedavg": 0.4651, "scaffold": 0.4538},
        "ours": ours,
        "reference_code": None,
        "seeds": [0],
        "holds": ours["algorithm4"] > ours["fedavg"],
        "setting": "simulations/fedals/cpu-cifar10-resnet20.toml",
        "command": "python simulations/fedals/tune_lr.py simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                   "simulations/fedals/methods/fedals-scaffold.toml simulations/fedals/methods/fedals-scaffold-authors.toml "
                   "--rounds 5 --eval-every 5 --test-subset 1000 --max-extend 3; python -m simulations.run "
                   "simulations/fedals/cpu-cifar10-resnet20.toml --methods simulations/fedals/methods/fedals-scaffold.toml "
                   "--sweep fedals.scaffold-variant=algorithm4 --seeds 0 --set num-server-rounds=400 eval-every=20 "
                   "lr=0.04 (then authors, lr=0.02); python simulations/fedals/claims.py --long DIRS",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long", type=Path, nargs="+", help="raw directories of the 2000-iteration runs, condensed into LONG first")
    args = ap.parse_args()
    if args.long:
        LONG.write_text(json.dumps(condense(args.long), indent=1) + "\n")
    out = ROOT / "simulations/fedals/results/cpu-cifar10-resnet20"
    claims = []
    runs = {m: out / m / "rounds.json" for m in ("fedavg", "fedals")}
    tuning = json.loads((out / "lr-tuning.json").read_text())
    long = long_claim(json.loads(LONG.read_text()), tuning, authors_reference(out)) if LONG.exists() else None
    if long:
        claims.append(long)
    elif all(p.exists() for p in runs.values()):
        (avg, n_avg, r_avg), (als, n_als, r_als) = last5(runs["fedavg"]), last5(runs["fedals"])
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
                       "simulations/fedals/methods/fedavg.toml simulations/fedals/methods/fedals.toml --rounds 5 "
                       "--eval-every 5 --test-subset 1000 --max-extend 0; python -m simulations.run "
                       "simulations/fedals/cpu-cifar10-resnet20.toml --methods simulations/fedals/methods/fedavg.toml "
                       "(then fedals.toml) --lr-from results/fedals/cpu-cifar10-resnet20/lr-tuning.json --set "
                       "num-server-rounds=30 eval-every=10",
            "lr": {m: tuning["winner"][m]["lr"] for m in ("fedavg", "fedals")},
        })
    sweep = {"1": out / "fedavg", "5": out / "fedals-fedals.alpha=5", "10": out / "fedals",
             "25": out / "fedals-fedals.alpha=25"}
    sweep = {a: p for a, p in sweep.items() if (p / "rounds.json").exists()}
    long_sweep = long_sweep_claim(json.loads(LONG.read_text())) if LONG.exists() else None
    if long_sweep:
        claims.append(long_sweep)
    elif len(sweep) > 2:
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
            "command": "python -m simulations.run simulations/fedals/cpu-cifar10-resnet20.toml --methods "
                       "simulations/fedals/methods/fedals.toml --sweep fedals.alpha=5,25 --lr-from "
                       "results/fedals/cpu-cifar10-resnet20/lr-tuning.json --set num-server-rounds=30 eval-every=10 "
                       "(alpha 1 and 10: the runs of the claim above)",
        })
    iid = json.loads((out / "lr-tuning-iid.json").read_text())["winner"]
    won = tuning["winner"]
    extras = ((iid_claim, {"fedavg-iid": iid["fedavg"]["lr"], "fedals-iid": iid["fedals"]["lr"]}),
              (scaffold_claim, {"fedavg": won["fedavg"]["lr"], "fedals": won["fedals"]["lr"],
                                "fedals-scaffold-algorithm4": won["fedals-scaffold"]["lr"],
                                "fedals-scaffold-authors": won["fedals-scaffold-authors"]["lr"]}))
    for extra, lrs in extras:
        claim = extra(json.loads(LONG.read_text()), lrs) if LONG.exists() else None
        if claim:
            claims.append(claim)
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
