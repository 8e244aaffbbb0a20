"""The experiment runner (simulations/run.py): every setting file is a run config Flower's own
``flwr run --run-config FILE`` accepts, and a methods x seeds grid gives the rows of the same runs
made one by one."""

import json
import tomllib

import pytest
from flwr.common.config import flatten_dict, fuse_dicts, parse_config_args

from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import run_local
from simulations import run as runner
from tests.conftest import ROOT

SETTINGS = sorted((ROOT / "simulations").rglob("*.toml"))
# the keys that make a setting's data and task: every method file of one setting folder shares them
DATA_KEYS = ("dataset", "partition", "partition-classes", "partition-alpha", "partition-shards", "partition-sigma",
             "num-clients", "unseen-fraction", "test-fraction", "local-test", "model", "batch-size", "data-augment")


@pytest.mark.parametrize("path", SETTINGS, ids=lambda p: str(p.relative_to(ROOT / "simulations")))
def test_setting_file_is_a_flwr_run_config(path):
    """Parsed as ``flwr run --run-config FILE`` parses it (one flat file, no lists), fused with the app's
    defaults as the SuperLink fuses it (every key declared in pyproject.toml), and valid for fedapp."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        declared = flatten_dict(tomllib.load(f)["tool"]["flwr"]["app"]["config"])
    keys = parse_config_args([str(path)])
    assert keys == runner.read(path)
    parse_run_config(fuse_dicts(declared, keys))


def test_method_files_of_a_setting_share_its_data():
    # HCCT's fig4/ holds one setting a train ratio (its methods set hcct.alpha), not one setting's methods
    folders = {p.parent for p in SETTINGS if p.parent.parent.name in ("hcct", "pefll") and p.parent.name != "fig4"}
    assert len(folders) == 17  # HCCT's 7, PeFLL's 10 (Table 1's 7, beside the authors', Shakespeare, Figure 3)
    for folder in folders:
        files = [runner.read(p) for p in sorted(folder.glob("*.toml"))]
        assert len(files) >= 2 or folder.name.startswith("figure3"), folder  # Figure 3: PeFLL alone
        for key in DATA_KEYS:
            assert len({f.get(key) for f in files}) == 1, (folder.name, key)


def write(path, keys: dict) -> str:
    path.write_text("".join(f'"{k}" = {json.dumps(v)}\n' for k, v in keys.items()))
    return str(path)


def test_methods_by_seeds_grid_gives_the_rows_of_single_runs(tmp_path, small_config):
    """Two method files x two seeds: the runs are named <method>-s<seed>, each run's row holds the
    numbers of the same run config run alone, and a second call runs nothing again."""
    base = {k: v for k, v in small_config.items() if k not in ("results-dir", "run-name", "seed")}
    a = write(tmp_path / "fedavg.toml", {**base, "strategy": "fedavg"})
    b = write(tmp_path / "fedprox.toml", {**base, "strategy": "fedprox", "fedprox.proximal-mu": 0.5})
    out = tmp_path / "out"
    runner.main([a, b, "--seeds", "3", "4", "--set", "local-steps=2 num-clients=2", "--rounds", "1", "--out", str(out),
                 "--report", "fedsmoo"])
    rows = json.loads((out / "summary.json").read_text())
    assert [(r["run"], r["method"], r["seed"]) for r in rows] == [("fedavg-s3", "fedavg", 3), ("fedavg-s4", "fedavg", 4),
                                                              ("fedprox-s3", "fedprox", 3), ("fedprox-s4", "fedprox", 4)]
    alone = run_local({**base, "strategy": "fedprox", "fedprox.proximal-mu": 0.5, "local-steps": 2, "num-clients": 2,
                       "num-server-rounds": 1, "seed": 4, "results-dir": str(tmp_path / "alone"), "run-name": "a"}).history
    evals = [h["central-accuracy"] for h in alone if h["round"] > 0 and "central-accuracy" in h]
    assert rows[3]["final"] == evals[-1]
    assert rows[3]["down"] + rows[3]["up"] == alone[-1]["total-train-bytes-down"] + alone[-1]["total-train-bytes-up"]
    for r in rows:
        assert json.loads((out / r["run"] / "rounds.json").read_text())["config"]["seed"] == r["seed"]
    assert len({r["final"] for r in rows}) > 1  # seeds and methods differ
    again = [a, b, "--seeds", "3", "4", "--set", "local-steps=2 num-clients=2", "--rounds", "1", "--out", str(out),
             "--report", "fedsmoo"]
    runner.main(again)
    assert json.loads((out / "summary.json").read_text()) == rows
    with pytest.raises(SystemExit, match=r"other settings \(num-server-rounds: 1 there, 2 here\)"):
        runner.main(again[:5] + ["--rounds", "2"] + again[5:7] + again[9:])


def test_methods_sweep_and_tuned_lr_compose_in_order(tmp_path):
    """A strategy name or a method file per --methods entry, one --sweep value, the tuned lr: names and configs."""
    write(tmp_path / "setting.toml", {"strategy": "fedals", "fedals.alpha": 10, "lr": 0.1})
    method = write(tmp_path / "fedavg.toml", {"strategy": "fedals", "fedals.alpha": 1})
    lr = tmp_path / "lr.json"
    lr.write_text(json.dumps({"winner": {"fedavg": {"lr": 0.02}, "fedprox": {"lr": 0.04}}}))
    args = type("Args", (), {"files": [tmp_path / "setting.toml"], "methods": [method, "fedprox"],
                                 "sweep": "momentum=0.5,0.9", "seeds": None, "set": ["lr=0.3"], "rounds": 7,
                                 "lr_from": lr})
    runs = runner.plan(args)
    assert [n for n, _, _ in runs] == ["fedavg-momentum=0.5", "fedavg-momentum=0.9", "fedprox-momentum=0.5",
                                       "fedprox-momentum=0.9"]
    _, _, cfg = runs[1]
    assert cfg == {"strategy": "fedals", "fedals.alpha": 1, "lr": 0.02, "momentum": 0.9, "num-server-rounds": 7}
    assert runs[2][2]["strategy"] == "fedprox" and runs[2][2]["lr"] == 0.04
    assert runner.default_out(ROOT / "simulations/hcct/fmnist/hcct.toml", {}) == ROOT / "results/hcct/fmnist"
    assert runner.default_out(ROOT / "simulations/fedals/cpu-cifar10-resnet20.toml", {}) == \
        ROOT / "results/fedals/cpu-cifar10-resnet20"


def _append_rows(summary_file, tag, n):
    from simulations.run import add_row
    for i in range(n):
        add_row(summary_file, {"run": f"{tag}-{i}", "method": tag, "seed": i})


def test_two_runners_writing_one_summary_lose_no_row(tmp_path):
    """Two processes appending to one summary.json at once (two runners sharing a results folder)."""
    import multiprocessing as mp

    from simulations.run import done_runs
    summary = tmp_path / "summary.json"
    procs = [mp.get_context("fork").Process(target=_append_rows, args=(summary, tag, 60)) for tag in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert done_runs(summary) == {f"{t}-{i}" for t in "ab" for i in range(60)}
