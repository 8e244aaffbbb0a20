"""The FedALS lr search (Appendix E.3): grid, extension to a local optimum, and resuming a finished search."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load():
    spec = importlib.util.spec_from_file_location("tune_lr", ROOT / "simulations/fedals/tune_lr.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_search_extends_to_a_local_optimum_and_resumes_without_rerunning_probes(tmp_path, monkeypatch):
    tune = load()
    ran = []

    class Done:  # what run_local returns: a strategy with its history
        def __init__(self, config):
            ran.append((config["strategy"], config["lr"]))
            score = {0.005: 0.10, 0.01: 0.12, 0.02: 0.15, 0.04: 0.18, 0.08: 0.11}[config["lr"]]
            self.history = [{"round": 0, "central-accuracy": 0.1}, {"round": 5, "central-accuracy": score}]

    monkeypatch.setattr(tune, "run_local", Done)
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    setting, method = tmp_path / "s.toml", tmp_path / "m.toml"
    setting.write_text('strategy = "fedals"\nnum-server-rounds = 400\n')
    method.write_text('strategy = "fedals"\n')
    argv = ["tune_lr.py", str(setting), "--methods", str(method), "--rounds", "5", "--eval-every", "5"]
    monkeypatch.setattr(sys, "argv", argv + ["--max-extend", "0"])
    tune.main()
    doc = json.loads((tmp_path / "results/fedals/s/lr-tuning.json").read_text())
    assert ran == [("fedals", 0.005), ("fedals", 0.01), ("fedals", 0.02)]
    assert doc["winner"]["m"] == {"lr": 0.02, "local-optimum": False}  # best at the grid's edge
    ran.clear()
    monkeypatch.setattr(sys, "argv", argv + ["--max-extend", "3"])
    tune.main()
    doc = json.loads((tmp_path / "results/fedals/s/lr-tuning.json").read_text())
    assert ran == [("fedals", 0.04), ("fedals", 0.08)]  # the three stored probes are not run again
    assert [p["lr"] for p in doc["probes"]] == [0.005, 0.01, 0.02, 0.04, 0.08]
    assert doc["winner"]["m"] == {"lr": 0.04, "local-optimum": True}


def test_another_setting_goes_to_its_own_file_and_leaves_the_first_search_alone(tmp_path, monkeypatch):
    tune = load()
    seen = []

    class Done:
        def __init__(self, config):
            seen.append((config["partition"], config["lr"]))
            self.history = [{"round": 5, "central-accuracy": {0.005: 0.1, 0.01: 0.3, 0.02: 0.2}[config["lr"]]}]

    monkeypatch.setattr(tune, "run_local", Done)
    monkeypatch.setattr(tune, "ROOT", tmp_path)
    setting, method = tmp_path / "s.toml", tmp_path / "m.toml"
    setting.write_text('strategy = "fedals"\npartition = "label-sorted"\n')
    method.write_text('strategy = "fedals"\n')
    base = ["tune_lr.py", str(setting), "--methods", str(method), "--rounds", "5", "--eval-every", "5"]
    monkeypatch.setattr(sys, "argv", base)
    tune.main()
    monkeypatch.setattr(sys, "argv", base + ["--set", 'partition="iid"', "--name", "lr-tuning-iid"])
    tune.main()
    assert seen == [("label-sorted", lr) for lr in (0.005, 0.01, 0.02)] + [("iid", lr) for lr in (0.005, 0.01, 0.02)]
    first = json.loads((tmp_path / "results/fedals/s/lr-tuning.json").read_text())
    iid = json.loads((tmp_path / "results/fedals/s/lr-tuning-iid.json").read_text())
    assert "set" not in first["probe"] and iid["probe"]["set"] == ['partition="iid"']
    assert len(first["probes"]) == len(iid["probes"]) == 3
    assert iid["winner"]["m"] == {"lr": 0.01, "local-optimum": True}
