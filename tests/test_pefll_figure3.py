"""PeFLL Figure 3: the rank correlation between descriptor and class-proportion distances."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fedapp.runtime.registry import parse_run_config
from simulations.run import read

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "simulations" / "pefll"))
import figure3  # noqa: E402

FOLDER = Path(__file__).resolve().parents[1] / "simulations" / "pefll"


def test_spearman_is_pearson_of_tie_averaged_ranks():
    # no ties: 1 - 6 sum d^2 / (n (n^2 - 1)), d the rank differences: ranks (1, 0, 2, 3), (1, 3, 0, 2)
    assert figure3.spearman(np.array([3.0, 1, 4, 5]), np.array([2.0, 9, 1, 3])) == pytest.approx(
        1 - 6 * (0 + 9 + 4 + 1) / (4 * 15))
    # ties share their mean rank: ranks (0, 1.5, 1.5, 3) and (0, 2, 1, 3) -> 4.5 / sqrt(4.5 * 5)
    np.testing.assert_array_equal(figure3.ranks(np.array([1.0, 2, 2, 3])), [0, 1.5, 1.5, 3])
    assert figure3.spearman(np.array([1.0, 2, 2, 3]), np.array([1.0, 3, 2, 4])) == pytest.approx(4.5 / np.sqrt(22.5))
    assert figure3.spearman(np.array([1.0, 2, 3]), np.array([3.0, 2, 1])) == pytest.approx(-1.0)


def test_rank_correlation_over_the_new_clients():
    """Descriptors that are any scaled, shifted copy of the class proportions order every client's
    distances as the proportions do (1.0); random descriptors do not; only new clients count."""
    rng = np.random.default_rng(0)
    pi = rng.dirichlet([0.1] * 10, size=30)
    new = np.zeros(30, dtype=bool)
    new[[3, 7, 11]] = True
    assert figure3.rank_correlation(3 * pi + 1, pi, new) == pytest.approx(1.0)
    noise = rng.normal(size=(30, 5))
    assert abs(figure3.rank_correlation(noise, pi, new)) < 0.5
    v = noise.copy()
    v[new] = 0.0  # a new client's own vector: all its distances change, the others' do not
    want = np.mean([figure3.spearman(figure3.distances(v)[i], figure3.distances(pi)[i]) for i in (3, 7, 11)])
    assert figure3.rank_correlation(v, pi, new) == pytest.approx(want)


def test_curve_from_descriptors_npz(tmp_path):
    """The curve reads every evaluation of descriptors.npz; pi_i is client i's training label share."""
    rng = np.random.default_rng(1)
    hist = rng.integers(0, 50, size=(12, 4))
    hist[:, 0] += 1
    pi = hist / hist.sum(1, keepdims=True)
    new = np.arange(12) % 4 == 0
    v = np.stack([rng.normal(size=(12, 5)), np.c_[pi, pi[:, :1]] * 2])
    np.savez(tmp_path / "descriptors.npz", round=np.array([5, 10]), v=v, pid=np.arange(12), new=new, hist=hist)
    (first, r1), (second, r2) = figure3.curve(tmp_path / "descriptors.npz")
    assert (first, second) == (5, 10)
    assert r1 == round(figure3.rank_correlation(v[0], pi, new), 4)
    assert r2 == pytest.approx(figure3.rank_correlation(np.c_[pi, pi[:, :1]], pi, new), abs=1e-4) and r2 > 0.9


def test_figure3_setting_is_the_papers_client_construction():
    """Section 4: Dir(0.1) class proportions, datasets drawn to them, a random 10% unseen, 100 clients."""
    cfg = parse_run_config(read(FOLDER / "figure3-cifar10-100c" / "pefll.toml"))
    got = (cfg.partition, cfg.partition_alpha, cfg.num_clients, cfg.unseen_fraction)
    assert got == ("dirichlet-hsu", 0.1, 100, 0.1)
    assert cfg.strategy == "pefll" and cfg.fraction_evaluate == 1.0  # every client's descriptor, every evaluation


def test_committed_curve_matches_its_summary():
    path = FOLDER / "summaries" / "figure3" / "cifar10-100c.json"
    if not path.exists():
        pytest.skip("no committed Figure 3 run")
    doc = json.loads(path.read_text())
    assert doc["setting"] == "simulations/pefll/figure3-cifar10-100c/pefll.toml" and doc["runs"]
    for run in doc["runs"]:
        steps = [s for s, _ in run["curve"]]
        assert steps == sorted(steps) and run["final"] == run["curve"][-1][1]
        assert all(-1.0 <= r <= 1.0 for _, r in run["curve"])


def test_figure3_summary_keeps_each_runs_config_and_seconds(tmp_path, monkeypatch):
    """figure3.py takes a run's config and seconds from the row simulations.run wrote beside it, and
    refuses, naming the folder, a run without one."""
    run = tmp_path / "out" / "pefll-s3"
    run.mkdir(parents=True)
    rng = np.random.default_rng(2)
    hist = rng.integers(1, 50, size=(8, 3))
    np.savez(run / "descriptors.npz", round=np.array([20]), v=rng.normal(size=(1, 8, 4)), pid=np.arange(8),
             new=np.arange(8) % 4 == 0, hist=hist)
    monkeypatch.setattr(figure3, "HERE", tmp_path)
    monkeypatch.setattr(figure3, "plot", lambda summary, path: None)
    with pytest.raises(SystemExit, match="pefll-s3: no row with its config"):
        figure3.main([str(run)])
    config = {"strategy": "pefll", "seed": 3, "num-server-rounds": 20}
    (run.parent / "summary.json").write_text(json.dumps([{"run": "pefll-s3", "seconds": 12.5, "config": config}]))
    figure3.main([str(run)])
    (written,) = json.loads((tmp_path / "summaries" / "figure3" / "cifar10-100c.json").read_text())["runs"]
    assert (written["seed"], written["seconds"], written["config"]) == (3, 12.5, config)
    assert written["final"] == written["curve"][-1][1] and written["curve"][0][0] == 20
