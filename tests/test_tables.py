"""The one-shape table pipeline: every paper's table runs from its page's smoke command, every claims
file and page table rebuilds byte-identically from the committed summaries, and no two table columns
or settings ever share a results folder; a smoke run states no verdict and names what it ran; the
paper's numbers are quoted at the paper's precision."""

import json
import os
import re
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal, DecimalTuple
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import absent_data
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


@pytest.mark.slow
@pytest.mark.parametrize("paper", tables.PAPERS)
def test_table_commands_smoke(paper, tmp_path):
    check_smoke(smoke_command(paper), tmp_path)


# The table commands after each page's first (its smoke command above), as the pages give them
MORE_SMOKE = ["fedsmoo table2 --column cifar10-dir0.1-10pct --scale smoke",
              "hcct fig4 --column train0.05 --scale smoke --methods alpha100"]


@pytest.mark.slow
@pytest.mark.parametrize("command", MORE_SMOKE)
def test_more_table_commands_smoke(command, tmp_path):
    paper = command.split()[0]
    assert f"python -m simulations.run {command}" in (ROOT / "simulations" / paper / "README.md").read_text()
    rows = check_smoke(command.split(), tmp_path)
    if command.startswith("fedsmoo table2"):  # the final model's curvature: a positive top eigenvalue and trace
        assert all(r["value"] > 0 and r["more"]["trace"] > 0 and r["curve"] == [[1, r["value"]]] for r in rows)


def check_smoke(argv: list[str], tmp_path: Path) -> list[dict]:
    """Run one table command at the smoke scale into ``tmp_path`` (skipped where its data is absent); check its
    rows, table, plot and claims."""
    paper, table_id, column = argv[0], argv[1], argv[3]
    declared = tables.load(paper)
    planned = table_plan(declared, table_id, column, "smoke", SimpleNamespace(seeds=None, methods=None, set=[]))
    for _, _, cfg in planned:
        if why := absent_data(cfg.get("dataset", "synthetic"), cfg.get("data-dir", "")):
            pytest.skip(f"{why}: its smoke command reads it")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "simulations.run", *argv, "--out", str(tmp_path)], cwd=ROOT, env=env,
                   check=True, capture_output=True, timeout=240)
    table = declared.tables[table_id]
    out = tmp_path / column / "smoke"
    rows = json.loads((out / "summary.json").read_text())
    seeds = table.seeds.get("smoke") or table.seeds["cpu"]
    methods = argv[argv.index("--methods") + 1:] if "--methods" in argv else list(table.methods)
    assert sorted((r["method"], r["seed"]) for r in rows) == sorted((m, s) for m in methods for s in seeds)
    assert all(isinstance(r["value"], float) and r["curve"] for r in rows)
    shown = (out / "table.md").read_text()
    for r in rows:  # each method's row of the table shows its run's value
        assert re.search(rf"^\| {re.escape(r['method'])} \|.*\| {r['value'] * table.metric.show:.2f}", shown, re.M) \
            or len(seeds) > 1
    assert (out / f"{table_id}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = json.loads((out / "claims.json").read_text())
    assert [c["id"] for c in claims] == [c.id for c in declared.claims if c.table == table_id and c.column == column]
    assert all(c["kind"] in tables.KINDS and c["holds"] is None and c["reference_holds"] is None for c in claims)
    ran = {f"{cfg['model']} on {cfg['dataset']}" for _, _, cfg in planned if "model" in cfg and "dataset" in cfg}
    assert ran and all(pair in shown.splitlines()[0] for pair in ran), shown.splitlines()[0]  # the title names them
    return rows


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
    {"col": Column("a column", {"cpu": "x.toml"}, paper={"a": "80.0", "b": "70.0", "c": None})},
    seeds={"cpu": [0, 1]}, more={"err": Metric("err", "error (%)", higher=False)})})


def toy(rows: list[tuple[str, int, float]], authors=(), scale: str = "cpu") -> Results:
    def row(m, s, v):
        return {"method": m, "seed": s, "value": v, "more": {"err": 1 - v}, "curve": [[1, v]],
                "config": {"model": "mlp", "dataset": "synthetic"}}
    return Results(TOY, "t", "col", scale, [row(*r) for r in rows], [row(*r) for r in authors])


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
    assert record["holds"] is True and record["seeds"] == [0, 1] and record["paper"] == {"a": "80.0", "b": "70.0"}
    assert record["command"] == "python -m simulations.run toy t --column col --scale cpu --seeds 0 1"
    with pytest.raises(ValueError, match="kind 'result'"):
        tables.claim_record(paper, Claim("x", "result", "", tables.best("a"), "t", "col"), res)
    md = tables.markdown(res)
    assert "| a | 80.0 | 75.00 ± 7.07 |" in md and "| c | - | 15.00 ± 7.07 |" in md
    assert "ours at scale `cpu` (mlp on synthetic), seeds 0, 1" in md


def test_general_form_summarises_with_the_papers_first_table_where_it_has_no_report():
    from simulations.run import paper_report

    report = paper_report("fedals")  # FedALS keeps no report.py
    history = [{"round": r, "central-accuracy": a} for r, a in enumerate([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])]
    row = report.summarize(history, {})
    assert row == tables.summarize(tables.load("fedals").tables["table1"], history)
    assert row["value"] == pytest.approx(0.4) and row["rounds"] == 5  # mean of the last 5 evaluations
    assert "| a-s0 | a | 0 | 40.00 |" in report.table(None, [{"run": "a-s0", "method": "a", "seed": 0,
                                                               "value": 0.4}], ["a"])


def test_smoke_tables_state_no_verdict():
    # The builder: the same rows hold at the cpu scale and state no verdict at the smoke scale.
    paper = Paper("toy", "Toy", "https://example.org", TOY.tables,
                  [Claim("a-best", "learning", "a is best.", tables.best("a"), "t", "col")])
    rows = [("a", 0, 0.8), ("b", 0, 0.6), ("c", 0, 0.1)]
    assert tables.claim_record(paper, paper.claims[0], toy(rows))["holds"] is True
    smoke = tables.claim_record(paper, paper.claims[0], toy(rows, authors=rows, scale="smoke"))
    assert (smoke["holds"], smoke["reference_holds"]) == (None, None)
    assert smoke["note"] == smoke["reference_note"] == tables.SMOKE_NOTE
    # Every paper's claims on its committed rows taken as a smoke run's: no verdict, on ours or the reference.
    for name in tables.PAPERS:
        declared = tables.load(name)
        for claim in declared.claims:
            res = tables.results(declared, claim.table, claim.column, claim.scale)
            res.scale = "smoke"
            record = tables.claim_record(declared, claim, res)
            assert (record["holds"], record["reference_holds"]) == (None, None), (name, claim.id)
    # FedALS's smoke layer runs an MLP on synthetic data: its table says so, not ResNet-20 on CIFAR-10.
    fedals = tables.load("fedals")
    rows = [{"method": m, "seed": 0, "value": 0.5, "curve": [[5, 0.5]]} for m in ("fedavg", "fedals")]
    res = tables.results(fedals, "table1", "cifar10-noniid", "smoke", rows=rows)
    assert tables.heading(res) == ("FedALS: smoke run of table1 cifar10-noniid (mlp on synthetic), the pipeline in "
                                   "seconds; no verdict")
    footer = tables.markdown(res).splitlines()[-1]
    assert "ours at scale `smoke` (mlp on synthetic), seeds 0" in footer and footer.endswith("no verdict.")
    # at the cpu scale the committed rows (no stored config) read their setting files; a stored config wins
    assert "ours at scale `cpu` (resnet20 on cifar10)" in tables.markdown(
        tables.results(fedals, "table1", "cifar10-noniid", "cpu"))
    rows[0]["config"] = {"model": "lenet", "dataset": "cifar10"}
    assert tables.ran(tables.results(fedals, "table1", "cifar10-noniid", "smoke", rows=rows)) == \
        "lenet on cifar10, mlp on synthetic"


# --- the paper's numbers at the paper's precision -------------------------------------------------

PAPERS_TEXT = ROOT.parent / "shared" / "papers"  # the papers' text where this checkout has it
FILES = {"fedsmoo": "fedsmoo.txt", "fedals": "fedals-improved-generalization-bounds.txt", "pefll": "pefll.txt",
         "hcct": "hcct.txt"}
# every mean±sd as a paper's text prints it: its plain form ("84.55±.14", "0.4651 ± 0.0071"), or the LaTeX
# source's \numprint pair behind a display the paper rounds ("\numprint{88.96}\pm\numprint{0.84}" behind 89.0 ± 0.8)
PAIR = re.compile(r"(\d*\.\d+|\d+)\s*±\s*(\d*\.\d+|\d+)")
NUMPRINT = re.compile(r"\\numprint\{(\d*\.\d+|\d+)\}%?\s*\\pm%?\s*\\numprint\{(\d*\.\d+|\d+)\}")
# a table cell of a paper's text (extracted from its HTML): the displayed mean±sd, then the source behind it
CELL = re.compile(r"(\d*\.\d+|\d+)±(\d*\.\d+|\d+)(?:subscript)?plus-or-minus")
# the source strings of every quote stored below simulations/ (tests/data/paper_quotes.json): the check offline;
# a new quote adds its mean±sd (or its value) there exactly as the paper's text prints it, in the paper's unit,
# at its most precise: a display with a \numprint behind it is quoted as the \numprint
SOURCE_QUOTES = json.loads((ROOT / "tests" / "data" / "paper_quotes.json").read_text())


def digits(value: str, sd: str | None = None) -> DecimalTuple | tuple[DecimalTuple, DecimalTuple]:
    """A decimal (or a mean±sd) digit for digit: "89.0" and "89.00" differ."""
    return Decimal(value).as_tuple() if sd is None else (Decimal(value).as_tuple(), Decimal(sd).as_tuple())


def source_pairs(sources: list[str]) -> set[tuple[DecimalTuple, DecimalTuple]]:
    """The mean±sd pairs among a paper's source strings, plain or \\numprint."""
    return {digits(m[1], m[2]) for q in sources for m in [PAIR.fullmatch(q) or NUMPRINT.fullmatch(q)] if m}


def superseded(text: str) -> set[tuple[DecimalTuple, DecimalTuple]]:
    """The forms of the text's mean±sd that a more precise form of the same cell replaces: each display with
    a \\numprint behind it (in any table that shows it), and a \\numprint of it with fewer digits than another
    (Table 1's 48.60 ± 0.28 is Table 2's 48.6 ± 0.3)."""
    behind: dict[tuple, set[tuple]] = {}
    for line in text.splitlines():
        cells = list(CELL.finditer(line))
        for cell, after in zip(cells, cells[1:] + [None]):
            source = NUMPRINT.search(line, cell.end(), after.start() if after else len(line))
            if source:
                behind.setdefault(digits(cell[1], cell[2]), set()).add(digits(source[1], source[2]))

    def precision(pair: tuple[DecimalTuple, DecimalTuple]) -> int:
        return -(pair[0].exponent + pair[1].exponent)
    out = set()
    for display, sources in behind.items():
        forms = sources | {display}
        out |= {f for f in forms if precision(f) < max(map(precision, forms))}
    return out


def rounds_to(precise: DecimalTuple, coarse: DecimalTuple) -> bool:
    """``coarse`` is ``precise`` rounded to fewer digits (half up, as the papers display)."""
    return coarse.exponent > precise.exponent and Decimal(precise).quantize(
        Decimal(coarse), rounding=ROUND_HALF_UP).as_tuple() == coarse


def coarser(precise: tuple[DecimalTuple, DecimalTuple], coarse: tuple[DecimalTuple, DecimalTuple]) -> bool:
    """The mean±sd ``coarse`` is ``precise`` with fewer digits in its mean, its sd or both."""
    return coarse != precise and all(c == p or rounds_to(p, c) for p, c in zip(precise, coarse))


def stored_quotes(paper: Paper) -> list[tuple[str, str | None]]:
    """Every paper number the declarations store: (value, sd or None), as the decimal strings they hold."""
    out = []
    for table in paper.tables.values():
        for col in table.columns.values():
            numbers = [(col.paper, col.paper_sd)] + [(col.paper_more[k], col.paper_more_sd.get(k, {}))
                                                     for k in col.paper_more]
            out += [(v, sds.get(m)) for values, sds in numbers for m, v in values.items() if v is not None]

    def leaves(d: dict):
        for v in d.values():
            yield from leaves(v) if isinstance(v, dict) else [v]
    for claim in paper.claims:
        out += [(v, None) for v in leaves(claim.paper or {}) if re.fullmatch(r"\d+\.\d+", str(v))]
    return out


def at_source(paper: Paper, value: str) -> Decimal:
    """The stored decimal in the paper's own unit, digit for digit (46.51 % is the paper's 0.4651)."""
    return Decimal(value).scaleb(-paper.source_shift)


def test_paper_quotes_at_source_precision():
    assert all(isinstance(v, str) and (sd is None or isinstance(sd, str))
               for name in tables.PAPERS for v, sd in stored_quotes(tables.load(name)))
    checked, replaced = 0, {}
    for name in tables.PAPERS:
        paper, sources = tables.load(name), SOURCE_QUOTES[name]
        pairs = source_pairs(sources)
        quotes = [(str(at_source(paper, v)), None if sd is None else str(at_source(paper, sd)))
                  for v, sd in stored_quotes(paper)]
        text_file = PAPERS_TEXT / FILES[name]
        if text_file.exists():  # the committed source strings are the paper's own, at their most precise
            text = text_file.read_text()
            assert [q for q in sources if q not in text] == [], name
            replaced[name] = superseded(text)
            assert [q for q in pairs if q in replaced[name]] == [], name
            means = {v for v, _ in pairs}
            assert [v for v, sd in quotes if sd is None and digits(v) in {m for m, _ in replaced[name]} - means] \
                == [], name
        for value, sd in quotes:
            # equal as decimals AND in the number of digits: "89.00" is not the paper's "89.0", nor "89.0" its 88.96
            if sd is None:
                assert value in sources, (name, value)
                assert not any(rounds_to(m, digits(value)) for m, _ in pairs), (name, value)
            else:
                assert digits(value, sd) in pairs, (name, value, sd)
                assert not any(coarser(p, digits(value, sd)) for p in pairs), (name, value, sd)
            checked += 1
    assert checked > 350
    # PeFLL's Table 1 shows 89.0 ± 0.8 and 56.0 ± 0.3 over the \numprint 88.96 ± 0.84 and (Table 6) 56.0 ± 0.34
    assert {digits("89.0", "0.8"), digits("56.0", "0.3")} & source_pairs(SOURCE_QUOTES["pefll"]) == set()
    if "pefll" in replaced:
        assert {digits("89.0", "0.8"), digits("56.0", "0.3"), digits("48.6", "0.3")} <= replaced["pefll"]
        assert digits("81.6", "0.7") not in replaced["pefll"]  # Table 1 (b)'s Local row: no \numprint behind it
    # printed as stored: PeFLL's source digits, FedALS's fractions times 100 digit for digit
    pefll, fedals = tables.load("pefll"), tables.load("fedals")
    assert "| pefll | 88.96 ± 0.84 |" in tables.markdown(tables.results(pefll, "table1", "cifar10-100c", "cpu"))
    assert "| pefll | 56.0 ± 0.34 |" in tables.markdown(tables.results(pefll, "table1", "cifar100-100c", "paper"))
    svhn = tables.markdown(tables.results(fedals, "table1", "svhn-noniid", "paper"))
    assert "| scaffold | 71.80 ± 4.016 |" in svhn  # the paper's 0.7180 ± 0.04016


def test_view_runs_its_source_tables_runs(tmp_path):
    """A view (FedSMOO's Table 8 reads Table 1's runs) runs its source's runs of the methods asked, in a folder
    stamped as the source's, and writes its own table from them; publishing merges them into the source's rows."""
    main(["fedsmoo", "table8", "--column", "cifar10-path3-10pct", "--scale", "smoke", "--methods", "fedsmoo",
          "--set", 'dataset="synthetic"', "--out", str(tmp_path)])
    out = tmp_path / "cifar10-path3-10pct" / "smoke"
    assert json.loads((out / "table.json").read_text())["table"] == "table1"
    rows = json.loads((out / "summary.json").read_text())
    assert [r["run"] for r in rows] == ["fedsmoo-s20"] and "rounds_to" in rows[0]  # table1's row
    shown = (out / "table.md").read_text()
    assert shown.startswith("# FedSMOO: smoke run of table8 ")
    assert re.search(rf"^\| fedsmoo \| 81.58 ± 0.16 \|.*\| {rows[0]['value'] * 100:.2f} \|$", shown, re.M)
    assert [c["id"] for c in json.loads((out / "claims.json").read_text())] == ["table8-each-module-adds"]

    kept = [{"run": "fedavg-s20", "method": "fedavg", "seed": 20, "value": 0.3},
            {"method": "fedsmoo", "seed": 20, "value": 0.1}]  # an older runner's row: no run name
    assert tables.merged(kept, rows) == [kept[0], rows[0]]
