"""FedALS's tables and claims (simulations/fedals/tables.py): hand-made summary rows give the hand-computed
verdicts, a run of any length reaches its claim, the authors' code's summaries read as ours do, and the
cpu settings hold each method's tuned lr."""

import argparse
import json
from pathlib import Path

import pytest

from fedapp.runtime.registry import parse_run_config
from simulations import tables
from simulations.fedals import authors
from simulations.fedals.tables import PAPER, TABLE1
from simulations.run import read, table_plan

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = {c.id: c for c in PAPER.claims}


def row(method, seed, value, rounds=400):
    return {"run": f"{method}-s{seed}", "method": method, "seed": seed, "value": value, "rounds": rounds,
            "curve": [[rounds, value]]}


def verdict(claim_id, rows):
    claim = CLAIMS[claim_id]
    return tables.claim_record(PAPER, claim, tables.results(PAPER, claim.table, claim.column, claim.scale, rows=rows))


def test_fedals_noniid_claim_averages_the_seeds_both_methods_ran():
    rows = [row("fedavg", 0, 0.30), row("fedals", 0, 0.22), row("fedavg", 1, 0.40), row("fedals", 1, 0.36),
            row("fedavg", 2, 0.90), row("fedals-scaffold", 0, 0.5)]  # seed 2: no FedALS run
    c = verdict("noniid-alpha10-over-fedavg", rows)
    assert c["seeds"] == [0, 1] and c["command"].endswith("--seeds 0 1")
    assert c["ours"] == {"fedals": 29.0, "fedavg": 35.0, "gap": -6.0} and c["holds"] is False
    rows[1] = row("fedals", 0, 0.50)
    c = verdict("noniid-alpha10-over-fedavg", rows)
    assert c["ours"]["gap"] == 8.0 and c["holds"] is True
    assert verdict("noniid-alpha10-over-fedavg", [r for r in rows if r["method"] == "fedavg"])["holds"] is False


def test_fedals_a_run_longer_than_400_rounds_reaches_the_claim():
    """The paper's 4000 rounds, evaluated every 20: the runner's summary reads its last 5 evaluations."""
    def history(last5):
        evals = [0.1] * 195 + last5
        return [{"round": 0, "central-accuracy": 0.1}] + [
            {"round": 20 * (i + 1), "central-accuracy": a, "replies": 5, "total-train-params-down": 10 * (i + 1),
             "total-train-params-up": 10 * (i + 1)} for i, a in enumerate(evals)]

    fedavg = tables.summarize(TABLE1, history([0.40, 0.42, 0.44, 0.46, 0.48]))
    fedals = tables.summarize(TABLE1, history([0.50, 0.52, 0.54, 0.56, 0.58]))
    assert (fedavg["rounds"], fedavg["value"], fedals["value"]) == (4000, 0.44, 0.54)
    assert fedavg["params-per-client"] == 2 * 10 * 200 / 5
    rows = [{"run": f"{m}-s0", "method": m, "seed": 0, **r} for m, r in (("fedavg", fedavg), ("fedals", fedals))]
    c = verdict("noniid-alpha10-over-fedavg", rows)
    assert c["ours"] == {"fedals": 54.0, "fedavg": 44.0, "gap": 10.0} and c["holds"] is True


def test_fedals_iid_control_allows_fedals_one_point_behind_and_quotes_the_runs_at_other_lrs():
    rows = [row("fedavg", 0, 0.80), row("fedals", 0, 0.795), row("fedavg@lr0.04", 0, 0.85)]
    c = verdict("iid-control", rows)
    assert c["holds"] is True and c["ours"]["gap"] == -0.5
    assert c["ours"]["at-other-lr"] == {"fedavg@lr0.04": 85.0}
    rows[0] = row("fedavg", 0, 0.85)
    c = verdict("iid-control", rows)
    assert c["holds"] is False and c["ours"]["gap"] == -5.5


def test_fedals_scaffold_claim_is_judged_on_algorithm4_against_fedavg():
    rows = [row("fedavg", 0, 0.30), row("fedals", 0, 0.20), row("fedals-scaffold", 0, 0.32),
            row("fedals-scaffold-authors", 0, 0.35), row("fedals-scaffold@lr0.02", 0, 0.25), row("fedavg", 1, 0.9)]
    c = verdict("scaffold-noniid", rows)
    assert c["holds"] is True and c["seeds"] == [0]
    assert {k: c["ours"][k] for k in ("fedals-scaffold", "fedavg", "gap", "fedals-scaffold-authors", "fedals")} == {
        "fedals-scaffold": 32.0, "fedavg": 30.0, "gap": 2.0, "fedals-scaffold-authors": 35.0, "fedals": 20.0}
    assert c["ours"]["at-other-lr"] == {"fedals-scaffold@lr0.02": 25.0}
    rows[2] = row("fedals-scaffold", 0, 0.25)
    assert verdict("scaffold-noniid", rows)["holds"] is False  # the authors' rule at 0.35 does not count


@pytest.mark.parametrize("values, holds", [
    ({"alpha1": 0.30, "alpha5": 0.35, "alpha10": 0.36, "alpha25": 0.20}, True),
    ({"alpha1": 0.30, "alpha5": 0.28, "alpha10": 0.36, "alpha25": 0.20}, False),  # alpha 5 below FedAvg
    ({"alpha1": 0.30, "alpha5": 0.35, "alpha10": 0.36, "alpha25": 0.31}, False),  # alpha 25 above FedAvg
    ({"alpha1": 0.30, "alpha5": 0.35, "alpha10": 0.36}, True),  # alpha 25 not run: judged on the rest
])
def test_fedals_alpha_sweep_shape(values, holds):
    c = verdict("alpha-sweep", [row(m, 0, v) for m, v in values.items()] + [row("alpha1", 1, 0.9)])
    assert c["holds"] is holds and c["seeds"] == [0]
    assert c["ours"] == {m: round(100 * v, 2) for m, v in values.items()}


def test_fedals_table2_parameter_counts_are_the_papers():
    c = verdict("table2-params", [])
    assert c["ours"] == {"1": 2_343_632_000, "5": 472_886_400, "10": 239_043_200, "25": 98_737_280,
                         "50": 51_968_640, "100": 28_584_320}
    assert c["holds"] is True and c["kind"] == "bookkeeping" and c["reference_code"] is None


def test_fedals_authors_summary_reads_as_ours_at_any_length():
    summary = lambda accs: {"total_wall_sec": 5467.7, "config": dict.fromkeys(  # noqa: E731
        ("algo", "alpha", "L", "iterations", "sampling_f"), "x"),
        "accuracy_per_round": [{"iteration": 100 * i, "test_acc": a} for i, a in enumerate(accs)]}
    full = [0.1] + [0.0] * 15 + [0.2, 0.3, 0.4, 0.5, 0.6]  # iterations 0..2000: the last five 1600..2000
    r = authors.row(summary(full), TABLE1, "fedavg")
    assert (r["value"], r["rounds"], r["curve"][-1]) == (0.4, 400, [400, 0.6])
    r = authors.row(summary(full + [0.9] * 20), TABLE1, "fedavg")  # 4000 iterations
    assert (r["value"], r["rounds"]) == (0.9, 800)
    rows = [row("fedavg", 0, 0.5), row("fedals", 0, 0.4)]
    res = tables.results(PAPER, "table1", "cifar10-noniid", "cpu", rows=rows)
    res.authors = [authors.row(summary(full), TABLE1, "fedavg"), authors.row(summary([0.1] * 16 + [0.3] * 5),
                                                                           TABLE1, "fedals")]
    assert tables.authors_reference(res) == {"means": {"fedals": 30.0, "fedavg": 40.0}, "seeds": [0]}


def test_fedals_authors_row_keeps_the_mode_its_command_reruns():
    """A run of their SCAFFOLD (settings line's mode "sca") keeps its mode in the row, and the row's command
    reruns that mode; their FedAvg / FedALS (mode "sgd") keep the command they always had."""
    config = {"algo": "FedALS", "alpha": "10", "L": "19", "iterations": "2001", "sampling_f": "100"}
    summary = lambda **mode: {"total_wall_sec": 1.0, "config": config | mode,  # noqa: E731
                              "accuracy_per_round": [{"iteration": 100, "test_acc": 0.5}]}
    sca = authors.row(summary(mode="sca"), TABLE1, "fedals-scaffold")
    assert sca["setting"]["mode"] == "sca"
    assert sca["command"] == "bash simulations/fedals/authors_reduced.sh 10 OUT 2001 sca"
    for plain in (summary(), summary(mode="sgd")):
        r = authors.row(plain, TABLE1, "fedals")
        assert "mode" not in r["setting"] and r["command"] == "bash simulations/fedals/authors_reduced.sh 10 OUT"
    claim = next(c for c in PAPER.claims if c.id == "scaffold-noniid")
    assert "authors_reduced.sh 10 OUT 2001 sca, then" in claim.reference_run
    assert "OUT/authors-alpha10-sca.json --into table1/cifar10-noniid/fedals-scaffold" in claim.reference_run
    # their IID split likewise: kept in the row, and in the command that reruns it
    iid = authors.row(summary(mode="sgd", split="iid(shuffled)"), TABLE1, "fedavg")
    assert iid["setting"]["split"] == "iid"
    assert iid["command"] == "bash simulations/fedals/authors_reduced.sh 10 OUT 2001 sgd iid"
    # evaluated every 150 iterations (Table 2's sweep at iteration 150): every argument up to that one
    short = authors.row({"total_wall_sec": 1.0, "config": config | {"iterations": "151", "sampling_f": "150"},
                         "accuracy_per_round": [{"iteration": 150, "test_acc": 0.1}]}, TABLE1, "fedals")
    assert short["command"] == "bash simulations/fedals/authors_reduced.sh 10 OUT 151 sgd noniid 150"
    claim = next(c for c in PAPER.claims if c.id == "iid-control")
    assert ("authors_reduced.sh 1 OUT 2001 sgd iid, then python -m simulations.fedals.authors OUT/authors-alpha1-iid.json "
            "--into table1/cifar10-iid/fedavg") in claim.reference_run


STUB_HARNESS = r"""ALPHA=$1; ITERS=$2; EVERY=$3; H=5; L=19
INP="inp = [None, \"5\", \"noniid\", \"$H\", \"$ALPHA\", \"$L\", \"0\", \"sgd\"]"
set -- --config "algo=FedAvg,split=sorted-labels(2 classes/node),alpha=$ALPHA"
mkdir -p "$ANCHOR_RESULTS"
printf '%s\n%s\n%s\n' "$INP" "$2" "$EVERY" > "$ANCHOR_RESULTS/FedALS_alpha${ALPHA}_tau5_L19_it${ITERS}.json"
"""


@pytest.mark.parametrize("args,suffix,inp,config,every", [
    ((), "", '"noniid", "5", "1", "19", "0", "sgd"]', "algo=FedAvg,split=sorted-labels(2 classes/node)", "100"),
    (("2001", "sca"), "-sca", '"noniid", "5", "1", "19", "0", "sca"]', "mode=sca,algo=FedAvg,split=sorted-labels",
     "100"),
    (("2001", "sgd", "iid"), "-iid", '"iid", "5", "1", "19", "0", "sgd"]', "mode=sgd,algo=FedAvg,split=iid(shuffled)",
     "100"),
    (("151", "sgd", "noniid", "150"), "", '"noniid", "5", "1", "19", "0", "sgd"]',
     "algo=FedAvg,split=sorted-labels(2 classes/node)", "150"),
])
def test_fedals_authors_reduced_edits_only_the_settings_asked(tmp_path, args, suffix, inp, config, every):
    """authors_reduced.sh runs the harness as it is for their FedAvg / FedALS on the sorted split, and a copy
    with the settings line's mode and split changed otherwise (a stub harness with the real one's two lines);
    an unknown split is refused before anything runs."""
    import subprocess

    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "run_FedALS.sh").write_text(STUB_HARNESS)
    env = {"PATH": "/usr/bin:/bin", "ANCHOR_HARNESS": str(harness), "ANCHOR_WORK": str(tmp_path / "work")}
    script = str(ROOT / "simulations/fedals/authors_reduced.sh")
    subprocess.run(["bash", script, "1", str(tmp_path / "out"), *args], env=env, check=True, capture_output=True)
    ran_inp, ran_config, ran_every = (tmp_path / "out" / f"authors-alpha1{suffix}.json").read_text().splitlines()
    assert ran_inp.endswith(inp) and ran_config.startswith(config) and ran_every == every, (ran_inp, ran_config)
    bad = subprocess.run(["bash", script, "1", str(tmp_path / "out"), "2001", "sgd", "dirichlet"], env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == 'SPLIT: noniid or iid, not "dirichlet"'

def test_fedals_cpu_settings_hold_each_methods_tuned_lr():
    args = argparse.Namespace(seeds=None, methods=None, set=[])
    for column, record in (("cifar10-noniid", "cifar10-noniid"), ("cifar10-iid", "cifar10-iid")):
        winner = json.loads((ROOT / "simulations/fedals/lr-tuning" / f"{record}.json").read_text())["winner"]
        runs = {method: config for _, method, config in table_plan(PAPER, "table1", column, "cpu", args)}
        assert set(winner) <= set(runs)
        for method, config in runs.items():
            assert config["lr"] == winner.get(method, {"lr": 0.01})["lr"], (column, method)
            assert (config["num-server-rounds"], config["eval-every"], config["model"]) == (400, 20, "resnet20")
            # the setting alone runs the method (flwr run --run-config FILE): the method's keys are in it
            alone = read(ROOT / "simulations/fedals" / TABLE1.columns[column].settings["cpu"].format(method=method))
            assert alone == {k: v for k, v in config.items() if k != "seed"}, (column, method)
            assert parse_run_config(alone).lr == config["lr"]


def test_fedals_claims_file_rebuilds_from_the_summaries():
    assert tables.build(PAPER, check=True) == []
