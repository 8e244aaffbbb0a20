"""The papers' tables, declared once per paper and rebuilt from committed run summaries.

Every paper's folder ``simulations/<paper>/`` has the same parts:

* its settings: plain run-config files (``flwr run . --run-config FILE`` runs one), one per table
  column and scale (a file name may hold ``{method}`` where a setting has one file per method);
* ``tables.py``: ``PAPER``, a :class:`Paper` declaring its tables (settings x methods x seeds, the
  metric and how it reads, the paper's numbers) and its claims;
* ``summaries/<table>/<column>/<scale>.json``: the condensed summaries of the runs the page quotes
  (one row a run: method, seed, the table's metric, its curve, its run config and seconds), and
  ``authors.json`` beside them for the authors' code on the same setting where it was run (each row its
  seed and command); ``python -m simulations.provenance`` lists the rows that lack any of these and
  replays a row from its stored config;
* the drivers of the authors' code (their checkout and venv from arguments or environment variables);
* ``README.md``: the paper's results page, whose tables sit between ``<!-- table ... -->`` markers;
* ``claims.json`` and one ``<table>.png`` a table: written by :func:`build` from the summaries alone,
  with the page's claims table (between ``<!-- claims -->`` markers).

The paper's numbers are stored as the decimal strings the paper prints, at the source's precision and
never more digits: where a display rounds a LaTeX ``\\numprint`` (PeFLL's 89.0 ± 0.8), the ``\\numprint``
digits (``"88.96"``, ``"0.84"``); in the unit the page shows (``Paper.source_shift``: the power of ten
from the source's unit, e.g. 2 where the paper prints fractions and the page percent).

A table may be a view of another's runs (``Table.runs_of``: rounds to a target accuracy, an ablation's
subset of methods): it reads that table's summaries through its own ``view`` and has none of its own.

``python -m simulations.run <paper> <table> --column C --scale cpu`` runs a table (simulations/run.py);
``python -m simulations.tables [PAPER ...] [--check]`` rebuilds the claims files, the plots and the
pages' tables from the committed summaries (``--check``: say what differs, change nothing).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import re
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ("fedsmoo", "fedals", "pefll", "hcct")
SCALES = ("paper", "cpu", "smoke")
KINDS = ("learning", "bookkeeping", "construction", "code-equality")
CLAIM_KEYS = ("id", "kind", "claim", "paper", "ours", "reference_code", "reference_holds", "reference_note",
              "reference_command", "seeds", "holds", "note", "setting", "command")
SMOKE_NOTE = "no verdict at the smoke scale: the pipeline in seconds, not the claim's setting"


@dataclass(frozen=True)
class Metric:
    """What a table reports of one run: ``of(round row)`` read on the evaluated rounds, then reduced.

    ``reduce``: ``last`` (the last evaluation), ``best``, ``mean-last-K`` (mean of the last K
    evaluations) or ``at-R`` (the evaluation of round R). Values are stored as the history holds them
    (accuracies as fractions) and shown times ``show``; ``higher`` says which way is better.
    """

    key: str
    label: str
    reduce: str = "last"
    higher: bool = True
    show: float = 100.0
    of: Callable[[Mapping[str, Any]], float | None] | None = None

    def read(self, row: Mapping[str, Any]) -> float | None:
        value = self.of(row) if self.of else row.get(self.key)
        return None if value is None else float(value)

    def curve(self, history: list[dict]) -> list[list[float]]:
        points = [(r["round"], self.read(r)) for r in history if r.get("round", 0) > 0]
        return [[rnd, round(v, 6)] for rnd, v in points if v is not None]

    def value(self, curve: list[list[float]]) -> float | None:
        if not curve:
            return None
        if self.reduce == "last":
            return curve[-1][1]
        if self.reduce == "best":
            return (max if self.higher else min)(v for _, v in curve)
        if self.reduce.startswith("mean-last-"):
            k = int(self.reduce.removeprefix("mean-last-"))
            return statistics.fmean(v for _, v in curve[-k:]) if len(curve) >= k else None
        if self.reduce.startswith("at-"):
            at = int(self.reduce.removeprefix("at-"))
            return next((v for rnd, v in curve if rnd == at), None)
        raise ValueError(f"metric {self.key}: unknown reduce {self.reduce!r}")


@dataclass(frozen=True)
class Column:
    """One column (or setting) of a table: its run-config file per scale, relative to the paper's folder,
    and the paper's number per method in the metric's shown units, as the decimal string the paper
    prints (None: the paper has none); ``paper_more`` / ``paper_more_sd``: the same for the table's
    other metrics (``Table.more``), by metric."""

    label: str
    settings: Mapping[str, str]
    paper: Mapping[str, str | None] = field(default_factory=dict)
    paper_sd: Mapping[str, str] = field(default_factory=dict)
    paper_more: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict)
    paper_more_sd: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Table:
    """A paper table: ``methods`` maps a method's name to its run-config layer (a dict of keys, or a
    run-config file relative to the paper's folder); ``seeds`` the default seeds per scale; ``smoke``
    the keys layered on the cpu setting to make the smoke scale (the same pipeline in seconds);
    ``extra(history)`` more fields kept in each run's summary row; ``paper_seeds`` how many seeds the
    paper's numbers average; ``measure(run folder, run config, scale)`` fields measured on a finished run's
    saved model (``model.pt``), added to its last round's row before the metrics read it; ``draw(results,
    path)`` the table's plot where it is not its metric against rounds (a figure across the columns)."""

    title: str
    metric: Metric
    methods: Mapping[str, Mapping[str, Any] | str]
    columns: Mapping[str, Column]
    seeds: Mapping[str, list[int]]
    smoke: Mapping[str, Any] = field(default_factory=dict)
    paper_seeds: int | None = None
    extra: Callable[[list[dict]], dict] | None = None
    more: Mapping[str, Metric] = field(default_factory=dict)
    measure: Callable[[Path, dict, str], dict] | None = None
    runs_of: str | None = None
    view: Callable[[list[dict], str], list[dict]] | None = None
    draw: Callable[[Results, Path], None] | None = None

    def metric_of(self, name: str | None) -> Metric:
        return self.metric if name is None else self.more[name]


@dataclass(frozen=True)
class Verdict:
    holds: bool
    ours: dict
    note: str = ""


@dataclass(frozen=True)
class Claim:
    """A sentence of the paper checked on our runs. ``check(results)`` gives the verdict from the
    summaries of ``table`` / ``column`` at ``scale``; ``paper`` and ``reference`` are what the page
    quotes beside ours (``reference`` defaults to the authors' code summary of that column); ``command``
    the command that checks it where that is not the table's run (a golden fixture's test).

    ``reference_holds`` is the same ``check`` applied to the authors' code's rows of the column
    (``authors.json``), where they hold every method the claim compares; ``reference_run`` is the
    command that made those rows, or would make them where they are missing; ``versus_reference``: the
    check itself compares ours with the authors' code (no separate reference verdict). ``history``: one
    line where the claim was restated (what it said, why it changed, when its outcome was known)."""

    id: str
    kind: str
    claim: str
    check: Callable[[Results], Verdict]
    table: str
    column: str
    scale: str = "cpu"
    paper: dict | None = None
    reference: Callable[[Results], dict | None] | None = None
    command: str | None = None
    # the methods the claim compares, where the table ran others on fewer seeds: the record's seeds
    # and command are those on which all of these that ran did (default: the table's methods)
    methods: tuple[str, ...] = ()
    reference_run: str | None = None
    versus_reference: bool = False
    history: str = ""
    # the table's other metric (``Table.more``) the check reads, where not the table's own
    metric: str | None = None


@dataclass(frozen=True)
class Paper:
    """``source_shift``: the power of ten from the unit the paper prints its numbers in to the unit they
    are stored and shown in (2: the paper prints fractions, the page percent)."""

    name: str
    title: str
    link: str
    tables: Mapping[str, Table]
    claims: list[Claim] = field(default_factory=list)
    source_shift: int = 0

    @property
    def folder(self) -> Path:
        return ROOT / "simulations" / self.name


def load(paper: str) -> Paper:
    if paper not in PAPERS:
        raise SystemExit(f"paper {paper!r}: not one of {', '.join(PAPERS)}")
    return importlib.import_module(f"simulations.{paper}.tables").PAPER


# --- one run's summary row and a table's results -------------------------------------------------

def summarize(table: Table, history: list[dict]) -> dict:
    """The condensed summary of one run: the table's metric, its curve, the values of its other metrics
    (``more``) and the table's extra fields."""
    def value(metric: Metric) -> float | None:
        v = metric.value(metric.curve(history))
        return None if v is None else round(v, 6)

    row = {"value": value(table.metric), "rounds": max(r["round"] for r in history),
           "curve": table.metric.curve(history)}
    if table.more:
        row["more"] = {name: value(m) for name, m in table.more.items()}
    return row | (table.extra(history) if table.extra else {})


@dataclass
class Results:
    """The rows of one (table, column, scale): ours by method and seed, and the authors' code's."""

    paper: Paper
    table_id: str
    column_id: str
    scale: str
    rows: list[dict]
    authors: list[dict]
    of_reference: bool = False  # the rows are the authors' code's (a claim's reference verdict)

    @property
    def table(self) -> Table:
        return self.paper.tables[self.table_id]

    @property
    def column(self) -> Column:
        return self.table.columns[self.column_id]

    def values(self, method: str, rows: list[dict] | None = None, metric: str | None = None) -> dict[int, float]:
        """Seed -> value of ``method``'s runs (the table's metric, or its other metric ``metric``)."""
        got = {r["seed"]: r["value"] if metric is None else r.get("more", {}).get(metric)
               for r in (self.rows if rows is None else rows) if r["method"] == method}
        return {s: v for s, v in got.items() if v is not None}

    def seeds(self, *methods: str, metric: str | None = None) -> list[int]:
        """The seeds on which every one of ``methods`` (default: the table's) has a value."""
        sets = [set(self.values(m, metric=metric)) for m in (methods or self.table.methods)]
        return sorted(set.intersection(*sets)) if sets else []

    def mean(self, method: str, seeds: list[int] | None = None, authors: bool = False,
             metric: str | None = None) -> float | None:
        vals = self.values(method, self.authors if authors else None, metric)
        vals = [v for s, v in vals.items() if seeds is None or s in seeds]
        return statistics.fmean(vals) if vals else None

    def shown(self, value: float | None, metric: str | None = None) -> float | None:
        if value is None or math.isinf(value):  # a target never reached: no number to show
            return None
        return round(value * self.table.metric_of(metric).show, 2)

    @property
    def setting(self) -> str:
        """The column's run-config file at this scale (its folder, where each method has a file)."""
        path = self.column.settings.get(self.scale if self.scale != "smoke" else "cpu", "")
        if "{method}" in path:
            path = path.split("{method}")[0]
        return f"simulations/{self.paper.name}/{path}"

    def command(self, seeds: list[int] | None = None) -> str:
        seeds = seeds if seeds is not None else self.table.seeds.get(self.scale, [])
        return (f"python -m simulations.run {self.paper.name} {self.table_id} --column {self.column_id} "
                f"--scale {self.scale}" + (f" --seeds {' '.join(map(str, seeds))}" if seeds else ""))


def summary_path(paper: Paper, table: str, column: str, scale: str) -> Path:
    return paper.folder / "summaries" / table / column / f"{scale}.json"


def read_rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"] if path.exists() else []


def run_key(row: dict) -> str:
    """A summary row's run name (rows of older runners have none: their method and seed)."""
    return row.get("run") or f"{row['method']}-s{row['seed']}"


def merged(kept: list[dict], fresh: list[dict]) -> list[dict]:
    """A summary's rows ``kept`` with the ``fresh`` rows of the same runs in their place, and the others added."""
    runs = {run_key(r) for r in fresh}
    return [r for r in kept if run_key(r) not in runs] + fresh


def results(paper: Paper, table: str, column: str, scale: str, rows: list[dict] | None = None) -> Results:
    """Committed summaries (or ``rows``, a fresh run's) of one table column at one scale; a view's
    (``Table.runs_of``) through its ``view`` from the summaries of the table it reads."""
    declared = paper.tables[table]
    folder = summary_path(paper, declared.runs_of or table, column, scale).parent
    ours = read_rows(folder / f"{scale}.json") if rows is None else rows
    theirs = read_rows(folder / "authors.json")
    if declared.runs_of:
        ours, theirs = viewed(declared, ours, scale), viewed(declared, theirs, scale)
    return Results(paper, table, column, scale, ours, theirs)


def viewed(table: Table, rows: list[dict], scale: str) -> list[dict]:
    """A view's rows: the rows of its methods, through its ``view``."""
    mine = [r for r in rows if r["method"] in table.methods]
    return table.view(mine, scale) if table.view else mine


# --- claim checks: the few shapes the papers' sentences take ----------------------------------------

def best(method: str, among: list[str] | None = None, metric: str | None = None) -> Callable[[Results], Verdict]:
    """``method`` has the best mean of ``among`` (default: every method of the table), on the seeds all ran."""
    def check(res: Results) -> Verdict:
        names = among or list(res.table.methods)
        seeds = res.seeds(*names, metric=metric)
        if not seeds:
            return Verdict(False, {}, "no seed on which every method ran")
        means = {m: res.mean(m, seeds, metric=metric) for m in names}
        top = (max if res.table.metric_of(metric).higher else min)(means, key=means.get)
        return Verdict(top == method, {m: res.shown(v, metric) for m, v in means.items()},
                       f"best: {top}")
    return check


def ahead(a: str, b: str, by: float = 0.0, metric: str | None = None) -> Callable[[Results], Verdict]:
    """``a``'s mean is better than ``b``'s by at least ``by`` points (shown units), on the seeds both ran."""
    def check(res: Results) -> Verdict:
        seeds = res.seeds(a, b, metric=metric)
        if not seeds:
            return Verdict(False, {}, f"no seed on which both {a} and {b} ran")
        ma, mb = (res.shown(res.mean(m, seeds, metric=metric), metric) for m in (a, b))
        gap = round(ma - mb if res.table.metric_of(metric).higher else mb - ma, 2)
        return Verdict(gap > 0 and gap >= by, {a: ma, b: mb, "gap": gap},
                       f"{a} ahead of {b} by {gap} points (asked: more than 0 and at least {by})")
    return check


def within(a: str, b: str, points: float, metric: str | None = None) -> Callable[[Results], Verdict]:
    """``a``'s and ``b``'s means differ by at most ``points`` (shown units), on the seeds both ran."""
    def check(res: Results) -> Verdict:
        seeds = res.seeds(a, b, metric=metric)
        if not seeds:
            return Verdict(False, {}, f"no seed on which both {a} and {b} ran")
        ma, mb = (res.shown(res.mean(m, seeds, metric=metric), metric) for m in (a, b))
        gap = round(abs(ma - mb), 2)
        return Verdict(gap <= points, {a: ma, b: mb, "gap": gap}, f"{gap} points apart (asked: at most {points})")
    return check


def matches_authors(methods: list[str], points: float, metric: str | None = None) -> Callable[[Results], Verdict]:
    """Each method's mean is within ``points`` of the authors' code's mean on the same setting (all seeds
    each side ran: the two codes draw different data for one seed)."""
    def check(res: Results) -> Verdict:
        ours, theirs, gaps = {}, {}, {}
        for m in methods:
            ours[m] = res.shown(res.mean(m, metric=metric), metric)
            theirs[m] = res.shown(res.mean(m, authors=True, metric=metric), metric)
            if ours[m] is None or theirs[m] is None:
                return Verdict(False, {"ours": ours, "authors": theirs}, f"{m}: no run on one side")
            gaps[m] = round(ours[m] - theirs[m], 2)
        worst = max(abs(g) for g in gaps.values())
        return Verdict(worst <= points, {"ours": ours, "authors": theirs, "gap": gaps},
                       f"largest gap {worst} points (asked: at most {points})")
    return check


# --- the built artefacts: claims, tables, plots ---------------------------------------------------

def authors_reference(res: Results, metric: str | None = None) -> dict | None:
    """The authors' code's means of the table's metric (or its other metric ``metric``) by method; None
    where its rows hold none."""
    methods = sorted({r["method"] for r in res.authors if res.values(r["method"], res.authors, metric)})
    if not methods:
        return None
    return {"means": {m: res.shown(res.mean(m, authors=True, metric=metric), metric) for m in methods},
            "seeds": sorted({r["seed"] for r in res.authors})}


def reference_verdict(claim: Claim, res: Results) -> tuple[bool | None, str]:
    """The claim's own check on the authors' code's rows of the column: (holds, its note), or (None, why
    there is none: no such rows, a method the claim compares missing from them, a smoke run, a bookkeeping
    count, or a claim whose check is itself the comparison with the authors' code)."""
    if res.scale == "smoke":
        return None, SMOKE_NOTE
    if claim.versus_reference or claim.kind == "code-equality":
        return None, "the claim itself compares ours with the authors' code"
    if claim.kind == "bookkeeping":
        return None, "a count of what our strategy sends against the paper's: no run of another code decides it"
    if not res.authors:
        return None, "no run of the authors' code at this setting yet"
    theirs = Results(res.paper, res.table_id, res.column_id, res.scale, res.authors, [], of_reference=True)
    needed = claim.methods or tuple(res.table.methods)
    if claim.metric and not any(theirs.values(m, metric=claim.metric) for m in needed):
        return None, f"the authors' code's runs hold no {res.table.metric_of(claim.metric).label}"
    missing = [m for m in needed if not theirs.values(m, metric=claim.metric)]
    if missing:
        ran = [m for m in needed if m not in missing]
        why = (f"the authors' code ran {', '.join(ran) or 'none of the compared methods'} at this setting, not "
               f"{', '.join(missing)}")
        decided = verdict_without(claim, theirs, missing) if ran else None
        if decided is None:
            return None, why
        return decided.holds, f"{decided.note}; {why}, which cannot change the verdict"
    verdict = claim.check(theirs)
    return bool(verdict.holds), verdict.note


def verdict_without(claim: Claim, theirs: Results, missing: list[str]) -> Verdict | None:
    """The check's verdict on the rows there are, when one method is missing from the authors' code's runs of
    one seed and no value of it could change the verdict; else None. Tried: every value the other rows hold,
    just above and below each, both extremes, and a grid 1e-4 wide from one span below the rows' values to one
    above (accuracies in points: 0.01), so a verdict that holds only between two of those is not missed."""
    seeds = sorted({r["seed"] for r in theirs.rows if r.get("seed") is not None})
    if len(missing) != 1 or len(seeds) != 1:
        return None
    held = [r["value"] for r in theirs.rows if r.get("value") is not None]
    lo, hi = min(held), max(held)
    span = (hi - lo) or 1.0
    steps = int(3 * span / 1e-4)
    grid = {lo - span + k * 1e-4 for k in range(steps + 1)} | {-1e9, 1e9}
    grid |= {v + d for v in held for d in (-1e-9, 0.0, 1e-9)}
    verdicts = set()
    for value in sorted(grid):
        stand_in = {"method": missing[0], "seed": seeds[0], "value": value}
        rows = Results(theirs.paper, theirs.table_id, theirs.column_id, theirs.scale, [*theirs.rows, stand_in], [],
                       of_reference=True)
        try:
            verdicts.add(bool(claim.check(rows).holds))
        except (KeyError, TypeError, ValueError):  # a check that reads more of a row than its value
            return None
        if len(verdicts) > 1:
            return None
    return Verdict(verdicts.pop(), {}, claim.check(theirs).note)


def claim_record(paper: Paper, claim: Claim, res: Results | None = None) -> dict:
    """The claims-file record of ``claim``, on the committed summaries or on ``res`` (a fresh run's); a smoke
    run records no verdict (``holds`` null), nor does a learning claim on a table not run yet."""
    if claim.kind not in KINDS:
        raise ValueError(f"claim {claim.id}: kind {claim.kind!r} is not one of {', '.join(KINDS)}")
    res = res or results(paper, claim.table, claim.column, claim.scale)
    verdict = claim.check(res)
    seeds = res.seeds(*[m for m in claim.methods or res.table.methods if res.values(m)])
    column = res.column
    quoted = claim.paper if claim.paper is not None else (
        {m: v for m, v in column.paper.items() if v is not None} or None)
    reference_holds, reference_note = reference_verdict(claim, res)
    smoke = res.scale == "smoke"
    unrun = not res.rows and claim.kind == "learning"  # a count or a code's equality needs no run of the table
    note = SMOKE_NOTE if smoke else f"not run yet: {res.command()}" if unrun else verdict.note
    reference = claim.reference(res) if claim.reference else authors_reference(res, claim.metric)
    return {"id": claim.id, "kind": claim.kind, "claim": claim.claim, "paper": quoted, "ours": verdict.ours,
            "reference_code": reference, "reference_holds": reference_holds,
            "reference_note": reference_note, "reference_command": claim.reference_run, "seeds": seeds,
            "holds": None if smoke or unrun else bool(verdict.holds), "note": note,
            "setting": res.setting, "command": claim.command or res.command(seeds)}


def claims(paper: Paper) -> list[dict]:
    return [claim_record(paper, c) for c in paper.claims]


def dumps(obj: Any) -> str:
    """The one JSON form of every built file: stable order, 1-space indent, a final newline."""
    return json.dumps(obj, indent=1, ensure_ascii=False) + "\n"


def fmt(value: float | None, sd: float | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" + (f" ± {sd:.2f}" if sd is not None else "")


def printed(text: str) -> list[tuple[str, str]]:
    """``"79.52±0.13 76.00±0.18"``, a row of a paper's table as it prints it -> [("79.52", "0.13"), ...]."""
    return [tuple(cell.split("±")) for cell in text.split()]


def quote(value: str | None, sd: str | None = None) -> str:
    """A paper's number as the paper prints it (its stored decimal string), ± its sd where it gives one."""
    if value is None:
        return "-"
    return value + (f" ± {sd}" if sd is not None else "")


def ran(res: Results) -> str:
    """The models and data our runs of the column at this scale ran, ``<model> on <dataset>``: each row's
    stored config, else the config a run of its method takes (the column's setting at this scale, with the
    smoke layer at the smoke scale); "not run" where no row is."""
    from types import SimpleNamespace

    from fedapp.core.config import COMMON_KEYS
    from simulations.run import table_plan

    if not res.rows:
        return "not run"
    default = {k.name: k.default for k in COMMON_KEYS}
    try:
        planned = {m: cfg for _, m, cfg in table_plan(res.paper, res.table_id, res.column_id, res.scale,
                                                      SimpleNamespace(seeds=[0], methods=None, set=[]))}
    except (SystemExit, OSError):  # no setting at this scale, or not one in this folder
        planned = {}
    configs = [r.get("config") or planned.get(r["method"]) for r in res.rows]
    pairs = {f"{c.get('model', default['model'])} on {c.get('dataset', default['dataset'])}" for c in configs if c}
    return ", ".join(sorted(pairs)) or "-"


def heading(res: Results) -> str:
    """The title of a run's table: the paper's table, or at the smoke scale what the smoke run ran."""
    if res.scale == "smoke":
        return (f"{res.paper.title}: smoke run of {res.table_id} {res.column_id} ({ran(res)}), the pipeline in "
                f"seconds; no verdict")
    return f"{res.paper.title}: {res.table.title}"


def markdown(res: Results, more: str | None = None) -> str:
    """paper | authors' code (where run) | ours, mean ± sd over the seeds, and the scale it ran at, with the
    model and data it ran; of the table's metric, or of its other metric ``more``."""
    metric, column = res.table.metric_of(more), res.column
    paper, paper_sd = ((column.paper, column.paper_sd) if more is None else
                       (column.paper_more.get(more, {}), column.paper_more_sd.get(more, {})))
    have_authors = any(res.values(m, res.authors, more) for m in res.table.methods)
    head = ["method", "paper"] + (["authors' code"] if have_authors else []) + [f"ours ({res.scale})"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for m in res.table.methods:
        vals = list(res.values(m, metric=more).values())
        cells = [m, quote(paper.get(m), paper_sd.get(m))]
        if have_authors:
            cells.append(cell(list(res.values(m, res.authors, more).values()), metric, sd=False))
        lines.append("| " + " | ".join(cells + [cell(vals, metric)]) + " |")
    seeds = res.seeds(*[m for m in res.table.methods if res.values(m)])
    # rows of older records, without the config they ran with or their seconds, say so on the page
    unrecorded = [r for r in res.rows if not r.get("config") or r.get("seconds") is None]
    lines.append("")
    lines.append(f"{column.label}; {metric.label}; ours at scale `{res.scale}` ({ran(res)}), seeds "
                 f"{', '.join(map(str, seeds)) or '-'}" + (f"; the paper: {res.table.paper_seeds} seeds"
                                                          if res.table.paper_seeds else "")
                 + (f"; {len(unrecorded)} of our {len(res.rows)} rows are older records without the config they ran "
                    f"with or their seconds (`python -m simulations.provenance` lists them)" if unrecorded else "")
                 + ("; a smoke run: the pipeline only, no verdict" if res.scale == "smoke" else "") + ".")
    return "\n".join(lines)


def cell(values: list[float], metric: Metric, sd: bool = True) -> str:
    """Mean (± sd) of ``values`` in shown units; where some are ``math.inf`` (not reached), the mean of the
    others and how many seeds they are, "-" where none is finite."""
    finite = [v * metric.show for v in values if not math.isinf(v)]
    if not finite:
        return "-"
    shown = fmt(round(statistics.fmean(finite), 2),
                round(statistics.stdev(finite), 2) if sd and len(finite) > 1 else None)
    return shown if len(finite) == len(values) else f"{shown} ({len(finite)} of {len(values)} seeds)"


def brief(value: Any) -> str:
    """A claim record's numbers on one line: ``key value, key (nested ...)``."""
    if isinstance(value, dict):
        if not any(v not in ([], {}, None) for v in value.values()):  # nothing measured (no run yet)
            return "-"
        return ", ".join(f"{k} ({brief(v)})" if isinstance(v, dict) else f"{k} {brief(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(map(str, value))
    return "-" if value is None else str(value)


def verdict_word(holds: bool | None) -> str:
    return {True: "yes", False: "no", None: "-"}[holds]


def claims_table(paper: Paper, records: list[dict]) -> str:
    """The page's claims table: ours, the authors' code's and the paper's numbers side by side, whether the
    claim holds on ours and on the authors' code; then a line for each false claim without a reference
    verdict (why, and the command that would give one) and for each restated claim (its history)."""
    lines = ["| id | kind | holds | ours | authors' code | holds there | paper |", "|---|---|---|---|---|---|---|"]
    for r in records:
        ref = r["reference_code"] or {}
        theirs = (brief(ref["means"]) + (f" (seeds {brief(ref.get('seeds'))})" if ref.get("seeds") else "")
                  if "means" in ref else ref.get("code", "-"))
        seeds = f" (seeds {brief(r['seeds'])})" if r["seeds"] and "seeds" not in r["ours"] else ""
        lines.append(f"| `{r['id']}` | {r['kind']} | {verdict_word(r['holds'])} | {brief(r['ours'])}{seeds} | "
                     f"{theirs} | {verdict_word(r['reference_holds'])} | {brief(r['paper'])} |")
    declared = {c.id: c for c in paper.claims}
    notes = [f"- `{r['id']}`, no verdict on the authors' code: {r['reference_note']}"
             + (f"; to run: {r['reference_command']}" if r["reference_command"] else "")
             for r in records if r["holds"] is False and r["reference_holds"] is None]
    notes += [f"- `{r['id']}` restated: {declared[r['id']].history}" for r in records if declared[r["id"]].history]
    return "\n".join(lines + ([""] + notes if notes else []))


def plot(res: Results, path: Path) -> None:
    """The metric against rounds, mean over seeds per method (the paper's number as a dotted line)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if res.table.draw is not None:
        return res.table.draw(res, path)
    metric = res.table.metric
    if res.table.measure is not None or res.table.runs_of:  # one number a run, no curve of its own to draw
        return plot_measures(res, path)
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, m in enumerate(res.table.methods):
        curves = [r["curve"] for r in res.rows if r["method"] == m and r.get("curve")]
        if not curves:
            continue
        rounds = sorted(set.intersection(*[{p[0] for p in c} for c in curves]))
        means = [statistics.fmean(dict(map(tuple, c))[x] for c in curves) * metric.show for x in rounds]
        line, = ax.plot(rounds, means, label=m, color=f"C{i % 10}")
        if res.scale == "paper" and res.column.paper.get(m) is not None:
            ax.axhline(float(res.column.paper[m]), color=line.get_color(), linestyle=":", linewidth=0.8)
    finish_lines(fig, ax, "round", metric.label, f"{res.paper.name} {res.table_id}: {res.column.label} ({res.scale})",
                 path)


def finish_lines(fig, ax, xlabel: str, ylabel: str, title: str, path: Path) -> None:
    """Label, title, legend and grid a line plot, then save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def plot_measures(res: Results, path: Path) -> None:
    """A table of measures of the final model (``Table.measure``): one panel a metric, one bar a method (the
    mean over seeds, each seed a dot)."""
    import matplotlib.pyplot as plt

    names = [None, *res.table.more]
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        metric = res.table.metric_of(name)
        for i, m in enumerate(res.table.methods):
            vals = [v * metric.show for v in res.values(m, metric=name).values() if not math.isinf(v)]
            if vals:
                ax.bar(i, statistics.fmean(vals), color=f"C{i % 10}", alpha=0.7)
                ax.plot([i] * len(vals), vals, "k.", markersize=4)
        tilt = len(res.table.methods) > 4  # long names side by side overlap
        ax.set_xticks(range(len(res.table.methods)), list(res.table.methods), fontsize=8,
                      rotation=45 if tilt else 0, ha="right" if tilt else "center")
        ax.set_ylabel(metric.label, fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    fig.suptitle(f"{res.paper.name} {res.table_id}: {res.column.label} ({res.scale})", fontsize=9)
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


# <!-- table TABLE COLUMN SCALE [METRIC] -->: METRIC, one of the table's other metrics (``Table.more``)
MARKER = re.compile(r"<!-- table (\S+) (\S+) (\S+)( \S+)? -->\n.*?<!-- /table -->", re.S)


CLAIMS_MARKER = re.compile(r"<!-- claims -->\n.*?<!-- /claims -->", re.S)


def page(paper: Paper, text: str, records: list[dict] | None = None) -> str:
    """The page with every ``<!-- table TABLE COLUMN SCALE [METRIC] -->`` block rebuilt from the summaries,
    and its ``<!-- claims -->`` block from the claims' records."""
    def block(m: re.Match) -> str:
        more = m[4].strip() if m[4] else None
        return (f"<!-- table {m[1]} {m[2]} {m[3]}{m[4] or ''} -->\n"
                f"{markdown(results(paper, m[1], m[2], m[3]), more)}\n<!-- /table -->")
    text = MARKER.sub(block, text)
    records = claims(paper) if records is None else records
    return CLAIMS_MARKER.sub(lambda _: f"<!-- claims -->\n{claims_table(paper, records)}\n<!-- /claims -->", text)


def built(paper: Paper) -> dict[Path, str]:
    """The text files :func:`build` writes, path -> content."""
    records = claims(paper)
    out = {paper.folder / "claims.json": dumps(records)}
    readme = paper.folder / "README.md"
    if readme.exists():
        out[readme] = page(paper, readme.read_text(), records)
    return out


def plotted(paper: Paper) -> dict[Path, Results]:
    """The plot of each table: its first column with committed paper (else cpu) summaries that hold
    curves (summaries of runs whose curves were not recorded have none to draw)."""
    plots = {}
    for tid, table in paper.tables.items():
        for cid in table.columns:
            for scale in ("paper", "cpu"):
                res = results(paper, tid, cid, scale)
                if any(r.get("curve") for r in res.rows) and tid not in {p.stem for p in plots}:
                    plots[paper.folder / f"{tid}.png"] = res
    return plots


def build(paper: Paper, check: bool = False) -> list[str]:
    """Write (or with ``check`` compare) the paper's claims file, page tables and plots; returns what differs."""
    differs = []
    for path, text in built(paper).items():
        if not path.exists() or path.read_text() != text:
            differs.append(str(path.relative_to(ROOT)))
            if not check:
                path.write_text(text)
    if not check:
        for path, res in plotted(paper).items():
            plot(res, path)
    return differs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("papers", nargs="*", default=list(PAPERS), help=f"any of {', '.join(PAPERS)} (default: all)")
    p.add_argument("--check", action="store_true", help="say which built files differ; write nothing")
    args = p.parse_args(argv)
    differs = [d for name in args.papers for d in build(load(name), check=args.check)]
    for d in differs:
        print(("differs: " if args.check else "wrote: ") + d)
    if args.check and differs:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
