"""PeFLL (Scott, Zakerinia, Lampert, ICLR 2024): the tables and claims this folder reproduces (Tables 1, 2, 7
and 9; Figures 3, 5 and 6).

Table 1 reports, without label masking, the mean test accuracy of the clients seen in training (a)
and of new clients (b), which never trained and get their model from one descriptor (Algorithm 1).
A run of fedapp evaluates both from the same models, label-masked and unmasked, so one run fills
both halves: the table's metric is the seen clients' unmasked accuracy, ``more`` holds the new
clients' and the masked ones (Table 6's "+ LM"). The ``vs-authors`` table is our PeFLL beside the
authors' ``train.py`` after the same 100 steps (their runs: ``authors.json``).
"""

from __future__ import annotations

import statistics

from simulations.tables import Claim, Column, Metric, Paper, Results, Table, Verdict, ahead, printed, within

SEEN = Metric("fed-seen-unmasked-accuracy", "seen clients, test accuracy (%), unmasked")
MORE = {
    "new": Metric("fed-unseen-unmasked-accuracy", "new clients, test accuracy (%), unmasked"),
    "seen-masked": Metric("fed-seen-accuracy", "seen clients, test accuracy (%), label-masked"),
    "new-masked": Metric("fed-unseen-accuracy", "new clients, test accuracy (%), label-masked"),
}
METHODS = ("local", "fedavg", "perfedavg", "fedrep", "pfedme", "knnper", "pfedhn", "pefll")
LABELS = {"cifar10-100c": "CIFAR-10, 100 clients (90 seen / 10 new), 2 classes each",
          "cifar10-500c": "CIFAR-10, 500 clients (450 seen / 50 new), 2 classes each",
          "cifar10-1000c": "CIFAR-10, 1000 clients (900 seen / 100 new), 2 classes each",
          "cifar100-100c": "CIFAR-100, 100 clients (90 seen / 10 new), 10 classes each",
          "cifar100-500c": "CIFAR-100, 500 clients (450 seen / 50 new), 10 classes each",
          "cifar100-1000c": "CIFAR-100, 1000 clients (900 seen / 100 new), 10 classes each",
          "femnist": "FEMNIST, 3597 writers (90% seen / 10% new)"}
# Table 1 (a) seen and (b) new clients, % (mean±sd over 3 seeds), one row a method (in LABELS' column order),
# the methods fedapp implements: at the source's precision, the \numprint values behind the one decimal the
# paper shows (89.0 ± 0.8 is the source's 88.96 ± 0.84), digit for digit; Table 1 (a)'s PeFLL CIFAR-100 cells,
# plain one decimal there, from the same numbers' \numprint in Table 6 (56.0 ± 0.34); (b)'s Local row has none
SEEN_ROWS = {
    "local": printed("82.24±0.63 70.87±0.50 65.51±0.69 39.40±0.17 19.66±0.21 11.34±0.09 62.18±0.10"),
    "fedavg": printed("47.53±0.48 50.39±0.62 51.86±0.67 16.44±0.37 20.19±0.09 20.22±0.22 82.05±0.20"),
    "perfedavg": printed("79.09±2.07 76.90±0.92 76.60±0.31 40.01±0.34 31.48±0.21 20.52±0.12 82.73±0.94"),
    "fedrep": printed("84.55±0.78 79.23±0.63 77.30±0.26 42.67±0.80 35.48±0.74 30.79±0.47 83.63±0.78"),
    "pfedme": printed("83.89±1.16 79.02±1.98 80.39±0.86 39.61±0.54 40.48±0.41 34.64±0.21 85.88±0.82"),
    "knnper": printed("84.02±0.27 81.96±0.52 79.87±0.72 42.20±0.91 38.06±0.41 34.50±0.52 85.17±0.25"),
    "pfedhn": printed("87.76±0.51 77.43±1.27 65.99±1.13 53.60±0.17 25.52±0.31 19.95±1.19 83.81±0.29"),
    "pefll": printed("88.96±0.84 88.88±0.38 87.78±0.41 56.0±0.34 43.2±0.79 40.9±0.60 90.12±0.05"),
}
NEW_ROWS = {
    "local": printed("81.6±0.7 70.6±1.8 65.5±0.5 38.7±0.9 19.9±1.1 11.0±0.5 62.1±0.2"),
    "fedavg": printed("48.60±0.28 49.57±1.03 51.70±0.71 17.07±0.86 19.30±1.99 20.53±0.97 81.85±0.36"),
    "perfedavg": printed("77.60±1.90 69.03±2.53 67.25±0.75 35.60±1.50 30.60±0.40 20.50±0.50 81.13±1.50"),
    "fedrep": printed("81.75±1.01 77.40±1.69 76.03±0.34 38.63±1.12 35.93±1.51 31.83±1.59 82.83±0.69"),
    "pfedme": printed("78.40±2.24 74.30±1.35 72.30±1.70 31.10±1.37 32.30±0.50 28.90±0.22 86.13±0.35"),
    "knnper": printed("82.43±0.73 80.83±1.51 78.40±1.13 41.77±1.23 37.20±1.95 33.73±0.73 84.55±0.64"),
    "pfedhn": printed("63.33±3.67 60.87±2.37 57.83±2.04 24.10±1.20 21.50±1.42 20.83±1.18 82.52±0.13"),
    "pefll": printed("89.30±2.16 88.93±0.62 88.53±0.25 35.17±1.43 38.10±0.41 38.37±0.90 90.68±0.21"),
}
FL_BENCH = ("perfedavg", "pfedme", "knnper")  # the baselines PeFLL ran from FL-bench's code
PAPER_SEEN, PAPER_NEW = ({cid: {m: cells[i] for m, cells in rows.items()} for i, cid in enumerate(LABELS)}
                          for rows in (SEEN_ROWS, NEW_ROWS))


def quoted(*methods: str) -> dict[str, dict[str, str]]:
    """The claims' quotes: Table 1's means of ``methods`` on CIFAR-10 with 100 clients, seen and new."""
    return {part: {m: table["cifar10-100c"][m][0] for m in methods}
            for part, table in (("seen", PAPER_SEEN), ("new", PAPER_NEW))}
# Table 6, PeFLL + LM (label masking): seen and new clients, % (mean±sd, its \numprint values); CIFAR only
PAPER_LM = {cid: tuple(printed(cells)) for cid, cells in {
    "cifar10-100c": "88.90±0.69 88.90±2.40",
    "cifar10-500c": "88.94±0.31 88.23±0.93",
    "cifar10-1000c": "88.42±0.37 87.43±1.25",
    "cifar100-100c": "59.46±0.74 55.60±1.63",
    "cifar100-500c": "53.23±0.62 53.37±0.12",
    "cifar100-1000c": "51.38±0.25 51.10±0.24",
}.items()}



def column(cid: str, cpu: str | None = None) -> Column:
    """A Table 1 column: the paper's 5000-step files, the cpu setting where the repository has one."""
    settings = {"paper": f"table1-{cid}/{{method}}.toml"} | ({"cpu": cpu} if cpu else {})
    more = {"new": PAPER_NEW[cid]} | {
        name: {"pefll": lm} for name, lm in zip(("seen-masked", "new-masked"), PAPER_LM.get(cid, ()))}
    return Column(LABELS[cid], settings, paper={m: v for m, (v, _) in PAPER_SEEN[cid].items()},
                  paper_sd={m: sd for m, (_, sd) in PAPER_SEEN[cid].items()},
                  paper_more={k: {m: v for m, (v, _) in t.items()} for k, t in more.items()},
                  paper_more_sd={k: {m: sd for m, (_, sd) in t.items()} for k, t in more.items()})


# one run-config file per method holds the whole setting, so a method adds nothing on top of it
SMOKE = {"num-server-rounds": 2, "num-clients": 10, "eval-every": 2, "local-epochs": 1, "pefll.k": 2,
         "pfedhn.k": 2, "pfedhn.new-client-rounds": 1, "fedrep.head-epochs": 1, "fedrep.new-head-epochs": 1,
         "pfedme.new-epochs": 1}
TABLE1 = Table(
    title="Table 1, test accuracy (%) without label masking, seen and new clients",
    metric=SEEN, more=MORE,
    methods={m: {} for m in METHODS},
    columns={"cifar10-100c": column("cifar10-100c", cpu="cifar10-100c-authors/{method}.toml"),
             **{c: column(c) for c in LABELS if c != "cifar10-100c"}},
    seeds={"paper": [0, 1, 2], "cpu": [0, 1], "smoke": [0]},
    smoke={**SMOKE, "local-steps": 2},
    paper_seeds=3,
)

VS_AUTHORS = Table(
    title="PeFLL beside the authors' train.py after 100 steps",
    metric=SEEN, more=MORE,
    # the authors' configuration (cifar10-100c-authors/pefll.toml) stopped at their run's 100 steps
    methods={"pefll": {"num-server-rounds": 100}},
    columns={"cifar10-100c": Column(LABELS["cifar10-100c"] + ", 100 steps",
                                    {"cpu": "cifar10-100c-authors/{method}.toml"})},
    seeds={"cpu": list(range(10)), "smoke": [0]},
    smoke=SMOKE,
)


PAPER_SETTINGS = Table(
    title="PeFLL in the paper's own settings after 100 steps",
    metric=SEEN, more=MORE,
    # cifar10-100c-authors/pefll-paper.toml (Algorithm 2, Appendix A.2), stopped where the vs-authors
    # table stops the authors' configuration (pefll.toml)
    methods={"pefll-paper": {"num-server-rounds": 100, "eval-every": 25}},
    columns={"cifar10-100c": Column(LABELS["cifar10-100c"] + ", 100 steps",
                                    {"cpu": "cifar10-100c-authors/{method}.toml"})},
    seeds={"cpu": [0], "smoke": [0]},
    smoke=SMOKE,
)


# Table 2: new clients with only unlabeled data. PeFLL's embedding network reads the images alone
# (``pefll.embedding = "unlabeled"``), so a new client's descriptor needs no label; FedAvg's one global model is
# the alternative. Table 2's FedAvg cell is Table 1's new-client FedAvg (its \numprint 48.60 ± 0.28); PeFLL's
# is its own run, bold one decimal (no \numprint behind it).
TABLE2 = Table(
    title="Table 2, new clients with only unlabeled data: test accuracy (%), unmasked",
    metric=MORE["new"], more={"seen": SEEN},
    methods={"fedavg": {}, "pefll": {"pefll.embedding": "unlabeled"}},
    columns={"cifar10-100c": Column(LABELS["cifar10-100c"] + "; new clients unlabeled",
                                    {"cpu": "cifar10-100c-authors/{method}.toml"},
                                    paper={"fedavg": "48.60", "pefll": "84.5"},
                                    paper_sd={"fedavg": "0.28", "pefll": "0.6"})},
    seeds={"paper": [0, 1, 2], "cpu": [0, 1], "smoke": [0]},
    smoke={**SMOKE, "local-steps": 2},
    paper_seeds=3,
)


# Tables 7 and 9, the ablations (Appendix A.5) on CIFAR-10 with 100 clients (the paper also runs 500 and 1000
# clients and CIFAR-100), at Table 1's cpu setting: the hypernetwork's hidden layers (S 1, M 3, L 5; Table 5's
# network has 4) and the embedding network (a one-hidden-layer MLP on image and label, or the LeNet CNN). Their
# accuracies are label-masked: M's and CNN's 88.9 ± 0.7 is Table 6's PeFLL + LM, 88.90 ± 0.69 (quoted so).
ABLATION_MORE = {"seen": SEEN, "new-masked": MORE["new-masked"]}
TABLE7 = Table(
    title="Table 7, test accuracy (%) of seen clients, label-masked, against the hypernetwork's size",
    metric=MORE["seen-masked"], more=ABLATION_MORE,
    methods={size: {"pefll.hyper-layers": n} for size, n in (("S", 1), ("M", 3), ("L", 5))},
    columns={"cifar10-100c": Column(LABELS["cifar10-100c"], {"cpu": "cifar10-100c-authors/pefll.toml"},
                                    paper={"S": "88.7", "M": "88.90", "L": "88.7"},
                                    paper_sd={"S": "0.3", "M": "0.69", "L": "0.8"})},
    seeds={"paper": [0, 1, 2], "cpu": [0], "smoke": [0]},
    smoke={**SMOKE, "local-steps": 2},
    paper_seeds=3,
)
TABLE9 = Table(
    title="Table 9, test accuracy (%) of seen clients, label-masked, against the embedding network",
    metric=MORE["seen-masked"], more=ABLATION_MORE,
    methods={"mlp": {"pefll.embedding": "mlp"}, "cnn": {"pefll.embedding": "cnn"}},
    columns={"cifar10-100c": Column(LABELS["cifar10-100c"], {"cpu": "cifar10-100c-authors/pefll.toml"},
                                    paper={"mlp": "88.5", "cnn": "88.90"}, paper_sd={"mlp": "1.2", "cnn": "0.69"})},
    seeds={"paper": [0, 1, 2], "cpu": [0], "smoke": [0]},
    smoke={**SMOKE, "local-steps": 2},
    paper_seeds=3,
)


def spread_at_most(points: float, *methods: str):
    """The means of ``methods`` lie within ``points`` of each other (shown units), on the seeds all ran."""
    def check(res: Results) -> Verdict:
        seeds = res.seeds(*methods)
        if not seeds:
            return Verdict(False, {}, "no seed on which every method ran")
        means = {m: res.shown(res.mean(m, seeds)) for m in methods}
        spread = round(max(means.values()) - min(means.values()), 2)
        return Verdict(spread <= points, means | {"spread": spread, "seeds": seeds},
                       f"spread {spread} points (asked: at most {points})")
    return check


def traffic_curves(history: list[dict]) -> dict:
    """Figures 5 and 6: the new clients' curve beside the seen clients', and the training traffic
    (bytes both ways, summed since round 1) at each evaluated round."""
    sent, total = {}, 0
    for r in history:
        total += r.get("train-bytes-down", 0) + r.get("train-bytes-up", 0)
        sent[r["round"]] = total
    new = SHAKESPEARE_MORE["new"].curve(history)
    return {"curve_more": {"new": new}, "train_bytes": [[rnd, sent[rnd]] for rnd, _ in new]}


SHAKESPEARE_SEEN = Metric("fed-seen-accuracy", "seen clients, next-character test accuracy (%)")
SHAKESPEARE_MORE = {"new": Metric("fed-unseen-accuracy", "new clients, next-character test accuracy (%)")}
SHAKESPEARE = Table(
    title="Figures 5 and 6: Shakespeare next-character prediction, seen and new clients",
    metric=SHAKESPEARE_SEEN, more=SHAKESPEARE_MORE,
    methods={m: {} for m in ("fedavg", "fedrep", "pefll")},
    # the figures are plots: the paper gives no number to set beside ours
    columns={"roles": Column("Shakespeare (LEAF's next-character task), speaking roles as clients",
                             {"cpu": "shakespeare/{method}.toml"})},
    seeds={"cpu": [0], "smoke": [0]},
    smoke={**SMOKE, "num-clients": 8, "eval-every": 1},
    extra=traffic_curves,
)


# --- the claims' checks --------------------------------------------------------------------------

def seen_and_new(res: Results, method: str) -> tuple[list[int], float | None, float | None]:
    """The seeds on which ``method`` has seen and new accuracies, and their means there (shown units)."""
    seeds = sorted(set(res.seeds(method)) & set(res.seeds(method, metric="new")))
    if not seeds:
        return [], None, None
    return seeds, res.shown(res.mean(method, seeds)), res.shown(res.mean(method, seeds, metric="new"), "new")


def new_vs_seen(method: str, within: float | None = None, drop: float | None = None):
    """``method``'s new clients are within ``within`` points of its seen ones, or (``drop``) at least
    ``drop`` points below them."""
    def check(res: Results) -> Verdict:
        seeds, seen, new = seen_and_new(res, method)
        if not seeds:
            return Verdict(False, {}, f"no run of {method}")
        gap = round(new - seen, 2)
        holds = abs(gap) <= within if within is not None else -gap >= drop
        asked = f"at most {within} apart" if within is not None else f"new at least {drop} below seen"
        return Verdict(holds, {"seen": seen, "new": new, "new - seen": gap, "seeds": seeds},
                       f"new - seen = {gap} points (asked: {asked})")
    return check


def on_seeds(check, *methods: str):
    """``check`` with the seeds its methods share in its verdict (the claims file's ``seeds`` are those of
    every method of the table)."""
    def checked(res: Results) -> Verdict:
        v = check(res)
        return Verdict(v.holds, v.ours | {"seeds": res.seeds(*methods)}, v.note)
    return checked


def all_of(**checks):
    """One claim over several checks (seen and new clients, several baselines): holds if every one does."""
    def check(res: Results) -> Verdict:
        verdicts = {name: c(res) for name, c in checks.items()}
        return Verdict(all(v.holds for v in verdicts.values()), {n: v.ours for n, v in verdicts.items()},
                       "; ".join(f"{n}: {v.note}" for n, v in verdicts.items()))
    return check


def agrees_with_authors(points: float, *metrics: str | None, same_seeds: bool = False):
    """Our mean is within ``points`` of the authors' code's on every one of ``metrics`` (None: the table's).
    Each side averages the seeds on which it has every metric (the two codes draw different splits for
    one seed, so a seed pairs nothing); ``same_seeds``: only the seeds both sides have."""
    def check(res: Results) -> Verdict:
        def seeds(rows: list[dict]) -> set[int]:
            return set.intersection(*[set(res.values("pefll", rows, m)) for m in metrics])
        ours_seeds, their_seeds = seeds(res.rows), seeds(res.authors)
        if same_seeds:
            ours_seeds = their_seeds = ours_seeds & their_seeds
        if not ours_seeds or not their_seeds:
            return Verdict(False, {}, "no seed on which both codes ran" if same_seeds else "no run on one side")
        out, gaps = {"seeds": sorted(ours_seeds), "authors' seeds": sorted(their_seeds)}, []
        for m in metrics:
            ours = res.shown(res.mean("pefll", sorted(ours_seeds), metric=m), m)
            theirs = res.shown(res.mean("pefll", sorted(their_seeds), authors=True, metric=m), m)
            gaps.append(round(ours - theirs, 2))
            out[m or "seen"] = {"ours": ours, "authors": theirs, "gap": gaps[-1]}
        worst = max(abs(g) for g in gaps)
        return Verdict(worst <= points, out, f"largest gap {worst} points, {len(ours_seeds)} seeds ours, "
                                             f"{len(their_seeds)} theirs (asked: at most {points})")
    return check


def authors_runs(*metrics: str | None):
    """The authors' code's means over every seed it ran with ``metrics`` (the claim's reference)."""
    def reference(res: Results) -> dict | None:
        seeds = sorted(set.intersection(*[set(res.values("pefll", res.authors, m)) for m in metrics]))
        if not seeds:
            return None
        return {"means": {m or "seen": res.shown(res.mean("pefll", seeds, authors=True, metric=m), m)
                          for m in metrics}, "seeds": seeds,
                "command": "python simulations/pefll/authors_runs.py run --seeds S"
                           + (" --masked" if "seen-masked" in metrics else "")}
    return reference


UNMASKED, MASKED = (None, "new"), ("seen-masked", "new-masked")
# The reference codes at Table 1's cpu setting (400 steps, seeds 0 and 1): the authors' train.py for PeFLL,
# FL-bench (KarhouTam/FL-bench 06e658b, whose code the paper's baselines build on) for the others
REFERENCE_TABLE1 = ("python simulations/pefll/authors_runs.py run --steps 400 --seeds 0 1 --out OUT; FL-bench "
                    "06e658b's main.py with method {methods} on the same split (100 clients, 2 classes each), 400 rounds, "
                    "seeds 0 1")
PAPER = Paper(
    name="pefll",
    title="PeFLL",
    link="https://proceedings.iclr.cc/paper_files/paper/2024/hash/"
         "8957cfb29ae633d6e8c3615be038d4d6-Abstract-Conference.html",
    tables={"table1": TABLE1, "table2": TABLE2, "table7": TABLE7, "table9": TABLE9, "vs-authors": VS_AUTHORS,
            "paper-settings": PAPER_SETTINGS, "shakespeare": SHAKESPEARE},
    claims=[
        Claim("seen-over-fedavg", "learning",
              "PeFLL's seen clients are at least 20 points more accurate than FedAvg's (CIFAR-10, 100 clients, "
              "2 classes per client, no label masking).",
              on_seeds(ahead("pefll", "fedavg", by=20), "pefll", "fedavg"), "table1", "cifar10-100c",
              paper=quoted("pefll", "fedavg")["seen"], methods=("pefll", "fedavg"),
              reference_run=REFERENCE_TABLE1.format(methods="fedavg")),
        Claim("unseen-close-to-seen", "learning",
              "PeFLL's new clients (never trained on) are within 5 points of its seen clients and at least 20 "
              "points more accurate than FedAvg's new clients (no label masking): close to seen because "
              "personalised, not because no client is.",
              on_seeds(all_of(**{"new vs seen": new_vs_seen("pefll", within=5),
                                 "new over fedavg": ahead("pefll", "fedavg", by=20, metric="new")}), "pefll", "fedavg"),
              "table1", "cifar10-100c",
              paper={"seen": quoted("pefll")["seen"]["pefll"], "new": quoted("pefll")["new"]["pefll"],
                     "fedavg new": quoted("fedavg")["new"]["fedavg"]},
              methods=("pefll", "fedavg"), reference_run=REFERENCE_TABLE1.format(methods="fedavg"),
              history="until 2026-12-07 it asked only that PeFLL's new clients be within 5 points of its seen ones, "
                      "which FedAvg's one global model passes too (new - seen +0.10); restated on 2026-12-07, with "
                      "the seeds 0-1 runs known, to also ask 20 points over FedAvg's new clients."),
        Claim("pfedhn-unseen-drop", "learning",
              "pFedHN's new clients (a random embedding fitted for 20 rounds) are at least 10 points less "
              "accurate than its seen ones.",
              new_vs_seen("pfedhn", drop=10), "table1", "cifar10-100c",
              paper={part: q["pfedhn"] for part, q in quoted("pfedhn").items()}, methods=("pfedhn",),
              reference_run=REFERENCE_TABLE1.format(methods="pfedhn")),
        Claim("table1-ordering-fedrep-local", "learning",
              "PeFLL is more accurate than FedRep and than Local, on seen and on new clients (Table 1, CIFAR-10, "
              "100 clients, no label masking), at the steps of our runs.",
              on_seeds(all_of(**{f"{who} {m or 'seen'}": ahead("pefll", who, metric=m)
                                 for m in UNMASKED for who in ("fedrep", "local")}), "pefll", "fedrep", "local"),
              "table1", "cifar10-100c",
              paper=quoted("pefll", "fedrep", "local"), methods=("pefll", "fedrep", "local"),
              reference_run=REFERENCE_TABLE1.format(methods="fedrep and local")),
        Claim("table1-ordering-fl-bench-baselines", "learning",
              "PeFLL is more accurate than Per-FedAvg, pFedMe and kNN-Per, on seen and on new clients (Table 1, "
              "CIFAR-10, 100 clients, no label masking), at the steps of our runs.",
              on_seeds(all_of(**{f"{who} {m or 'seen'}": ahead("pefll", who, metric=m)
                                 for m in UNMASKED for who in FL_BENCH}), "pefll", *FL_BENCH),
              "table1", "cifar10-100c",
              paper=quoted("pefll", *FL_BENCH),
              methods=("pefll", *FL_BENCH), reference_run=REFERENCE_TABLE1.format(methods="perfedavg, pfedme, knnper")),
        Claim("unlabeled-new-over-fedavg", "learning",
              "New clients with only unlabeled data (PeFLL's embedding network reads the images alone) get PeFLL "
              "models at least 20 points more accurate than FedAvg's global model (Table 2, CIFAR-10, 90 training "
              "clients: 84.5 against 48.60), at the steps of our runs.",
              on_seeds(ahead("pefll", "fedavg", by=20), "pefll", "fedavg"), "table2", "cifar10-100c",
              paper={"pefll": "84.5", "fedavg": "48.60"}, methods=("pefll", "fedavg"),
              reference_run="python simulations/pefll/authors_runs.py run --steps 400 --seeds 0 1 --out OUT with their "
                            "train.py's --embed-y False (the embedding reads the images alone); FL-bench 06e658b's "
                            "main.py with method fedavg on the same split (100 clients, 2 classes each), 400 rounds, "
                            "seeds 0 1"),
        Claim("hypernetwork-size-matters-little", "learning",
              "On CIFAR-10 the three hypernetwork sizes give similar accuracy (Table 7, 100 clients: S 88.7, M 88.90, "
              "L 88.7), read as label-masked seen-client means within 2 points of each other, at our runs' steps.",
              spread_at_most(2.0, "S", "M", "L"), "table7", "cifar10-100c", methods=("S", "M", "L"),
              reference_run="python simulations/pefll/authors_runs.py run --masked --steps 400 --seeds 0 --out OUT "
                            "with their train.py's --hyper-nhid 1, 3 and 5 (a run each)"),
        Claim("cnn-embedding-over-mlp", "learning",
              "The CNN embedding network outperforms the one-hidden-layer MLP (Table 9, CIFAR-10, 100 clients: 88.90 "
              "against 88.5), seen clients, label-masked, at the steps of our runs.",
              on_seeds(ahead("cnn", "mlp"), "cnn", "mlp"), "table9", "cifar10-100c", methods=("cnn", "mlp"),
              reference_run="none of the paper's MLP exists: their train.py's --embed-model mlp is linear in the label "
                            "alone (our `label`); their CNN side: python simulations/pefll/authors_runs.py run --masked "
                            "--steps 400 --seeds 0 --out OUT"),
        Claim("shakespeare-above-baselines", "learning",
              "On Shakespeare, PeFLL's seen and new clients are more accurate than FedAvg's and FedRep's at equal "
              "training steps (Figure 5: \"PeFLL outperforms all baselines\"), at the last step of our runs.",
              on_seeds(all_of(**{f"{who} {m or 'seen'}": ahead("pefll", who, metric=m)
                                 for m in (None, "new") for who in ("fedavg", "fedrep")}), "pefll", "fedavg", "fedrep"),
              "shakespeare", "roles", paper={}, methods=("pefll", "fedavg", "fedrep"),
              reference_run="none exists: the authors' train.py loads CIFAR-10/100 only (no Shakespeare, no LSTM) and "
                            "FL-bench 06e658b has no PeFLL; FL-bench's main.py with method fedavg and fedrep on our "
                            "speaking-role clients would give the baselines' side only"),
        Claim("matches-authors-code", "learning",
              "Our PeFLL in the authors' configuration is within 5 points of the authors' train.py after the same "
              "100 steps, seen and new clients, without label masking (Table 1's evaluation); each side's mean "
              "over its seeds (each code draws its own split for a seed, from the same recipe).",
              agrees_with_authors(5, *UNMASKED), "vs-authors", "cifar10-100c", paper={},
              reference=authors_runs(*UNMASKED), versus_reference=True,
              reference_run="python simulations/pefll/authors_runs.py run --seeds S --out OUT, then condense OUT"),
        Claim("matches-authors-code-masked", "learning",
              "The same with label masking (the authors' code's default evaluation), on the seeds on which "
              "both codes were evaluated masked.",
              agrees_with_authors(5, *MASKED, same_seeds=True), "vs-authors", "cifar10-100c", paper={},
              reference=authors_runs(*MASKED), versus_reference=True,
              reference_run="python simulations/pefll/authors_runs.py run --masked --seeds S --steps 100 "
                            "--eval-every 50 --out OUT, then condense OUT (their masked runs: seeds 0, 1, 42)"),
    ],
)
