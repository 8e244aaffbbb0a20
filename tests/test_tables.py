"""The one-shape table pipeline: every paper's table runs from its page's smoke command, every claims
file and page table rebuilds byte-identically from the committed summaries, and no two table columns
or settings ever share a results folder."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from simulations import tables
from simulations.run import claim_folder, main, table_plan
from simulations.tables import Claim, Column, Metric, Paper, Results, Table

ROOT = Path(__file__).resolve().parents[1]


def smoke_command(paper: str) -> list[str]:
    """The first ``--scale smoke`` command of the paper's page, as argv of ``python -m simulations.run``."""
    text = (ROOT / "simulations" / paper / "README.md").read_text()
    m = re.search(rf"python -m simulations\.run ({paper} \S+ --column \S+ --scale smoke)\b", text)
    assert m, f"simulations/{paper}/README.md gives no smoke command"
    return m[1].split()


@pytest.mark.parametrize("paper", tables.PAPERS)
def test_table_commands_smoke(paper, tmp_path):
    argv = smoke_command(paper)
    table_id, column = argv[1], argv[3]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "simulations.run", *argv, "--out", str(tmp_path)], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=240)
    declared = tables.load(paper)
    table = declared.tables[table_id]
    out = tmp_path / column / "smoke"
    rows = json.loads((out / "summary.json").read_text())
    seeds = table.seeds.get("smoke") or table.seeds["cpu"]
    assert sorted((r["method"], r["seed"]) for r in rows) == sorted((m, s) for m in table.methods for s in seeds)
    assert all(isinstance(r["value"], float) and r["curve"] for r in rows)
    shown = (out / "table.md").read_text()
    for r in rows:  # each method's row of the table shows its run's value
        assert re.search(rf"^\| {re.escape(r['method'])} \|.*\| {r['value'] * table.metric.show:.2f}", shown, re.M) \
            or len(seeds) > 1
    assert (out / f"{table_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = json.loads((out / "claims.json").read_text())
    assert [c["id"] for c in claims] == [c.id for c in declared.claims if c.table == table_id and c.column == column]
    assert all(c["kind"] in tables.KINDS and isinstance(c["holds"], bool) for c in claims)


def test_claims_rebuild_byte_identical():
    rebuilt = 0
    for paper in tables.PAPERS:
        declared = tables.load(paper)
        assert (declared.folder / "claims.json").exists(), paper
        for path, text in tables.built(declared).items():
            assert path.read_text() == text, f"{path.relative_to(ROOT)} differs from its rebuild"
            rebuilt += 1
        claims = json.loads((declared.folder / "claims.json").read_text())
        assert claims and all(c["kind"] in tables.KINDS for c in claims)
        assert all(tuple(c) == tables.CLAIM_KEYS for c in claims)
    assert rebuilt >= 8  # four claims files and four pages


def tiny_setting(path: Path, **keys) -> Path:
    base = {"strategy": "fedavg", "dataset": "synthetic", "num-clients": 2, "num-server-rounds": 1,
            "local-steps": 1, "fraction-evaluate": 0.0, "checkpoint-every": 0, "results-dir": str(path.parent / "out")}
    path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in (base | keys).items()))
    return path


def test_table_columns_never_share_results(tmp_path):
    # A table's columns and scales each get their own folder, stamped; another's folder is refused.
    paper = tables.load("fedsmoo")
    columns = list(paper.tables["table1"].columns)
    assert len(columns) >= 2
    args = type("Args", (), {"seeds": [20], "methods": None, "set": []})()
    plans = {c: table_plan(paper, "table1", c, "paper", args) for c in columns}
    settings = {c: {json.dumps(cfg, sort_keys=True) for _, _, cfg in runs} for c, runs in plans.items()}
    assert all(settings[a].isdisjoint(settings[b]) for a in columns for b in columns if a != b)
    assert all("results-dir" not in cfg for runs in plans.values() for _, _, cfg in runs)
    out = tmp_path / "one-folder"
    claim_folder(out, {"paper": "fedsmoo", "table": "table1", "column": columns[0], "scale": "paper"})
    claim_folder(out, {"paper": "fedsmoo", "table": "table1", "column": columns[0], "scale": "paper"})  # its own
    with pytest.raises(SystemExit, match=f"holds the runs of fedsmoo table1 column {re.escape(columns[0])}"):
        claim_folder(out, {"paper": "fedsmoo", "table": "table1", "column": columns[1], "scale": "paper"})

    # Two setting files with one results-dir: the second's run of the same name is refused, naming the key.
    first = tiny_setting(tmp_path / "a.toml", **{"synthetic-alpha": 0.5})
    second = tiny_setting(tmp_path / "b.toml", **{"synthetic-alpha": 1.0})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "simulations.run", str(first), "--methods", "fedavg", "--seeds", "0",
                    "--report", "fedsmoo", "--target", "0.1"], cwd=ROOT, env=env, check=True, capture_output=True,
                   timeout=120)
    rows = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [(r["run"], r["config"]["synthetic-alpha"]) for r in rows] == [("fedavg-s0", 0.5)]
    with pytest.raises(SystemExit, match="already holds a run of that name with other settings "
                                         r"\(synthetic-alpha: 0.5 there, 1.0 here\)"):
        main([str(second), "--methods", "fedavg", "--seeds", "0", "--report", "fedsmoo"])
    assert len(json.loads((tmp_path / "out" / "summary.json").read_text())) == 1


# --- the builder's checks on hand-made rows ------------------------------------------------------

TOY = Paper("toy", "Toy", "https://example.org", {"t": Table(
    "toy table", Metric("acc", "accuracy (%)"), {"a": {}, "b": {}, "c": {}},
    {"col": Column("a column", {"cpu": "x.toml"}, paper={"a": 80.0, "b": 70.0, "c": None})},
    seeds={"cpu": [0, 1]}, more={"err": Metric("err", "error (%)", higher=False)})})


def toy(rows: list[tuple[str, int, float]], authors=()) -> Results:
    def row(m, s, v):
        return {"method": m, "seed": s, "value": v, "more": {"err": 1 - v}, "curve": [[1, v]]}
    return Results(TOY, "t", "col", "cpu", [row(*r) for r in rows], [row(*r) for r in authors])


def test_checks_give_the_hand_computed_verdicts():
    res = toy([("a", 0, 0.80), ("a", 1, 0.70), ("b", 0, 0.60), ("b", 1, 0.90), ("c", 0, 0.10)])
    # every method on seed 0 only (c never ran seed 1): a 80, b 60, c 10
    assert tables.best("a")(res) == tables.Verdict(True, {"a": 80.0, "b": 60.0, "c": 10.0}, "best: a")
    assert tables.best("a", metric="err")(res).holds  # lowest error is best
    assert not tables.best("b", among=["a", "b"])(res).holds  # seeds 0 and 1: a 75, b 75 -> max picks a
    v = tables.ahead("b", "a", by=0.0)(res)  # seeds 0, 1: both 75.0
    assert (v.holds, v.ours["gap"]) == (False, 0.0)
    v = tables.ahead("a", "c", by=70.0)(res)
    assert (v.holds, v.ours) == (True, {"a": 80.0, "c": 10.0, "gap": 70.0})
    assert not tables.ahead("a", "c", by=70.01)(res).holds
    v = tables.within("a", "b", 0.0)(res)
    assert (v.holds, v.ours["gap"]) == (True, 0.0)
    v = tables.ahead("a", "c", by=60.0, metric="err")(res)  # error 20 vs 90: a ahead by 70
    assert (v.holds, v.ours["gap"]) == (True, 70.0)
    with_authors = toy([("a", 0, 0.80), ("a", 1, 0.70)], authors=[("a", 5, 0.72), ("a", 6, 0.70)])
    v = tables.matches_authors(["a"], 4.0)(with_authors)
    assert (v.holds, v.ours["gap"]) == (True, {"a": 4.0})
    assert not tables.matches_authors(["a"], 3.99)(with_authors).holds


def test_metric_reductions():
    curve = [[1, 0.1], [2, 0.5], [3, 0.3], [4, 0.4]]
    assert Metric("k", "").value(curve) == 0.4
    assert Metric("k", "", reduce="best").value(curve) == 0.5
    assert Metric("k", "", reduce="best", higher=False).value(curve) == 0.1
    assert Metric("k", "", reduce="mean-last-2").value(curve) == pytest.approx(0.35)
    assert Metric("k", "", reduce="mean-last-5").value(curve) is None  # fewer evaluations than asked
    assert Metric("k", "", reduce="at-2").value(curve) == 0.5
    history = [{"round": 0, "k": 0.0}, {"round": 1, "k": 0.25}, {"round": 2}, {"round": 3, "k": 0.5}]
    assert Metric("k", "").curve(history) == [[1, 0.25], [3, 0.5]]


def test_claim_record_shape_and_markdown():
    paper = Paper("toy", "Toy", "https://example.org", TOY.tables,
                  [Claim("a-best", "learning", "a is best.", tables.best("a"), "t", "col")])
    res = toy([("a", 0, 0.8), ("b", 0, 0.6), ("c", 0, 0.1), ("a", 1, 0.7), ("b", 1, 0.5), ("c", 1, 0.2)])
    record = tables.claim_record(paper, paper.claims[0], res)
    assert tuple(record) == tables.CLAIM_KEYS
    assert record["holds"] is True and record["seeds"] == [0, 1] and record["paper"] == {"a": 80.0, "b": 70.0}
    assert record["command"] == "python -m simulations.run toy t --column col --scale cpu --seeds 0 1"
    with pytest.raises(ValueError, match="kind 'result'"):
        tables.claim_record(paper, Claim("x", "result", "", tables.best("a"), "t", "col"), res)
    md = tables.markdown(res)
    assert "| a | 80.00 | 75.00 ± 7.07 |" in md and "| c | - | 15.00 ± 7.07 |" in md
    assert "ours at scale `cpu`, seeds 0, 1" in md


def test_general_form_summarises_with_the_papers_first_table_where_it_has_no_report():
    from simulations.run import paper_report

    report = paper_report("fedals")  # FedALS keeps no report.py
    history = [{"round": r, "central-accuracy": a} for r, a in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])]
    row = report.summarize(history, {})
    assert row == tables.summarize(tables.load("fedals").tables["table1"], history)
    assert row["value"] == pytest.approx(0.4) and row["rounds"] == 5  # mean of the last 5 evaluations
    assert "| a-s0 | a | 0 | 40.00 |" in report.table(None, [{"run": "a-s0", "method": "a", "seed": 0,
                                                               "value": 0.4}], ["a"])
