"""FedSMOO (Sun et al., ICML 2023): Table 1 and the claims this folder checks.

Table 1 reports the test accuracy (%) after 800 rounds of ResNet-18-GN, "calculated by 2 times", in 16
columns: CIFAR-10 / CIFAR-100, Dirichlet u in {0.6, 0.1} and pathological c classes per client, with 10% of
100 clients (upper part) and 5% of 200 clients (lower part) a round. Each column has its paper-scale
setting (``paper-<dataset>-<split>-<pct>pct-of-<clients>.toml``); two CIFAR-10 columns also have a cpu scale
(``reduced-cifar10-mlp-*.toml``: an MLP, 60 rounds, 1 local epoch).
"""

from __future__ import annotations

from collections.abc import Callable

from simulations.tables import Claim, Column, Metric, Paper, Results, Table, Verdict

# The paper's Table 1 methods in its row order, then FedSpeed (FedSMOO without the SAM correction: the
# ablation "dynamic regularization + SAM" of its Table 8).
METHODS = {m: {"strategy": m} for m in (
    "fedavg", "fedadam", "scaffold", "fedcm", "feddyn", "fedsam", "mofedsam", "fedspeed", "fedsmoo")}

SPLITS = {  # column id part -> label, in Table 1's column order
    "cifar10-dir0.6": "CIFAR-10, Dirichlet u = 0.6", "cifar10-dir0.1": "CIFAR-10, Dirichlet u = 0.1",
    "cifar10-path6": "CIFAR-10, pathological c = 6", "cifar10-path3": "CIFAR-10, pathological c = 3",
    "cifar100-dir0.6": "CIFAR-100, Dirichlet u = 0.6", "cifar100-dir0.1": "CIFAR-100, Dirichlet u = 0.1",
    "cifar100-path20": "CIFAR-100, pathological c = 20", "cifar100-path10": "CIFAR-100, pathological c = 10",
}
PARTICIPATION = {"10pct": ("10% of 100 clients", 100), "5pct": ("5% of 200 clients", 200)}

# Table 1, (mean, +/-) per method, in the order of SPLITS ("Our" is FedSMOO).
TABLE1_PAPER = {
    "10pct": {
        "fedavg": ((79.52, .13), (76.00, .18), (79.91, .17), (74.08, .22), (46.35, .15), (42.64, .22), (44.15, .17), (40.23, .31)),
        "fedadam": ((77.08, .31), (73.41, .33), (77.05, .26), (72.44, .29), (48.35, .17), (40.77, .31), (41.26, .30), (32.58, .22)),
        "scaffold": ((81.81, .17), (78.57, .14), (83.07, .10), (77.02, .18), (51.98, .23), (44.41, .15), (46.06, .22), (41.08, .24)),
        "fedcm": ((82.97, .21), (77.82, .16), (83.44, .17), (77.82, .19), (51.56, .20), (43.03, .26), (44.94, .14), (38.35, .27)),
        "feddyn": ((83.22, .18), (78.08, .19), (83.18, .17), (77.63, .14), (50.82, .19), (42.50, .28), (44.19, .19), (38.68, .14)),
        "fedsam": ((80.10, .12), (76.86, .16), (80.80, .23), (75.51, .24), (47.51, .26), (43.43, .12), (45.46, .29), (40.44, .23)),
        "mofedsam": ((84.13, .13), (78.71, .15), (84.92, .14), (79.57, .18), (54.38, .22), (44.85, .25), (47.42, .26), (41.17, .22)),
        "fedsmoo": ((84.55, .14), (80.82, .17), (85.39, .21), (81.58, .16), (53.92, .18), (46.48, .13), (48.87, .17), (44.10, .19)),
    },
    "5pct": {
        "fedavg": ((75.90, .21), (72.93, .19), (77.47, .34), (71.86, .34), (44.70, .22), (40.41, .33), (38.22, .25), (36.79, .32)),
        "fedadam": ((75.55, .38), (69.70, .32), (75.24, .22), (70.49, .26), (44.33, .26), (38.04, .25), (35.14, .16), (30.28, .28)),
        "scaffold": ((79.00, .26), (76.15, .15), (80.69, .21), (74.05, .31), (50.70, .18), (41.83, .29), (39.63, .31), (37.98, .36)),
        "fedcm": ((80.52, .29), (77.28, .22), (81.76, .24), (76.72, .25), (50.93, .31), (42.33, .19), (42.01, .17), (38.35, .24)),
        "feddyn": ((80.69, .23), (76.82, .17), (82.21, .18), (74.93, .22), (47.32, .18), (41.74, .21), (41.55, .18), (38.09, .27)),
        "fedsam": ((76.32, .16), (73.44, .14), (78.16, .27), (72.41, .29), (45.98, .27), (40.22, .27), (38.71, .23), (36.90, .29)),
        "mofedsam": ((82.58, .21), (78.43, .24), (84.46, .20), (79.93, .19), (53.51, .25), (42.22, .23), (42.77, .27), (39.81, .21)),
        "fedsmoo": ((82.94, .19), (79.76, .19), (84.82, .18), (81.01, .19), (53.45, .19), (45.83, .18), (44.70, .21), (43.41, .22)),
    },
}
TABLE8_FEDSPEED = {"cifar10-path3-10pct": (80.13, .11)}  # Table 8 is the CIFAR-10 pathological-3, 10%-100 column
REDUCED = {"cifar10-dir0.1-10pct": "reduced-cifar10-mlp-dir0.1-10pct-of-100.toml",
           "cifar10-path3-10pct": "reduced-cifar10-mlp-path3-10pct-of-100.toml"}


def column(split: str, part: str) -> tuple[str, Column]:
    cid = f"{split}-{part}"
    who, clients = PARTICIPATION[part]
    i = list(SPLITS).index(split)
    quoted = {m: TABLE1_PAPER[part][m][i] for m in TABLE1_PAPER[part]} | (
        {"fedspeed": TABLE8_FEDSPEED[cid]} if cid in TABLE8_FEDSPEED else {})
    settings = {"paper": f"paper-{split}-{part}-of-{clients}.toml"} | ({"cpu": REDUCED[cid]} if cid in REDUCED else {})
    return cid, Column(f"{SPLITS[split]}, {who}", settings,
                       paper={m: quoted[m][0] if m in quoted else None for m in METHODS},
                       paper_sd={m: v[1] for m, v in quoted.items()})


def reached(history: list[dict]) -> dict:
    """The first evaluated round at or above 30% and 35% central accuracy (None: not reached), and the
    training messages' bytes a round, each direction (the cpu page's rounds-to-target and traffic)."""
    evals = [(r["round"], r["central-accuracy"]) for r in history if r["round"] > 0 and "central-accuracy" in r]
    trained = [r for r in history if r["round"] > 0]
    return {"rounds_to": {str(t): next((rnd for rnd, acc in evals if acc >= t), None) for t in (0.3, 0.35)},
            "bytes_per_round": {d: round(sum(r[f"train-bytes-{d}"] for r in trained) / len(trained))
                                for d in ("down", "up")}}


TABLE1 = Table(
    title="Table 1, test accuracy (%) after the last round",
    metric=Metric("central-accuracy", "test accuracy (%)"),
    methods=METHODS,
    columns=dict(column(split, part) for part in PARTICIPATION for split in SPLITS),
    seeds={"paper": [20, 21], "cpu": [20, 21], "smoke": [20]},
    smoke={"num-server-rounds": 1, "num-clients": 10, "local-steps": 2, "eval-every": 1},
    paper_seeds=2,
    extra=reached,
)

# The reduced runs compare these seven (FedAdam and FedCM were not run at the cpu scale).
REDUCED_METHODS = ["fedavg", "scaffold", "feddyn", "fedsam", "mofedsam", "fedspeed", "fedsmoo"]


def first_and_last(top: str, bottom: str, among: list[str]) -> Callable[[Results], Verdict]:
    """``top`` has the highest and ``bottom`` the lowest mean of ``among``, on the seeds all of them ran."""
    def check(res: Results) -> Verdict:
        seeds = res.seeds(*among)
        if not seeds:
            return Verdict(False, {}, "no seed on which every method ran")
        means = {m: res.mean(m, seeds) for m in among}
        order = sorted(among, key=means.get, reverse=True)
        holds = order[0] == top and order[-1] == bottom
        return Verdict(holds, {m: res.shown(means[m]) for m in among},
                       f"order: {' > '.join(order)}" + ("" if holds else f" ({top} is #{order.index(top) + 1} "
                                                                        f"of {len(among)}, {order[-1]} last)"))
    return check


def recorded_means(res: Results) -> dict | None:
    """The authors' simulator on the same setting: its per-method means over the seeds it ran, as recorded
    (its per-seed values were not kept)."""
    if not res.authors:
        return None
    return {"code": "woodenchild95/FL-Simulator 502bec6 (fl_simulator_reduced.py)",
            "means": {m: res.shown(res.mean(m, authors=True)) for m in REDUCED_METHODS},
            "seeds": sorted({s for r in res.authors for s in r.get("seeds", [r["seed"]])})}


def ordering_claim(cid: str, claim_id: str) -> Claim:
    col = TABLE1.columns[cid]
    return Claim(
        claim_id, "learning",
        f"FedSMOO has the highest and FedAvg the lowest test accuracy of FedAvg, SCAFFOLD, FedDyn, FedSAM, MoFedSAM, "
        f"FedSpeed and FedSMOO (Table 1, {col.label}, 800 rounds of ResNet-18-GN); here at the cpu scale "
        f"(an MLP, 60 rounds, 1 local epoch).",
        first_and_last("fedsmoo", "fedavg", REDUCED_METHODS), "table1", cid,
        paper={m: col.paper[m] for m in REDUCED_METHODS if col.paper[m] is not None},
        reference=recorded_means)


PAPER = Paper(
    name="fedsmoo",
    title="FedSMOO",
    link="https://proceedings.mlr.press/v202/sun23h.html",
    tables={"table1": TABLE1},
    claims=[ordering_claim("cifar10-dir0.1-10pct", "table1-ordering"),
            ordering_claim("cifar10-path3-10pct", "table1-ordering-path3")],
)
