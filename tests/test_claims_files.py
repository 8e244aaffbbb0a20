"""The claims files of the four papers keep one format: each claim with its kind, the paper's and
our numbers, the seeds, whether it holds (and why not), its setting and the command that made it."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"id", "kind", "claim", "paper", "ours", "reference_code", "seeds", "holds", "note", "setting", "command"}


@pytest.mark.parametrize("paper", ["fedsmoo", "fedals", "pefll", "hcct"])
def test_claims_file_format(paper):
    claims = json.loads((ROOT / "simulations" / paper / "claims.json").read_text())
    assert isinstance(claims, list) and claims
    assert len({c["id"] for c in claims}) == len(claims)
    for c in claims:
        assert KEYS <= set(c), (c["id"], KEYS - set(c))
        assert isinstance(c["holds"], bool) and isinstance(c["seeds"], list)
        assert isinstance(c["ours"], dict)
        assert c["reference_code"] is None or isinstance(c["reference_code"], dict)
        # a claim against the authors' code alone has no paper number; it must then have the code's
        assert isinstance(c["paper"], dict) or (c["paper"] is None and isinstance(c["reference_code"], dict))
        assert (ROOT / c["setting"]).exists(), c["setting"]
        assert c["kind"] in {"learning", "bookkeeping", "construction", "code-equality"}, c["kind"]
        assert c["holds"] or c["note"], f"{c['id']}: a claim that does not hold says why"
        assert c["command"].startswith(("python -m simulations.", "python -m pytest ")), c["command"]


def fedals_claims():
    spec = importlib.util.spec_from_file_location("fedals_claims", ROOT / "simulations/fedals/claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fedals_long_claim_averages_the_seeds_both_methods_completed():
    claims = fedals_claims()
    run = lambda method, seed, acc, rounds=400: (f"{method}-seed={seed}",  # noqa: E731
                                                 {"method": method, "seed": seed, "rounds": rounds, "acc-last5": acc})
    runs = dict([run("fedavg", 0, 0.30), run("fedals", 0, 0.22), run("fedavg", 1, 0.40), run("fedals", 1, 0.36),
                 run("fedavg", 2, 0.90), run("fedals", 2, 0.10, rounds=399)])  # seed 2: FedALS did not finish
    tuning = {"winner": {"fedavg": {"lr": 0.02}, "fedals": {"lr": 0.01}}}
    c = claims.long_claim(runs, tuning)
    assert c["seeds"] == [0, 1]
    assert c["ours"]["fedavg"] == 0.35 and c["ours"]["fedals"] == 0.29
    assert c["ours"]["per-seed"] == {"fedavg": [0.30, 0.40], "fedals": [0.22, 0.36]}
    assert c["holds"] is False and c["lr"] == {"fedavg": 0.02, "fedals": 0.01}
    runs.update(dict([run("fedals", 0, 0.50)]))
    assert claims.long_claim(runs, tuning)["holds"] is True
    assert claims.long_claim({k: v for k, v in runs.items() if "fedavg" in k}, tuning) is None


def test_fedals_authors_reference_is_their_last5_at_2000_iterations(tmp_path):
    claims = fedals_claims()
    summary = lambda accs, step=100: {"accuracy_per_round": [  # noqa: E731
        {"iteration": i * step, "test_acc": a} for i, a in enumerate(accs)]}
    full = [0.1] + [0.0] * 15 + [0.2, 0.3, 0.4, 0.5, 0.6]  # iterations 0..2000 every 100: last five 1600..2000
    assert claims.authors_last5(summary(full)) == 0.4
    assert claims.authors_last5(summary(full[:-1])) is None  # stopped at iteration 1900
    assert claims.authors_reference(tmp_path) is None
    (tmp_path / claims.AUTHORS_LONG["fedavg"]).write_text(json.dumps(summary(full)))
    assert claims.authors_reference(tmp_path) is None  # FedALS's summary missing
    (tmp_path / claims.AUTHORS_LONG["fedals"]).write_text(json.dumps(summary([0.1] * 16 + [0.3] * 5)))
    ref = claims.authors_reference(tmp_path)
    assert (ref["fedavg"], ref["fedals"]) == (0.4, 0.3)


def test_fedals_sweep_runs_condense_to_methods_and_build_the_iid_and_scaffold_claims(tmp_path):
    claims = fedals_claims()

    def write(name, accs, rounds=400, lr=0.02, folder=tmp_path):  # evaluations every 20 rounds; the last 5 make acc-last5
        evals = [{"round": r, "central-accuracy": a, "wall-time": 1.0, "total-train-params-down": 5,
                  "total-train-params-up": 5} for r, a in zip(range(0, rounds + 1, 20), accs)]
        (folder / name).mkdir(parents=True)
        (folder / name / "rounds.json").write_text(json.dumps({"config": {"lr": lr}, "rounds": evals}))

    write("fedavg-partition=iid-s0", [0.1] * 16 + [0.80] * 5)
    write("fedals-partition=iid-s0", [0.1] * 16 + [0.795] * 5)
    write("fedals-scaffold-fedals.scaffold-variant=algorithm4-s0", [0.1] * 16 + [0.25] * 5)
    write("fedals-scaffold-fedals.scaffold-variant=authors-s0", [0.1] * 16 + [0.35] * 5)
    write("fedavg-seed=0", [0.1] * 16 + [0.30] * 5)
    write("fedals-seed=0", [0.1] * 16 + [0.20] * 5)
    # the same run names again in another folder, at other lrs (reruns at the methods' tuned lrs)
    write("fedavg-partition=iid-s0", [0.1] * 16 + [0.85] * 5, lr=0.04, folder=tmp_path / "tuned")
    write("fedals-scaffold-fedals.scaffold-variant=algorithm4-s0", [0.1] * 16 + [0.32] * 5, lr=0.04,
          folder=tmp_path / "tuned")
    runs = claims.condense([tmp_path, tmp_path / "tuned"])
    assert len(runs) == 8  # a rerun at another lr does not replace the first run
    assert {r["method"] for r in runs.values()} == {
        "fedavg-iid", "fedals-iid", "fedals-scaffold-algorithm4", "fedals-scaffold-authors", "fedavg", "fedals"}
    iid = claims.iid_claim(runs, {"fedavg-iid": 0.02, "fedals-iid": 0.02})
    assert iid["ours"]["fedavg"] == 0.8 and iid["ours"]["fedals"] == 0.795 and iid["holds"] is True  # within 1 point
    assert iid["ours"]["at-other-lr"] == {"fedavg-iid@lr0.04": 0.85}
    iid = claims.iid_claim(runs, {"fedavg-iid": 0.04, "fedals-iid": 0.02})  # FedAvg at its tuned 0.04
    assert iid["ours"]["fedavg"] == 0.85 and iid["holds"] is False
    assert iid["ours"]["lr"] == {"fedavg": 0.04, "fedals": 0.02}
    assert iid["ours"]["at-other-lr"] == {"fedavg-iid@lr0.02": 0.8}
    assert claims.iid_claim(runs, {"fedavg-iid": 0.04, "fedals-iid": 0.01}) is None  # FedALS not run at its lr
    lrs = {"fedavg": 0.02, "fedals": 0.02, "fedals-scaffold-algorithm4": 0.04, "fedals-scaffold-authors": 0.02}
    scaffold = claims.scaffold_claim(runs, lrs)
    assert {k: scaffold["ours"][k] for k in ("algorithm4", "authors", "fedals", "fedavg")} == {
        "algorithm4": 0.32, "authors": 0.35, "fedals": 0.2, "fedavg": 0.3}
    assert scaffold["ours"]["lr"]["algorithm4"] == 0.04
    assert scaffold["ours"]["at-other-lr"] == {"fedals-scaffold-algorithm4@lr0.02": 0.25}
    assert scaffold["holds"] is True  # judged on Algorithm 4 only: 0.32 > 0.30
    assert claims.scaffold_claim(runs, {**lrs, "fedals-scaffold-algorithm4": 0.02})["holds"] is False
    write("fedals-partition=iid-s1", [0.1] * 5, rounds=80)  # another seed, unfinished: ignored
    assert claims.iid_claim(claims.condense([tmp_path]), {"fedavg-iid": 0.02, "fedals-iid": 0.02})["ours"]["fedals"] == 0.795
