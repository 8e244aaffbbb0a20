"""HCCT's claims as simulations/hcct/tables.py declares them, on hand-made summary rows (errors as
fractions, as the summaries hold them), and the authors' log summary."""

import pytest

from simulations.hcct.tables import PAPER, per_client
from simulations.tables import Results, claim_record

CLAIMS = {c.id: c for c in PAPER.claims}
# Table II's fixed patterns: every client's error (fractions) on each seed
ERRORS = {"independent": [0.40, 0.25, 0.16], "global": [0.50, 0.49, 0.31], "pattern-12": [0.24, 0.25, 0.16],
          "pattern-13": [0.90, 0.26, 0.16], "pattern-23": [0.39, 0.57, 0.27], "hcct": [0.40, 0.25, 0.16]}


def row(method, seed, value, **extra):
    return {"method": method, "seed": seed, "value": value, **extra}


def table2_rows(errors=ERRORS, seeds=(0, 1)):
    return [row(m, s, sum(e) / 3, **{"client-error": {str(p): x for p, x in enumerate(e)}})
            for s in seeds for m, e in errors.items()]


def verdict(claim_id, rows, authors=()):
    c = CLAIMS[claim_id]
    return c.check(Results(PAPER, c.table, c.column, c.scale, list(rows), list(authors)))


def test_table2_partial_12_has_the_lowest_mean_error_of_the_five_patterns():
    v = verdict("table2-partial-12-best", table2_rows())
    assert v.holds and v.note == "best: pattern-12"
    assert v.ours == {"independent": 27.0, "global": 43.33, "pattern-12": 21.67, "pattern-13": 44.0,
                      "pattern-23": 41.0}  # (24 + 25 + 16) / 3 = 21.67; HCCT is not one of the patterns
    worse = table2_rows({**ERRORS, "pattern-12": [0.45, 0.25, 0.16]})
    v = verdict("table2-partial-12-best", worse)
    assert not v.holds and v.note == "best: independent"


def test_table2_means_are_over_the_seeds_every_pattern_ran():
    rows = [r for r in table2_rows() if not (r["method"] == "global" and r["seed"] == 1)]
    rows = [{**r, "value": 0.9} if (r["method"], r["seed"]) == ("pattern-12", 1) else r for r in rows]
    v = verdict("table2-partial-12-best", rows)  # seed 1 (pattern-12 at 90%) has no Global: left out
    assert v.holds and v.ours["pattern-12"] == 21.67


def test_fmnist_close_to_global_is_hcct_at_most_one_point_above():
    rows = [row("hcct", 0, 0.300, **{"error-best": 0.29}), row("hcct", 1, 0.310, **{"error-best": 0.30}),
            row("global", 0, 0.298, **{"error-best": 0.28}), row("global", 1, 0.302, **{"error-best": 0.29}),
            row("global", 2, 0.100, **{"error-best": 0.10})]  # seed 2: no HCCT run, left out
    v = verdict("fmnist-close-to-global", rows)
    assert v.holds and v.ours == {"hcct": 30.5, "global": 30.0, "gap": 0.5, "hcct-best-epoch": 29.5,
                                  "global-best-epoch": 28.5}
    assert verdict("fmnist-close-to-global", [{**r, "value": 0.2} if r["method"] == "global" else r
                                              for r in rows]).ours["gap"] == 10.5
    assert not verdict("fmnist-close-to-global", [{**r, "value": 0.2} if r["method"] == "global" else r
                                                  for r in rows]).holds
    below = [{**r, "value": 0.5} if r["method"] == "global" else r for r in rows]
    assert verdict("fmnist-close-to-global", below).holds  # HCCT below Global holds too


def cifar_rows(hcct_groups):
    alone = [[p] for p in range(3)]
    return [row("independent", 0, 0.35, **{"error-best": 0.33, "groups": None, "groups-per-epoch": None}),
            row("hcct", 0, 0.35, **{"error-best": 0.33, "groups": hcct_groups[-1], "groups-per-epoch": hcct_groups}),
            row("independent", 1, 0.40, **{"error-best": 0.38}),
            row("hcct", 1, 0.40, **{"error-best": 0.38, "groups": alone, "groups-per-epoch": [alone] * 3})]


def test_cifar10_construction_needs_every_client_alone_in_every_epoch():
    alone = [[0], [1], [2]]
    v = verdict("cifar10-close-to-independent", cifar_rows([alone] * 3))
    assert v.holds and v.ours["gap"] == 0.0 and v.ours["every-client-alone"] and v.ours["same-error-every-seed"]
    assert "every client alone in 6 of 6 epochs" in v.note
    merged = verdict("cifar10-close-to-independent", cifar_rows([alone, [[0, 1], [2]], alone]))
    assert not merged.holds and merged.ours["gap"] == 0.0 and not merged.ours["every-client-alone"]
    assert "every client alone in 5 of 6 epochs" in merged.note


def arrival(n, errors):
    return row(f"hcct-new{n}", 0, sum(errors) / len(errors),
               **{"client-error": {str(p): e for p, e in enumerate(errors)}})


def test_arrivals_hold_when_the_final_error_falls_with_each_larger_n_new():
    first = [0.30] * 10
    rows = [arrival(0, first), arrival(1, first + [0.20] * 4), arrival(2, first + [0.10] * 8)]
    v = verdict("arrivals-lower-final-error", rows)
    assert v.holds and v.ours["hcct-new0"] == 30.0 and v.ours["hcct-new1"] == 27.14  # (300 + 80) / 14
    assert v.ours["first-10-clients"] == {"hcct-new0": 30.0, "hcct-new1": 30.0, "hcct-new2": 30.0}
    assert not verdict("arrivals-lower-final-error", [rows[0], arrival(1, first + [0.40] * 4), rows[2]]).holds
    missing = verdict("arrivals-lower-final-error", [rows[0], rows[2]])  # N_new = 1 not run
    assert not missing.holds and missing.ours == {}


def test_claim_records_quote_the_paper_and_the_authors_code_beside_ours():
    rows = [row("hcct", 0, 0.30, **{"error-best": 0.29}), row("global", 0, 0.295, **{"error-best": 0.28})]
    authors = [row("hcct", 0, 0.294964, **{"error-best": 0.292437}),
               row("global", 0, 0.29164, **{"error-best": 0.291412})]
    c = CLAIMS["fmnist-close-to-global"]
    record = claim_record(PAPER, c, Results(PAPER, c.table, c.column, c.scale, rows, authors))
    assert record["kind"] == "learning" and record["holds"] and record["seeds"] == [0]
    assert record["paper"] == {"hcct": "29.98", "global": "29.98"}
    assert record["reference_code"] == {"means": {"global": 29.16, "hcct": 29.5}, "seeds": [0]}
    # the claim's own check on the authors' rows: 29.50 - 29.16 = 0.34 points, within 1 (our logit column not beside)
    assert record["reference_holds"] is True
    assert record["reference_note"] == "hcct minus global: 0.34 points (asked: at most 1.0)"
    assert record["setting"] == "simulations/hcct/fmnist/"  # one file a method: the folder
    assert {c.id: c.kind for c in PAPER.claims} == {
        "table2-partial-12-best": "learning", "fmnist-close-to-global": "learning",
        "cifar10-close-to-independent": "construction", "matches-authors-code": "code-equality",
        "arrivals-lower-final-error": "learning", "fig4-alpha100-best-train0.05": "learning",
        "fig4-alpha100-best-train0.1": "learning", "fig4-smaller-alpha-best-train0.2": "learning",
        "fig4-smaller-alpha-best-train0.5": "learning", "fig4-error-falls-with-ratio": "learning"}


def test_summary_row_keeps_every_client_and_the_best_epochs_as_fractions():
    history = [{"round": 1, "fed-accuracy": 0.5, "fed-client-accuracy": {0: 0.6, 1: 0.2}, "round-seconds": 2.0,
                "groups": [[0, 1]]},
               {"round": 2, "fed-accuracy": 0.5, "fed-client-accuracy": {0: 0.5, 1: 0.4}, "round-seconds": 4.0,
                "groups": [[0], [1]]}]
    extra = per_client(history)
    assert extra["client-error"] == {"0": 0.5, "1": 0.6} and extra["error-best"] == 0.5  # (0.4 + 0.6) / 2
    assert extra["groups"] == [[0], [1]] and extra["groups-per-epoch"] == [[[0, 1]], [[0], [1]]]
    assert extra["seconds-per-epoch"] == 3.0
    assert PAPER.tables["table4"].metric.curve(history) == [[1, 0.6], [2, 0.55]]


def test_authors_log_summary_reads_plain_and_timestamped_logs(tmp_path):
    from simulations.hcct.authors_log import summarise

    epochs = [({0: 60.0, 1: 70.0}, {0: 60.0, 1: 70.0}), ({0: 80.0, 1: 65.0}, {0: 80.0, 1: 70.0})]
    lines = []
    for now, best in epochs:
        lines += ["Model performance: mean ...", repr(now), "Best performance: mean ...", repr(best),
                  "Cluster Result: 2 groups are {0: [1], 1: [0]}", "Client 0 local loss: 1.0 local acc: 50.0"]
    plain, stamped = tmp_path / "plain.log", tmp_path / "stamped.log"
    plain.write_text("\n".join(lines) + "\n")
    # a prefix of seconds since start and a tab; epochs 12.5 s apart, the client's line 10 s into each
    stamped.write_text("".join(f"{3.0 + 12.5 * (i // 6) + 10.0 * (i % 6 == 5):.3f}\t{line}\n"
                               for i, line in enumerate(lines)))
    a, b = summarise(str(plain)), summarise(str(stamped))
    assert "seconds-per-epoch" not in a and b.pop("seconds-per-epoch") == 12.5
    assert (b.pop("train-seconds-per-epoch"), b.pop("eval-seconds-per-epoch")) == (10.0, 2.5)
    assert a == b
    assert a["rounds"] == 2 and a["client-error"] == {"0": 0.2, "1": 0.35}
    assert a["value"] == 0.275 and a["error-best"] == 0.25  # best accuracies 80 and 70
    assert a["curve"] == [[1, 0.35], [2, 0.275]] and a["groups"] == [[0], [1]]


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
    assert out["client-error"] == {"0": 0.25, "1": 0.35, "2": 0.46}
    assert out["error-best"] == pytest.approx((0.20 + 0.30 + 0.46) / 3)  # client 3 (never present) left out
    assert out["groups-per-epoch"] == [[[0], [1], [2]], [[0, 2], [1]]] and out["groups"] == [[0, 2], [1]]


def test_authors_log_merges_into_a_tables_authors_file(tmp_path):
    """Raw logs live outside the repository and may be gone: a run found replaces only the stored row of
    its method and seed, and the stored rows of other runs stay."""
    import json

    from simulations.hcct.authors_log import merge, write_rows

    r = lambda m, s, e: {"method": m, "seed": s, "value": e}  # noqa: E731
    assert merge([r("hcct", 0, 0.435), r("independent", 0, 0.01)], [r("independent", 0, 0.40), r("global", 0, 0.5)]) \
        == [r("hcct", 0, 0.435), r("independent", 0, 0.40), r("global", 0, 0.5)]
    path = tmp_path / "table4" / "cifar10" / "authors.json"
    path.parent.mkdir(parents=True)
    write_rows(path, [r("hcct", 0, 0.435)])
    stored = json.loads(path.read_text())
    assert (stored["table"], stored["column"], stored["rows"]) == ("table4", "cifar10", [r("hcct", 0, 0.435)])


def test_restated_claims_keep_their_history_on_the_page():
    """Table II's and the FMNIST head's claims were restated with their outcome known: the page says so."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "simulations" / "hcct" / "README.md").read_text()
    for claim_id in ("table2-partial-12-best", "fmnist-close-to-global"):
        history = CLAIMS[claim_id].history
        assert "until 2026-11-27" in history and "known" in history
        assert f"- `{claim_id}` restated: {history}" in page


ALPHAS = ("alpha0", "alpha1", "alpha10", "alpha100", "alpha1000")


def fig4_rows(errors):
    return [row(m, 0, e) for m, e in zip(ALPHAS, errors)]


def test_fig4_alpha100_best_counts_a_tie_and_reads_every_alpha():
    v = verdict("fig4-alpha100-best-train0.05", fig4_rows([0.50, 0.50, 0.48, 0.40, 0.40]))
    assert v.holds and v.ours["alpha100"] == 40.0 and v.note == "alpha100 40.0, the best other alpha 40.0"
    assert not verdict("fig4-alpha100-best-train0.1", fig4_rows([0.50, 0.50, 0.39, 0.40, 0.41])).holds


def test_fig4_smaller_alpha_best_compares_the_best_of_each_side():
    assert verdict("fig4-smaller-alpha-best-train0.2", fig4_rows([0.30, 0.30, 0.28, 0.29, 0.35])).holds
    v = verdict("fig4-smaller-alpha-best-train0.5", fig4_rows([0.30, 0.30, 0.28, 0.28, 0.35]))
    assert not v.holds and v.note == "best of alpha 0-10: 28.0; of alpha 100-1000: 28.0"  # a tie is not below


def test_fig4_error_falls_with_ratio_reads_all_four_columns(monkeypatch):
    import simulations.hcct.tables as hcct

    by_ratio = {"train0.05": [0.6] * 5, "train0.1": [0.5] * 5, "train0.2": [0.4] * 5}
    monkeypatch.setattr(hcct, "results", lambda paper, table, column, scale: Results(
        PAPER, table, column, scale, fig4_rows(by_ratio[column]), []))
    v = verdict("fig4-error-falls-with-ratio", fig4_rows([0.3] * 5))
    assert v.holds and v.ours["alpha100"] == "60.0 > 50.0 > 40.0 > 30.0"
    v = verdict("fig4-error-falls-with-ratio", fig4_rows([0.3, 0.3, 0.3, 0.3, 0.45]))
    assert not v.holds and v.note.endswith("falling for 4 of 5 alphas")
