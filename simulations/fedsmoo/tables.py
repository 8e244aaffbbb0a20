"""FedSMOO (Sun et al., ICML 2023): the tables and claims this folder reproduces."""

from simulations.tables import Claim, Column, Metric, Paper, Table, best

METHODS = {m: {"strategy": m} for m in ("fedavg", "scaffold", "feddyn", "fedsam", "mofedsam", "fedspeed", "fedsmoo")}

TABLE1 = Table(
    title="Table 1, final test accuracy (%)",
    metric=Metric("central-accuracy", "test accuracy (%)"),
    methods=METHODS,
    columns={
        "dir0.1-10pct": Column(
            "CIFAR-10, Dirichlet u = 0.1, 10% of 100 clients",
            {"paper": "paper-cifar10-dir0.1-10pct-of-100.toml", "cpu": "reduced-cifar10-mlp-dir0.1-10pct-of-100.toml"},
            paper={"fedavg": 76.00, "scaffold": 78.57, "feddyn": 78.08, "fedsam": 76.86, "mofedsam": 78.71,
                   "fedspeed": None, "fedsmoo": 80.82},
            paper_sd={"fedavg": 0.18, "scaffold": 0.14, "feddyn": 0.19, "fedsam": 0.16, "mofedsam": 0.15,
                      "fedsmoo": 0.17}),
    },
    seeds={"paper": [20, 21, 22], "cpu": [20, 21], "smoke": [20]},
    smoke={"num-server-rounds": 2, "num-clients": 10, "local-steps": 2, "eval-every": 1},
    paper_seeds=3,
)

PAPER = Paper(
    name="fedsmoo",
    title="FedSMOO",
    link="https://proceedings.mlr.press/v202/sun23h.html",
    tables={"table1": TABLE1},
    claims=[Claim("table1-ordering", "learning",
                  "FedSMOO has the highest final test accuracy of the Table 1 methods (CIFAR-10, Dirichlet 0.1).",
                  best("fedsmoo"), "table1", "dir0.1-10pct")],
)
