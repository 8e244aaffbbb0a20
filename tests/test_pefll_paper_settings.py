"""PeFLL's own settings (the paper's text) beside the authors' code's (which produced Table 1)."""

import torch

from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import dataset, model_for
from simulations.pefll.tables import PAPER
from simulations.run import read
from strategies.pefll import PeFLL, embed_dim

FOLDER = PAPER.folder / "cifar10-100c-authors"


def test_paper_file_differs_from_the_authors_file_in_the_papers_settings_only():
    """Appendix A.2: lambda_h = lambda_v = 1e-3, l = n/4, lambda_theta = 0; Algorithm 2's delta rule
    (no Adam, no clipping); Table 5's hypernetwork; no standardisation and no client weight decay or
    clipping, of which the paper says nothing. Data, model, k, step size and evaluation are the same."""
    paper, authors = read(FOLDER / "pefll-paper.toml"), read(FOLDER / "pefll.toml")
    differ = {k for k in paper.keys() | authors.keys() if paper.get(k) != authors.get(k)}
    assert differ == {"pefll.lambda-h", "pefll.lambda-v", "pefll.embed-dim", "pefll.server-opt", "pefll.server-lr",
                      "pefll.server-clip", "pefll.hypernet", "pefll.standardize", "pefll.inner-wd", "pefll.clip",
                      "pefll.lambda-theta"}
    cfg = parse_run_config(paper)
    assert (cfg.algo("lambda-h"), cfg.algo("lambda-v"), cfg.algo("lambda-theta")) == (1e-3, 1e-3, 0.0)
    assert embed_dim(cfg) == 25 == cfg.num_clients // 4
    assert (cfg.algo("server-opt"), cfg.algo("server-clip"), cfg.algo("hypernet")) == ("delta", 0.0, "table5")
    assert not cfg.algo("standardize") and cfg.algo("inner-wd") == cfg.algo("clip") == 0.0
    assert embed_dim(parse_run_config(authors)) == 26  # their 1 + n/4


def test_paper_settings_build_the_papers_networks_and_update(tmp_path, monkeypatch):
    """The file's strategy has Table 5's h (ReLU after each of FC1-FC4, FC5 linear) on l = 25, no server
    optimiser (eta <- (1 - 2 beta lambda) eta + mean delta, tested in test_pefll.py) and no m, s."""
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path))
    cfg = parse_run_config({**read(FOLDER / "pefll-paper.toml"), "dataset": "synthetic", "model": "mlp",
                            "partition": "natural", "pefll.embedding": "label"})
    strategy = PeFLL(cfg, model_for(cfg), dataset(cfg))
    layers = list(strategy.hnet.body)
    assert [type(m).__name__ for m in layers] == ["Linear", "ReLU"] * 4 and layers[0].in_features == 25
    assert strategy.optimizers == {} and strategy.v_stats is None
    strategy.set_standardization(torch.tensor([1.0, 5.0]))
    assert strategy.v_stats is None


def test_paper_settings_table_runs_the_paper_file():
    table = PAPER.tables["paper-settings"]
    assert list(table.methods) == ["pefll-paper"]
    assert table.columns["cifar10-100c"].settings["cpu"].format(method="pefll-paper") == \
        "cifar10-100c-authors/pefll-paper.toml"
    # stopped where the vs-authors table stops the authors' configuration, so the two compare
    assert table.methods["pefll-paper"]["num-server-rounds"] == PAPER.tables["vs-authors"].methods["pefll"][
        "num-server-rounds"] == 100
