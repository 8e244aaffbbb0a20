"""PeFLL's baseline lr grid (simulations/pefll/tune_lr.py): scores, a diverged probe, the winner's edge flag."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_diverged_probe_is_stored_and_bounds_the_winner(tmp_path, monkeypatch):
    """A probe whose run stops (every reply non-finite) is stored with score null and its reason, is not
    run again, and makes the best finite lr below it an interior winner."""
    spec = importlib.util.spec_from_file_location("tune_lr", ROOT / "simulations/pefll/tune_lr.py")
    tune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune)
    scores, ran = {0.01: 0.66, 0.03: 0.73, 0.1: 0.79}, []

    class Done:  # what run_local returns: a strategy with its history; lr 0.3 diverges
        def __init__(self, config):
            ran.append(config["lr"])
            if config["lr"] == 0.3:
                raise RuntimeError("round 4: no valid training reply in 3 rounds in a row (max-empty-rounds)\nmore")
            self.history = [{"round": 5, tune.SCORE: scores[config["lr"]]}]

    monkeypatch.setattr(tune, "run_local", Done)
    (tmp_path / "pfedme.toml").write_text('strategy = "pfedme"\n')
    out = tmp_path / "grid.json"
    argv = ["tune_lr.py", str(tmp_path), "--methods", "pfedme", "--rounds", "5", "--out", str(out), "--grid"]
    monkeypatch.setattr(sys, "argv", argv + ["0.01", "0.03", "0.1"])
    tune.main()
    assert json.loads(out.read_text())["winner"]["pfedme"] == {"lr": 0.1, "at-edge": True}
    monkeypatch.setattr(sys, "argv", argv + ["0.3"])
    tune.main()
    doc = json.loads(out.read_text())
    assert ran == [0.01, 0.03, 0.1, 0.3]
    assert {k: v for k, v in doc["probes"][-1].items() if k != "seconds"} == {
        "method": "pfedme", "lr": 0.3, "score": None,
        "stopped": "round 4: no valid training reply in 3 rounds in a row (max-empty-rounds)"}
    assert doc["winner"]["pfedme"] == {"lr": 0.1, "at-edge": False}
    assert doc["grid"] == [0.01, 0.03, 0.1, 0.3]  # the stored grid and the new probe


def test_a_second_learning_rate_is_searched_with_the_first(tmp_path, monkeypatch):
    """--grid2: every lr at every value of the method's second learning rate; the stored probes of the
    one-dimensional grid count at the setting's value and are not run again; other methods ignore it."""
    spec = importlib.util.spec_from_file_location("tune_lr", ROOT / "simulations/pefll/tune_lr.py")
    tune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune)
    ran = []

    class Done:  # the score peaks at lr 0.01, beta 0.01
        def __init__(self, config):
            lr, beta = config["lr"], config.get("perfedavg.beta")
            ran.append((config["strategy"], lr, beta))
            self.history = [{tune.SCORE: 1 - abs(lr - 0.01) - abs((beta or 0) - 0.01)}]

    monkeypatch.setattr(tune, "run_local", Done)
    (tmp_path / "perfedavg.toml").write_text('strategy = "perfedavg"\n"perfedavg.beta" = 0.001\n')
    (tmp_path / "fedavg.toml").write_text('strategy = "fedavg"\n')
    out = tmp_path / "grid.json"
    argv = ["tune_lr.py", str(tmp_path), "--rounds", "5", "--out", str(out), "--grid", "0.003", "0.01", "0.03"]
    monkeypatch.setattr(sys, "argv", argv + ["--methods", "perfedavg"])
    tune.main()
    assert json.loads(out.read_text())["winner"]["perfedavg"] == {"lr": 0.01, "at-edge": False}
    ran.clear()
    monkeypatch.setattr(sys, "argv", argv + ["--methods", "perfedavg", "fedavg",
                                             "--grid2", "perfedavg.beta", "0.001", "0.01", "0.1"])
    tune.main()
    assert ran == [("perfedavg", lr, b) for lr in (0.003, 0.01, 0.03) for b in (0.01, 0.1)] + [
        ("fedavg", lr, None) for lr in (0.003, 0.01, 0.03)]
    doc = json.loads(out.read_text())
    assert doc["winner"]["perfedavg"] == {"lr": 0.01, "perfedavg.beta": 0.01, "at-edge": False}
    assert doc["winner"]["fedavg"] == {"lr": 0.01, "at-edge": False}
    assert [p["perfedavg.beta"] for p in doc["probes"][3:9]] == [0.01, 0.1] * 3
    # the plain grid again: only the probes at the setting's beta count
    monkeypatch.setattr(sys, "argv", argv + ["--methods", "perfedavg"])
    ran.clear()
    tune.main()
    assert ran == [] and json.loads(out.read_text())["winner"]["perfedavg"] == {"lr": 0.01, "at-edge": False}


def test_pefll_cpu_settings_hold_each_methods_grid_winner():
    """Each tuned baseline's cpu setting runs at its grid winner, both learning rates where it has two
    (Per-FedAvg's alpha and beta, pFedMe's lr and personal lr), and every probe of such a method says
    the second rate it ran at, so a later grid reads the stored probes right whatever the setting holds."""
    from simulations.run import read

    grid = json.loads((ROOT / "simulations/pefll/lr-grid/cifar10-100c-authors.json").read_text())
    second = {"perfedavg": "perfedavg.beta", "pfedme": "pfedme.personal-lr"}
    assert set(grid["winner"]) == {"fedavg", "perfedavg", "fedrep", "pfedme", "knnper"}
    for method, won in grid["winner"].items():
        setting = read(ROOT / "simulations/pefll/cifar10-100c-authors" / f"{method}.toml")
        assert not won["at-edge"], method
        assert setting["lr"] == won["lr"], method
        if method in second:
            assert setting[second[method]] == won[second[method]], method
            probes = [p for p in grid["probes"] if p["method"] == method]
            assert all(second[method] in p for p in probes), method
            best = max((p for p in probes if p["score"] is not None), key=lambda p: p["score"])
            assert (best["lr"], best[second[method]]) == (won["lr"], won[second[method]]), method
