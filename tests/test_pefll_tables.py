"""PeFLL's table declarations and claim checks (simulations/pefll/tables.py) on hand-made rows, and the
condensing of the authors' train.py runs (simulations/pefll/authors_runs.py)."""

import json

import pytest

from simulations.pefll import authors_runs
from simulations.pefll.tables import PAPER, TABLE1, agrees_with_authors, new_vs_seen
from simulations.tables import Results, markdown


def row(method, seed, seen, new, seen_masked=None, new_masked=None):
    more = {"new": new} | ({"seen-masked": seen_masked, "new-masked": new_masked} if seen_masked else {})
    return {"run": f"{method}-s{seed}", "method": method, "seed": seed, "value": seen, "more": more}


def table1(rows):
    return Results(PAPER, "table1", "cifar10-100c", "cpu", rows, [])


ROWS = [row("pefll", 0, 0.80, 0.70), row("pefll", 1, 0.90, 0.80), row("fedrep", 0, 0.85, 0.60),
        row("local", 0, 0.70, 0.75), row("pfedhn", 0, 0.78, 0.42)]


def test_new_against_seen_clients_on_the_seeds_a_method_ran():
    res = table1(ROWS)
    v = new_vs_seen("pefll", within=5)(res)  # seen (80 + 90) / 2 = 85, new 75
    assert (v.holds, v.ours) == (False, {"seen": 85.0, "new": 75.0, "new - seen": -10.0, "seeds": [0, 1]})
    assert new_vs_seen("pefll", within=10)(res).holds
    assert new_vs_seen("pefll", drop=10)(res).holds and not new_vs_seen("pefll", drop=10.5)(res).holds
    v = new_vs_seen("pfedhn", drop=10)(res)
    assert v.holds and v.ours["new - seen"] == -36.0
    assert not new_vs_seen("fedavg", within=5)(res).holds  # no run


def test_unseen_close_to_seen_asks_what_fedavg_cannot_pass():
    """Restated: new within 5 points of seen AND 20 points over FedAvg's new clients. FedAvg's one global model
    passes the first half (new = seen) but never the second (it would have to beat itself)."""
    claim = next(c for c in PAPER.claims if c.id == "unseen-close-to-seen")
    fedavg = [row("fedavg", 0, 0.45, 0.45), row("fedavg", 1, 0.40, 0.41)]  # new (45 + 41) / 2 = 43
    v = claim.check(table1(ROWS[:2] + fedavg))  # PeFLL seen 85, new 75: 10 apart
    assert not v.holds and v.ours["new over fedavg"]["gap"] == 32.0 and v.ours["new vs seen"]["new - seen"] == -10.0
    close = [row("pefll", 0, 0.80, 0.78), row("pefll", 1, 0.90, 0.84)] + fedavg  # seen 85, new 81
    v = claim.check(table1(close))
    assert v.holds and v.ours["new over fedavg"] == {"pefll": 81.0, "fedavg": 43.0, "gap": 38.0}
    as_fedavg = [{**r, "method": "pefll"} for r in fedavg] + fedavg  # FedAvg in PeFLL's place
    assert new_vs_seen("pefll", within=5)(table1(as_fedavg)).holds and not claim.check(table1(as_fedavg)).holds
    assert not claim.check(table1([row("pefll", 0, 0.60, 0.58)] + fedavg[:1])).holds  # 58 - 45 = 13 < 20
    assert "FedAvg" in claim.history and "2026-12-07" in claim.history


def test_table1_ordering_against_fedrep_and_local_needs_all_four():
    claim = next(c for c in PAPER.claims if c.id == "table1-ordering-fedrep-local")
    v = claim.check(table1(ROWS))  # seed 0 only (FedRep, Local): PeFLL 80 / 70 against FedRep 85 / 60, Local 70 / 75
    assert not v.holds and v.ours.pop("seeds") == [0]
    assert {k: o["gap"] for k, o in v.ours.items()} == {"fedrep seen": -5.0, "local seen": 10.0,
                                                        "fedrep new": 10.0, "local new": -5.0}
    better = [row("pefll", 0, 0.90, 0.80)] + ROWS[2:]
    assert claim.check(table1(better)).holds


def test_authors_code_means_over_each_sides_seeds_and_masked_on_shared_seeds():
    ours = [row("pefll", s, 0.60 + 0.1 * s, 0.50 + 0.1 * s, 0.70 + 0.01 * s, 0.80) for s in range(4)]
    theirs = [row("pefll", 7, 0.70, 0.60), row("pefll", 8, 0.72, 0.62),
              {"method": "pefll", "seed": 1, "value": None, "more": {"seen-masked": 0.76, "new-masked": 0.70}}]
    res = Results(PAPER, "vs-authors", "cifar10-100c", "cpu", ours, theirs)
    v = agrees_with_authors(5, None, "new")(res)  # ours 75 / 65 over 0-3, theirs 71 / 61 over 7, 8
    assert v.holds and v.ours["seeds"] == [0, 1, 2, 3] and v.ours["authors' seeds"] == [7, 8]
    assert v.ours["seen"] == {"ours": 75.0, "authors": 71.0, "gap": 4.0} and v.ours["new"]["gap"] == 4.0
    assert not agrees_with_authors(3.9, None, "new")(res).holds
    v = agrees_with_authors(5, "seen-masked", "new-masked", same_seeds=True)(res)  # seed 1 only: 71 vs 76, 80 vs 70
    assert v.ours["seeds"] == [1] and v.ours["seen-masked"]["gap"] == -5.0 and v.ours["new-masked"]["gap"] == 10.0
    assert not v.holds
    assert not agrees_with_authors(5, "seen-masked", same_seeds=True)(
        Results(PAPER, "vs-authors", "cifar10-100c", "cpu", ours, theirs[:2])).holds


def test_table1_page_block_of_the_new_clients_quotes_table1_b():
    text = markdown(table1(ROWS), "new")
    assert "| pefll | 89.30 ± 2.16 | 75.00 ± 7.07 |" in text and "| pfedhn | 63.33 ± 3.67 | 42.00 |" in text
    assert "| local | 81.6 ± 0.7 | 75.00 |" in text  # Table 1 (b)'s Local row: its display, no \numprint behind it
    assert "new clients, test accuracy (%), unmasked" in text
    assert "| pefll | 88.90 ± 2.40 | - |" in markdown(table1(ROWS), "new-masked")  # Table 6's \numprint digits
    assert set(TABLE1.columns) == {"cifar10-100c", "cifar10-500c", "cifar10-1000c", "cifar100-100c",
                                   "cifar100-500c", "cifar100-1000c", "femnist"}
    assert TABLE1.columns["cifar100-100c"].paper_more["new"]["pefll"] == "35.17"  # below its seen 56.0: Table 1
    assert all(c.settings["paper"] == f"table1-{cid}/{{method}}.toml" for cid, c in TABLE1.columns.items())


@pytest.mark.parametrize("steps, every, evaluated", [(100, 50, [1, 51, 100]), (100, 100, [1, 100]), (3, 1, [1, 2, 3])])
def test_authors_train_py_evaluates_after_the_first_every_kth_and_the_last_step(steps, every, evaluated):
    assert authors_runs.evaluated_steps(steps, every) == evaluated


def test_condense_the_authors_runs_into_one_row_a_seed(tmp_path):
    def run(name, seed, masked, seen, new, every=100):
        folder = tmp_path / name
        (folder / "results").mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"seed": seed, "mask_absent": masked, "steps": 100,
                                                     "eval_every": every, "seconds": 60.0, "command": "train.py"}))
        (folder / "results" / "r.json").write_text(json.dumps({
            "train_nodes": {"test_avg_acc": seen}, "test_nodes": {"test_avg_acc": new}}))
    run("unmasked-s3", 3, False, [0.1, 0.6], [0.2, 0.5])
    run("masked-s3", 3, True, [0.5, 0.8], [0.4, 0.9])
    run("masked-s5", 5, True, [0.5, 0.7], [0.4, 0.75])
    kept = {"run": "pefll-s0", "method": "pefll", "seed": 0, "value": 0.64, "more": {"new": 0.54}}
    rows = authors_runs.condense([tmp_path], [kept])["rows"]
    assert [r["seed"] for r in rows] == [0, 3, 5] and rows[0] == kept
    assert rows[1]["value"] == 0.6 and rows[1]["curve"] == [[1, 0.1], [100, 0.6]]
    assert rows[1]["more"] == {"new": 0.5, "seen-masked": 0.8, "new-masked": 0.9}
    assert rows[2]["value"] is None and rows[2]["more"] == {"seen-masked": 0.7, "new-masked": 0.75}
    run("unmasked-s9", 9, False, [0.1, 0.6, 0.7], [0.2, 0.5, 0.6])  # 3 evaluations, 2 expected
    with pytest.raises(SystemExit, match="3 evaluations, expected 2"):
        authors_runs.condense([tmp_path], [])
