"""The FedALS lr search (Appendix E.3): grid, extension to a local optimum, and resuming a finished search."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_search(monkeypatch, tmp_path, scores: dict, setting: str):
    """tune_lr.py with run_local replaced by a probe that scores each lr from ``scores``; returns the module,
    the list of (partition, lr) probes run, and the argv of a search over one method on ``setting``."""
    spec = importlib.util.spec_from_file_location("tune_lr", ROOT / "simulations/fedals/tune_lr.py")
    tune = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tune)
    ran = []

    class Done:  # what run_local returns: a strategy with its history
        def __init__(self, config):
            ran.append((config.get("partition"), config["lr"]))
            self.history = [{"round": 0, "central-accuracy": 0.1}, {"round": 5, "central-accuracy": scores[config["lr"]]}]

    monkeypatch.setattr(tune, "run_local", Done)
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    (tmp_path / "s.toml").write_text(setting)
    (tmp_path / "m.toml").write_text('strategy = "fedals"\n')
    argv = ["tune_lr.py", str(tmp_path / "s.toml"), "--methods", str(tmp_path / "m.toml"), "--rounds", "5",
            "--eval-every", "5"]
    return tune, ran, argv


def test_search_extends_to_a_local_optimum_and_resumes_without_rerunning_probes(tmp_path, monkeypatch):
    tune, ran, argv = fake_search(monkeypatch, tmp_path, {0.005: 0.10, 0.01: 0.12, 0.02: 0.15, 0.04: 0.18, 0.08: 0.11},
                                  'strategy = "fedals"\nnum-server-rounds = 400\n')
    monkeypatch.setattr(sys, "argv", argv + ["--max-extend", "0"])
    tune.main()
    doc = json.loads((tmp_path / "results/fedals/s/lr-tuning.json").read_text())
    assert ran == [(None, 0.005), (None, 0.01), (None, 0.02)]
    assert doc["winner"]["m"] == {"lr": 0.02, "local-optimum": False}  # best at the grid's edge
    ran.clear()
    monkeypatch.setattr(sys, "argv", argv + ["--max-extend", "3"])
    tune.main()
    doc = json.loads((tmp_path / "results/fedals/s/lr-tuning.json").read_text())
    assert ran == [(None, 0.04), (None, 0.08)]  # the three stored probes are not run again
    assert [p["lr"] for p in doc["probes"]] == [0.005, 0.01, 0.02, 0.04, 0.08]
    assert doc["winner"]["m"] == {"lr": 0.04, "local-optimum": True}


def test_another_setting_goes_to_its_own_file_and_leaves_the_first_search_alone(tmp_path, monkeypatch):
    tune, ran, argv = fake_search(monkeypatch, tmp_path, {0.005: 0.1, 0.01: 0.3, 0.02: 0.2},
                                  'strategy = "fedals"\npartition = "label-sorted"\n')
    monkeypatch.setattr(sys, "argv", argv)
    tune.main()
    monkeypatch.setattr(sys, "argv", argv + ["--set", 'partition="iid"', "--name", "lr-tuning-iid"])
    tune.main()
    assert ran == [("label-sorted", lr) for lr in (0.005, 0.01, 0.02)] + [("iid", lr) for lr in (0.005, 0.01, 0.02)]
    first = json.loads((tmp_path / "results/fedals/s/lr-tuning.json").read_text())
    iid = json.loads((tmp_path / "results/fedals/s/lr-tuning-iid.json").read_text())
    assert "set" not in first["probe"] and iid["probe"]["set"] == ['partition="iid"']
    assert len(first["probes"]) == len(iid["probes"]) == 3
    assert iid["winner"]["m"] == {"lr": 0.01, "local-optimum": True}


def test_probes_evaluate_on_the_subset_and_nothing_after_them_does(tmp_path, monkeypatch):
    """The probes' central evaluation reads --test-subset images; once the search ends, or a probe fails, the
    process evaluates on the whole test set again (a later run in it, a test's, is not cut to the subset)."""
    import pytest
    import torch

    import fedapp.server.rounds as rounds

    tune, ran, argv = fake_search(monkeypatch, tmp_path, {0.005: 0.1, 0.01: 0.3, 0.02: 0.2}, 'strategy = "fedals"\n')
    seen = []

    def full(model, x, y, **kw):
        seen.append(len(y))
        return {}
    monkeypatch.setattr(rounds, "evaluate", full)
    probe = tune.run_local

    def evaluating_probe(config):
        rounds.evaluate(None, torch.zeros(5000, 1), torch.zeros(5000))
        return probe(config)
    monkeypatch.setattr(tune, "run_local", evaluating_probe)
    monkeypatch.setattr(sys, "argv", argv + ["--max-extend", "0", "--test-subset", "300"])
    tune.main()
    assert seen == [300, 300, 300] and len(ran) == 3 and rounds.evaluate is full
    monkeypatch.setattr(tune, "run_local", lambda config: 1 / 0)
    monkeypatch.setattr(sys, "argv", argv + ["--name", "failing"])
    with pytest.raises(ZeroDivisionError):
        tune.main()
    assert rounds.evaluate is full
