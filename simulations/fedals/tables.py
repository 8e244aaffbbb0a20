"""FedALS (Gholami and Seferoglu): the tables and claims this folder reproduces.

Every accuracy is the paper's reading (Section 7, Appendix E): the test accuracy of the average of all
client models, mean of the last 5 evaluations (every 100 iterations, i.e. every 20 rounds of tau = 5
local steps), whatever the length of the run. Table 1 and Table 2 list 5 clients, ResNet-20, tau = 5;
the paper repeats each experiment 20 times. The cpu scale is CIFAR-10 at 2000 iterations (400 rounds)
instead of 2x10^4, each method at the lr its Appendix E.3 probes picked (``lr-tuning/``, written into
the per-method settings ``cpu/<column>/<method>.toml``).
"""

from __future__ import annotations

from simulations.tables import Claim, Column, Metric, Paper, Results, Table, Verdict, ahead, printed

ACCURACY = Metric("central-accuracy", "test accuracy (%), mean of the last 5 evaluations", reduce="mean-last-5")
METHODS = {m: f"methods/{m}.toml" for m in ("fedavg", "fedals", "scaffold", "fedals-scaffold", "fedals-scaffold-authors")}
# the pipeline in seconds: synthetic data and an MLP (a ResNet-20 evaluation alone takes seconds on a CPU core),
# 5 rounds of one local step, each evaluated (the metric reads the last 5 evaluations)
SMOKE = {"dataset": "synthetic", "model": "mlp", "num-server-rounds": 5, "local-steps": 1, "eval-every": 1,
         "checkpoint-every": 0}
SEEDS = {"paper": list(range(20)), "cpu": [0, 1, 2], "smoke": [0]}


def params_per_client(history: list[dict]) -> dict:
    """Parameters one client sent and received over the run (the records count BatchNorm running
    statistics with the body; every client takes part in every round)."""
    last = history[-1]
    clients = max(r.get("replies", 0) for r in history) or 1
    return {"params-per-client": (last.get("total-train-params-down", 0) + last.get("total-train-params-up", 0))
            / clients}


def table1_column(dataset: str, split: str, paper: dict, sd: dict, cpu: bool = False) -> Column:
    name = "IID" if split == "iid" else "non-IID"
    label = {"mnist": "MNIST", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "svhn": "SVHN"}[dataset]
    settings = {"paper": f"table1-{dataset}-{split}.toml"}
    if cpu:
        settings["cpu"] = f"cpu/{dataset}-{split}/{{method}}.toml"
    return Column(f"ResNet-20 on {label}, {name}, 5 clients, tau = 5, alpha = 10", settings, paper, sd)


def numbers(methods, row: str) -> tuple[dict, dict]:
    """The paper's numbers of ``methods`` from one row, mean±sd each as the paper prints them times 100
    (``"46.51±0.71"`` is its 0.4651±0.0071): (means, sds) by method."""
    cells = dict(zip(methods, printed(row), strict=True))
    return {m: v for m, (v, _) in cells.items()}, {m: sd for m, (_, sd) in cells.items()}


def iid(row: str) -> tuple[dict, dict]:
    """A Table 1 IID column: FedAvg and FedALS only."""
    return numbers(("fedavg", "fedals"), row)


def noniid(row: str) -> tuple[dict, dict]:
    """A Table 1 non-IID column: FedAvg, FedALS, SCAFFOLD, FedALS + SCAFFOLD."""
    return numbers(("fedavg", "fedals", "scaffold", "fedals-scaffold"), row)


# Table 1 as printed in the longer version (four decimals), times 100
TABLE1 = Table(
    title="Table 1, ResNet-20 test accuracy (%), 5 clients, tau = 5, alpha = 10",
    metric=ACCURACY,
    methods=METHODS,
    columns={
        "cifar10-noniid": table1_column("cifar10", "noniid", *noniid("46.51±0.71 52.24±3.65 45.38±7.06 51.21±0.98"),
                                        cpu=True),
        "cifar10-iid": table1_column("cifar10", "iid", *iid("87.61±0.91 88.65±0.21"), cpu=True),
        "svhn-noniid": table1_column("svhn", "noniid", *noniid("70.10±3.30 81.17±2.14 71.80±4.016 80.97±2.71")),
        "svhn-iid": table1_column("svhn", "iid", *iid("94.76±0.16 95.41±0.21")),
        "cifar100-noniid": table1_column("cifar100", "noniid", *noniid("41.77±1.43 48.63±2.24 41.24±1.83 48.20±1.29")),
        "cifar100-iid": table1_column("cifar100", "iid", *iid("59.99±0.68 61.20±0.52")),
        "mnist-noniid": table1_column("mnist", "noniid", *noniid("79.67±6.35 82.08±3.63 81.21±5.46 78.27±11.84")),
        "mnist-iid": table1_column("mnist", "iid", *iid("99.06±0.01 99.14±0.01")),
    },
    seeds=SEEDS,
    smoke=SMOKE,
    paper_seeds=20,
    extra=params_per_client,
)

ALPHAS = (1, 5, 10, 25, 50, 100)
# Table 2: FedALS with alpha = 1 (FedAvg) to 100; ours on CIFAR-10 at the lr FedALS's probes picked (FedAvg's too)
TABLE2 = Table(
    title="Table 2, ResNet-20 test accuracy (%) against alpha, non-IID, tau = 5",
    metric=ACCURACY,
    methods={f"alpha{a}": {"strategy": "fedals", "fedals.alpha": a} for a in ALPHAS},
    columns={
        "cifar10-noniid": Column(
            "ResNet-20 on CIFAR-10, non-IID, 5 clients, tau = 5",
            {"paper": "table2-cifar10-noniid.toml", "cpu": "cpu/cifar10-noniid/fedals.toml"},
            *numbers([f"alpha{a}" for a in ALPHAS],
                    "46.51±0.71 52.01±3.02 52.24±3.65 38.14±6.41 28.53±6.41 28.17±3.2")),
        "svhn-noniid": Column(
            "ResNet-20 on SVHN, non-IID, 5 clients, tau = 5",
            {"paper": "table1-svhn-noniid.toml"},
            *numbers([f"alpha{a}" for a in ALPHAS],
                    "70.10±3.30 81.07±2.78 81.17±2.14 72.01±15.65 63.77±5.20 58.37±7.15")),
    },
    seeds=SEEDS,
    smoke=SMOKE,
    paper_seeds=20,
    extra=params_per_client,
)

# The same sweep after 150 iterations (30 rounds, evaluated every 10), the authors' code's FedALS beside;
# read at the last evaluation (iteration 150).
TABLE2_150 = Table(
    title="Table 2's sweep after 150 iterations, test accuracy (%) at iteration 150",
    metric=Metric("central-accuracy", "test accuracy (%) at the last evaluation (iteration 150)"),
    methods={f"alpha{a}": {"strategy": "fedals", "fedals.alpha": a} for a in (1, 5, 10, 25)},
    columns={"cifar10-noniid": Column("ResNet-20 on CIFAR-10, non-IID, 150 iterations",
                                      {"cpu": "cpu/cifar10-noniid-150it.toml"})},
    seeds={"cpu": [0], "smoke": [0]},
    smoke=SMOKE,
    extra=params_per_client,
)

# Table 3: the body phi = the first L of the authors' 20 layer groups (a shortcut conv belongs to its block's
# second conv); L = 20 leaves no head, so it is FedAvg with alpha tau = 50 local steps (and as many iterations)
LAYERS = (20, 16, 12, 8, 4, 1)
TABLE3 = Table(
    title="Table 3, ResNet-20 test accuracy (%) against L, the layers in the body, non-IID, tau = 5, alpha = 10",
    metric=ACCURACY,
    methods={"L20": {"strategy": "fedals", "fedals.alpha": 1, "local-steps": 50, "num-server-rounds": 400,
                     "eval-every": 2},
             **{f"L{n}": {"strategy": "fedals", "fedals.layer-groups": "authors", "fedals.body-layers": n}
                for n in LAYERS[1:]}},
    columns={
        "svhn-noniid": Column("ResNet-20 on SVHN, non-IID", {"paper": "table1-svhn-noniid.toml"},
                              *numbers([f"L{n}" for n in LAYERS],
                                      "69.91±1.60 71.12±4.71 67.60±4.74 63.81±4.28 63.39±4.46 60.58±1.97")),
        "cifar10-noniid": Column("ResNet-20 on CIFAR-10, non-IID", {"paper": "table3-cifar10-noniid.toml"},
                                 *numbers([f"L{n}" for n in LAYERS],
                                         "43.83±4.23 46.87±1.11 41.25±2.83 37.79±3.451 37.30±3.10 40.13±3.08")),
        "cifar100-noniid": Column("ResNet-20 on CIFAR-100, non-IID", {"paper": "table1-cifar100-noniid.toml"},
                                  *numbers([f"L{n}" for n in LAYERS],
                                          "47.81±1.23 47.82±0.87 42.49±1.43 40.85±0.94 41.83±1.08 38.80±3.05")),
    },
    seeds=SEEDS,
    smoke=SMOKE,
    paper_seeds=20,
)


# --- the checks of this paper's sentences ---------------------------------------------------------

def at_other_lr(res: Results, *methods: str) -> dict:
    """Seed-0 runs of ``methods`` at an lr their probes did not pick (rows named ``<method>@lr<lr>``)."""
    return {r["method"]: res.shown(r["value"]) for r in res.rows
            if "@" in r["method"] and r["method"].partition("@")[0] in methods and r["seed"] == 0}


def beside(check, more):
    """``check``'s verdict with ``more(res)``, the runs quoted beside the compared ones."""
    def wrapped(res: Results) -> Verdict:
        v = check(res)
        return Verdict(v.holds, {**v.ours, **more(res)}, v.note)
    return wrapped


def not_behind(a: str, b: str, points: float):
    """``a``'s mean is at most ``points`` (shown units) below ``b``'s, on the seeds both ran."""
    def check(res: Results) -> Verdict:
        seeds = res.seeds(a, b)
        if not seeds:
            return Verdict(False, {}, f"no seed on which both {a} and {b} ran")
        ma, mb = (res.shown(res.mean(m, seeds)) for m in (a, b))
        gap = round(ma - mb, 2)
        return Verdict(gap >= -points, {a: ma, b: mb, "gap": gap},
                       f"{a} {gap:+.2f} points against {b} (asked: at least -{points})")
    return check


def sweep_shape(res: Results) -> Verdict:
    """Table 2's shape: alpha 5 and 10 above alpha 1 (FedAvg), alpha 25 below it; judged on the alphas
    run, on the seeds all of them ran."""
    ran = [m for m in ("alpha1", "alpha5", "alpha10", "alpha25") if res.values(m)]
    seeds = res.seeds(*ran)
    if "alpha1" not in ran or len(ran) < 3 or not seeds:
        return Verdict(False, {}, "alpha 1 and two of 5, 10, 25 must have run on a common seed")
    mean = {m: res.shown(res.mean(m, seeds)) for m in ran}
    above = all(mean[m] > mean["alpha1"] for m in ("alpha5", "alpha10") if m in mean)
    below = mean.get("alpha25", -1.0) < mean["alpha1"]
    missing = [m for m in TABLE2.methods if m not in ran]
    return Verdict(above and below, mean,
                   f"alpha 5 and 10 above alpha 1: {above}; alpha 25 below it: {below}; not run: {', '.join(missing)}")


RESNET20_PARAMS, RESNET20_HEAD = 292_954, 650  # trainable parameters; the head is fc (64 x 10 + 10)


def table2_params(res: Results) -> Verdict:
    """Parameters per client, up plus down, in 2x10^4 iterations (4000 rounds): the head every round and
    the body every alpha rounds. test_table2_parameters_per_client_resnet20_cifar10 finds these counts in
    the records the strategy sends and receives."""
    rounds = 4000
    ours = {str(a): 2 * rounds * RESNET20_HEAD + 2 * (rounds // a) * (RESNET20_PARAMS - RESNET20_HEAD)
            for a in ALPHAS}
    shown = {a: f"{n / 1e9:.3f}B" for a, n in ours.items()}
    paper = {"1": "2.344B", "5": "0.473B", "10": "0.239B", "25": "0.099B", "50": "0.052B", "100": "0.029B"}
    differ = [a for a in paper if shown[a] != paper[a]]
    return Verdict(not differ, ours, "every count rounds to the paper's" if not differ else f"differ: {differ}")


# The authors' code on the cpu setting (authors_reduced.sh: their main_fed_layer.py, non-IID, mode "sgd" or another), one run an
# alpha, condensed into a column's authors.json
def authors_run(alpha: int, into: str, mode: str = "", split: str = "") -> str:
    run = f" 2001 {mode or 'sgd'}{' ' + split if split else ''}" if mode or split else ""
    suffix = (f"-{mode}" if mode else "") + (f"-{split}" if split else "")
    return (f"bash simulations/fedals/authors_reduced.sh {alpha} OUT{run}, then python -m simulations.fedals.authors "
            f"OUT/authors-alpha{alpha}{suffix}.json --into {into}")


PAPER = Paper(
    name="fedals",
    title="FedALS",
    link="https://openreview.net/forum?id=F5hgpQ1Ccd",
    tables={"table1": TABLE1, "table2": TABLE2, "table3": TABLE3, "table2-150it": TABLE2_150},
    source_shift=2,  # the longer version prints accuracies as fractions with four decimals
    claims=[
        Claim("noniid-alpha10-over-fedavg", "learning",
              "Non-IID CIFAR-10 (sorted by label, then split over 5 clients), ResNet-20, tau = 5: FedALS with "
              "alpha = 10 is more accurate than FedAvg (Table 1). Ours at 2000 iterations (the paper: 2x10^4), "
              "3 seeds (the paper: 20), each method at the lr its probes picked.",
              ahead("fedals", "fedavg"), "table1", "cifar10-noniid", paper={"fedavg": "46.51", "fedals": "52.24"},
              methods=("fedavg", "fedals"),
              reference_run=f"{authors_run(1, 'table1/cifar10-noniid/fedavg')}; "
                            f"{authors_run(10, 'table1/cifar10-noniid/fedals')}"),
        Claim("alpha-sweep", "learning",
              "Table 2's shape on non-IID CIFAR-10: alpha = 5 and 10 more accurate than alpha = 1 (FedAvg), "
              "alpha = 25 less. Ours at 2000 iterations, seed 0, every alpha at the lr FedALS's and FedAvg's "
              "probes picked (0.02 for both).",
              sweep_shape, "table2", "cifar10-noniid", methods=("alpha1", "alpha5", "alpha10", "alpha25"),
              reference_run=f"{authors_run(5, 'table2/cifar10-noniid/alpha5')}; "
                            f"{authors_run(25, 'table2/cifar10-noniid/alpha25')}"),
        Claim("iid-control", "learning",
              "IID CIFAR-10 (shuffled, then split over 5 clients): FedALS with alpha = 10 is about as accurate "
              "as FedAvg (Table 1: 88.65 against 87.61), read as FedALS at most 1 point below FedAvg. Ours at "
              "2000 iterations (the paper: 10^4), seed 0, each method at its IID probes' lr (FedAvg 0.04, "
              "FedALS 0.01); the runs at 0.02 are beside.",
              beside(not_behind("fedals", "fedavg", 1.0), lambda res: {"at-other-lr": at_other_lr(res, "fedavg", "fedals")}),
              "table1", "cifar10-iid", methods=("fedavg", "fedals"),
              reference_run="; ".join(authors_run(a, f"table1/cifar10-iid/{m}", split="iid")
                                      for a, m in ((1, "fedavg"), (10, "fedals")))),
        Claim("scaffold-noniid", "learning",
              "Non-IID CIFAR-10: FedALS + SCAFFOLD (alpha = 10) keeps FedALS's gain over FedAvg (Table 1: 51.21 "
              "against 46.51). Judged on Algorithm 4 (fedals-scaffold) at its probes' lr (0.04) against FedAvg "
              "of the same seed (0); the authors' rule (fedals-scaffold-authors), FedALS and Algorithm 4 at "
              "0.02 are beside.",
              beside(ahead("fedals-scaffold", "fedavg"),
                     lambda res: {"fedals-scaffold-authors": res.shown(res.mean("fedals-scaffold-authors", [0])),
                                  "fedals": res.shown(res.mean("fedals", [0])),
                                  "at-other-lr": at_other_lr(res, "fedals-scaffold")}),
              "table1", "cifar10-noniid", methods=("fedavg", "fedals-scaffold"),
              reference_run=authors_run(10, "table1/cifar10-noniid/fedals-scaffold", mode="sca")),
        Claim("table2-params", "bookkeeping",
              "Parameters communicated per client in 2x10^4 iterations (ResNet-20, 5 clients, tau = 5, up plus "
              "down) for alpha = 1, 5, 10, 25, 50, 100, as the strategy's records count them (exact).",
              table2_params, "table2", "cifar10-noniid", scale="paper", reference=lambda res: None,
              paper={"1": "2.344B", "5": "0.473B", "10": "0.239B", "25": "0.099B", "50": "0.052B", "100": "0.029B"}),
    ],
)
