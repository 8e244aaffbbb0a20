"""The reading of the Table II claim in simulations/hcct/claims.py, on hand-made summary rows."""

from simulations.hcct.claims import TABLE2, table2_claim

ERRORS = {"independent": [40.0, 25.0, 16.0], "global": [50.0, 49.0, 31.0], "pattern-12": [24.0, 25.0, 16.0],
          "pattern-13": [90.0, 26.0, 16.0], "pattern-23": [39.0, 57.0, 27.0]}


def rows(hcct_groups, seeds=(0, 1), hcct_errors=(30.0, 26.0, 16.0)):
    out = [{"method": m, "seed": s, "client-error": {str(p): e[p] for p in range(3)},
            "groups": None} for s in seeds for m, e in ERRORS.items()]
    return out + [{"method": "hcct", "seed": s, "groups": hcct_groups,
                   "client-error": {str(p): hcct_errors[p] for p in range(3)}} for s in seeds]


def test_holds_when_hcct_ends_in_the_lowest_error_pattern():
    claim, table = table2_claim(rows([[2], [1, 0]]))
    assert claim["holds"] and claim["seeds"] == [0, 1]
    assert claim["ours"]["best-pattern"] == "Partial (1,2)" and claim["ours"]["best-pattern-is-papers"]
    assert claim["ours"]["mean-error"]["pattern-12"] == round((24 + 25 + 16) / 300, 4)
    assert claim["ours"]["hcct-minus-best-points"] == round((30 + 26 + 16 - 24 - 25 - 16) / 3, 2)
    assert table.count("| paper | 5 |") == len(TABLE2)


def test_fails_on_another_grouping_even_with_the_best_error():
    claim, _ = table2_claim(rows([[0], [1], [2]], hcct_errors=(1.0, 1.0, 1.0)))
    assert not claim["holds"] and claim["ours"]["hcct-minus-best-points"] < 0


def test_only_seeds_with_all_six_runs_count():
    rs = [r for r in rows([[0, 1], [2]]) if not (r["seed"] == 1 and r["method"] == "global")]
    claim, _ = table2_claim(rs)
    assert claim["seeds"] == [0]
    assert table2_claim([r for r in rs if r["seed"] == 1])[0]["seeds"] == []
