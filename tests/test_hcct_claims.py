"""The readings of the Table II and arrival (Fig. 3) claims in simulations/hcct/claims.py, on hand-made summary rows."""

from simulations.hcct.claims import TABLE2, arrivals, authors_cifar10, table2_claim

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


def arrival_row(n, final, epochs=50):
    """N_new = n: 10 clients, n more every 10 epochs; newcomer 10 + k joins client 0's group the epoch after."""
    groups, present = [], list(range(10))
    for e in range(1, epochs + 1):
        if e > 1 and (e - 1) % 10 == 0:
            present += list(range(len(present), len(present) + n))
        joined = [p for p in present[10:] if p not in range(len(present) - n, len(present)) or (e - 1) % 10]
        groups.append([[0, *joined], *[[p] for p in present[1:] if p not in joined]])
    errors = {str(p): final[p] for p in present}
    return {"method": f"hcct-new{n}", "seed": 0, "client-error": errors, "error": sum(errors.values()) / len(errors),
            "error-best": 0.0, "seconds-per-epoch": 1.0, "groups-per-epoch": groups,
            "error-per-epoch": [[e, 30.0 - n - e / 10] for e in range(1, epochs + 1)]}


def test_arrivals_report_where_each_newcomer_goes_and_judge_the_final_error():
    first = [30.0] * 10
    claim, table = arrivals([arrival_row(0, first), arrival_row(1, first + [20.0] * 4),
                             arrival_row(2, first + [10.0] * 8)])
    assert claim["holds"] and claim["ours"]["0"] == 0.3 and claim["ours"]["1"] == 0.2714
    assert claim["ours"]["first-10-clients"] == {"0": 0.3, "1": 0.3, "2": 0.3}
    assert "client 11 arrives in epoch 11, in epoch 12 in {1,11}" in table
    assert "N_new = 2: client 18 arrives in epoch 41, in epoch 42 in {1,11,12,13,14,15,16,17,18}" in table
    assert "| 1 | 14 | 28.00 |" in table  # epoch 10's mean error of the N_new = 1 run
    worse, _ = arrivals([arrival_row(0, first), arrival_row(1, first + [40.0] * 4), arrival_row(2, first + [10.0] * 8)])
    assert not worse["holds"]
    assert not arrivals([arrival_row(0, first), arrival_row(2, first + [10.0] * 8)])[0]["holds"]  # N_new = 1 missing


def test_authors_log_summary_reads_plain_and_timestamped_logs(tmp_path):
    from simulations.hcct.authors_log import summarise

    epochs = [({0: 60.0, 1: 70.0}, {0: 60.0, 1: 70.0}), ({0: 80.0, 1: 65.0}, {0: 80.0, 1: 70.0})]
    lines = []
    for now, best in epochs:
        lines += ["Model performance: mean ...", repr(now), "Best performance: mean ...", repr(best),
                  "Cluster Result: 2 groups are {0: [1], 1: [0]}", "Client 0 local loss: 1.0 local acc: 50.0"]
    plain, stamped = tmp_path / "plain.log", tmp_path / "stamped.log"
    plain.write_text("\n".join(lines) + "\n")
    # tslog.py's prefix: seconds since start, a tab; epochs 12.5 s apart, the client's line 10 s into each
    stamped.write_text("".join(f"{3.0 + 12.5 * (i // 6) + 10.0 * (i % 6 == 5):.3f}\t{line}\n"
                               for i, line in enumerate(lines)))
    a, b = summarise(str(plain)), summarise(str(stamped))
    assert "seconds-per-epoch" not in a and b.pop("seconds-per-epoch") == 12.5
    assert (b.pop("train-seconds-per-epoch"), b.pop("eval-seconds-per-epoch")) == (10.0, 2.5)
    assert a == b
    assert a["epochs"] == 2 and a["client-error"] == {0: 20.0, 1: 35.0}
    assert a["error"] == 27.5 and a["error-best"] == 25.0  # best accuracies 80 and 70
    assert a["curve"] == [35.0, 27.5] and a["groups"] == [[0], [1]]


def test_authors_log_of_an_arrival_run_averages_over_the_clients_present(tmp_path):
    """Their --goal n_new run keeps a best-so-far accuracy of 0 for the clients not yet arrived: the best-epoch
    error is over the clients present at the end, as the error is; one grouping per epoch from the second on."""
    from simulations.hcct.authors_log import summarise

    epochs = [({0: 60.0, 1: 70.0}, {0: 60.0, 1: 70.0, 2: 0.0, 3: 0.0}, None),
              ({0: 80.0, 1: 65.0, 2: 50.0}, {0: 80.0, 1: 70.0, 2: 50.0, 3: 0.0}, "{0: [0], 1: [1], 2: [2]}"),
              ({0: 75.0, 1: 65.0, 2: 54.0}, {0: 80.0, 1: 70.0, 2: 54.0, 3: 0.0}, "{0: [0, 2], 1: [1], 2: []}")]
    lines = []
    for now, best, groups in epochs:
        lines += [f"Cluster Result: 2 groups are {groups}"] if groups else []
        lines += ["Model performance: mean ...", repr(now), "Best performance: mean ...", repr(best)]
    (tmp_path / "n_new.log").write_text("\n".join(lines) + "\n")
    out = summarise(str(tmp_path / "n_new.log"))
    assert out["client-error"] == {0: 25.0, 1: 35.0, 2: 46.0}
    assert out["error-best"] == (20.0 + 30.0 + 46.0) / 3  # client 3 (never present) left out
    assert out["groups-per-epoch"] == [[[0], [1], [2]], [[0, 2], [1]]] and out["groups"] == [[0, 2], [1]]


def test_arrivals_report_the_authors_runs_beside_ours():
    first = [30.0] * 10
    ours = [arrival_row(0, first), arrival_row(1, first + [20.0] * 4), arrival_row(2, first + [10.0] * 8)]

    def theirs(n, errors, groups):
        client = {str(p): e for p, e in enumerate(errors)}
        return {"method": f"hcct-new{n}", "code": "authors", "seed": 0, "epochs": 50, "client-error": client,
                "error": sum(errors) / len(errors), "error-best": 20.0, "seconds-per-epoch": 40.0,
                "curve": [50.0 - e / 2 for e in range(1, 51)], "groups-per-epoch": groups}

    alone = [[[p] for p in range(10)]] * 49
    authors = [theirs(0, [40.0] * 10, alone), theirs(2, [40.0] * 10 + [60.0] * 8, alone + [[[0, 10], [1]]]),
               theirs(1, [40.0] * 5 + [30.0] * 5 + [50.0] * 4, alone), {**theirs(1, [1.0] * 14, alone), "epochs": 12}]
    claim, table = arrivals(ours, authors)
    ref = claim["reference_code"]
    assert (ref["0"], ref["1"], ref["2"]) == (0.4, 0.3929, 0.4889)  # the 12-epoch run is left out
    assert ref["first-10-clients"] == {"0": 0.4, "1": 0.35, "2": 0.4}
    assert ref["groups-of-several"] == {"0": [], "1": [], "2": ["{1,11}"]}
    assert not ref["holds-in-their-code"] and ref["seeds"] == [0]
    assert "| authors' 2 | 18 | 45.00 | 40.00 | 35.00 | 30.00 | 25.00 | 40.00 | 20.00 | 40.0 |" in table
    assert arrivals(ours)[0]["reference_code"] is None


def test_authors_cifar10_reference_keeps_the_runs_that_reached_epoch_50():
    row = lambda method, epochs, error: {"method": method, "code": "authors", "seed": 0, "epochs": epochs,  # noqa: E731
                                         "error": error, "error-best": error - 2.0, "seconds-per-epoch": 30.0}
    assert authors_cifar10([]) is None
    assert authors_cifar10([row("hcct", 37, 40.0)]) is None  # cut off before epoch 50
    ref = authors_cifar10([row("hcct", 50, 36.5), row("local", 50, 36.5), row("global", 12, 60.0)])
    assert ref["seeds"] == [0] and "global" not in ref
    assert (ref["hcct"], ref["independent"], ref["hcct-best-epoch"]) == (0.365, 0.365, 0.345)
    two = authors_cifar10([row("hcct", 50, 36.5), {**row("hcct", 50, 40.5), "seed": 1, "seconds-per-epoch": 40.0}])
    assert two["hcct"] == 0.385 and two["hcct-per-seed"] == {"0": 0.365, "1": 0.405}  # the mean of the seeds
    assert two["seeds"] == [0, 1] and two["hcct-seconds-per-epoch"] == 35.0
    mixed = authors_cifar10([row("hcct", 50, 36.5), {**row("hcct", 50, 40.5), "seed": 1}, row("global", 50, 45.0)])
    assert mixed["seeds"] == [0] and mixed["hcct"] == 0.365  # seed 1 has no Global run: not in the means
    assert mixed["hcct-per-seed"] == {"0": 0.365, "1": 0.405}


def test_collect_and_authors_log_merge_into_the_stored_rows(tmp_path, monkeypatch):
    """Raw run folders live outside the repository and may be gone: a run found replaces only the stored
    row of its method and seed, and the stored rows of other runs stay."""
    import json

    from simulations.hcct import claims
    from simulations.hcct.authors_log import merge

    row = lambda m, s, e: {"method": m, "seed": s, "error": e, "groups": None}  # noqa: E731
    monkeypatch.setattr(claims, "SUMMARIES", tmp_path / "summaries")
    claims.SUMMARIES.mkdir()
    (claims.SUMMARIES / "cifar10.json").write_text(json.dumps([row("hcct", 0, 36.0), row("global", 0, 56.0)]))
    (tmp_path / "runs" / "cifar10-chainA").mkdir(parents=True)
    (tmp_path / "runs" / "cifar10-chainA" / "summary.json").write_text(json.dumps([row("global", 0, 50.0),
                                                                                  row("ifca", 0, 40.0)]))
    claims.collect(tmp_path / "runs")
    got = {(r["method"], r["seed"]): r["error"] for r in claims.rows("cifar10")}
    assert got == {("hcct", 0): 36.0, ("global", 0): 50.0, ("ifca", 0): 40.0}
    assert merge([row("hcct", 0, 43.5), row("local", 0, 1.0)], [row("local", 0, 40.0), row("global", 0, 50.0)]) == [
        row("hcct", 0, 43.5), row("local", 0, 40.0), row("global", 0, 50.0)]
