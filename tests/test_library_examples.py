"""The examples of docs/flower-library.md through `flwr run`, and a ClientApp written as Flower's
quickstart writes one (examples/plain-flower-client) in fedapp's runs."""

import json
import re
import subprocess
import time

import pytest
import torch

from fedapp.core.config import ConfigError
from fedapp.runtime.inprocess import run_local
from fedapp.runtime.launch import (BIN, flwr_env, free_port_base, start_local_superlink, stop_local_superlink,
                                   wait_for_superlink)
from fedapp.server.discovery import app_is_plain
from fedapp.server.replies import FLOWER_METRICS

from conftest import ROOT

EXAMPLES = ROOT / "examples"
PLAIN = EXAMPLES / "plain-flower-client"


@pytest.fixture
def plain_app(monkeypatch):
    """The example's ClientApp, imported as Flower imports it from the app's folder."""
    monkeypatch.syspath_prepend(str(PLAIN))
    from plainapp.client_app import app

    return app


def plain_config(tmp_path, **extra):
    return {"model": "plainapp.task:Net", "num-server-rounds": 2, "local-epochs": 1, "lr": 0.1, "seed": 0,
            "results-dir": str(tmp_path / "results"), "run-name": "p", "node-wait-timeout": 5.0, **extra}


def final_statuses(runs: dict[str, subprocess.CompletedProcess], env: dict, limit: float = 300.0) -> dict[str, str]:
    """name -> the final status of the run its `flwr run` started (``finished:completed`` when it
    succeeded): `flwr run --stream` exits 0 when the run failed too, and may end before the run has
    finished. One `flwr ls` for all of them (each one is about 1.5 CPU s of imports)."""
    ids = {name: re.search(r"Successfully started run (\d+)", done.stdout + done.stderr) for name, done in runs.items()}
    end = time.time() + limit
    while True:
        listed = json.loads(subprocess.run([str(BIN / "flwr"), "ls", "--format", "json", "local"], env=env,
                                           capture_output=True, text=True).stdout)["runs"]
        status = {run["run-id"]: run["status"] for run in listed}
        out = {name: "not started" if found is None else status.get(found.group(1), "not listed")
               for name, found in ids.items()}
        if all(s.startswith("finished") or s == "not started" for s in out.values()) or time.time() > end:
            return out
        time.sleep(1.0)


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory):
    """The three examples of docs/flower-library.md through `flwr run`, one after another on one
    local SuperLink (Flower's default 2-node simulation): name -> (`flwr run`'s output with the run's
    final status as ``status``, its folder)."""
    tmp = tmp_path_factory.mktemp("examples")
    home = tmp / "flwr-home"
    env = flwr_env(home, free_port_base())
    runs = {"own-serverapp": f"out='{tmp / 'final.pt'}'",
            "own-clientapp": f"num-server-rounds=2 results-dir='{tmp / 'results'}' run-name='own'",
            "plain-flower-client": f"num-server-rounds=2 results-dir='{tmp / 'results'}' run-name='p'"}
    out = {}
    # started here and waited for: `flwr run` gives the SuperLink it starts 15 s, too few on a busy machine
    wait_for_superlink(start_local_superlink(home, env), home, env)
    try:
        for name, overrides in runs.items():
            out[name] = subprocess.run([str(BIN / "flwr"), "run", str(EXAMPLES / name), "--stream", "--run-config",
                                        overrides], env=env, capture_output=True, text=True, timeout=900)
        for name, status in final_statuses(out, env).items():
            out[name].status = status
    finally:
        stop_local_superlink(home)
    return out, tmp


@pytest.mark.slow
def test_plain_flower_clientapp_joins(example_runs):
    """`flwr run` of examples/plain-flower-client: fedapp's ServerApp, the quickstart-style ClientApp on
    Flower's default 2-node federation. Both nodes train in every round, keyed by their node ids, and
    the rows hold their metrics under fedapp's names (the template's eval_acc as fed-accuracy)."""
    out, tmp = example_runs
    done = out["plain-flower-client"]
    assert (done.returncode, done.status) == (0, "finished:completed"), done.stdout[-6000:] + done.stderr
    assert "ERROR" not in done.stdout, done.stdout[-6000:]  # known plain, its nodes get no discovery query
    rows = json.loads((tmp / "results" / "p" / "rounds.json").read_text())["rounds"]
    assert [r["round"] for r in rows] == [0, 1, 2], out["plain-flower-client"].stdout[-6000:]
    assert [r["replies"] for r in rows[1:]] == [2, 2] and all(r["dropped-replies"] == 0 for r in rows[1:])
    # both nodes evaluated (50 test examples each): fed-accuracy is the mean of their accuracies
    accs = rows[-1]["fed-client-accuracy"]
    assert len(accs) == 2 and all(int(node) > 1 for node in accs)  # node ids, not partition ids 0 and 1
    assert rows[-1]["fed-accuracy"] == pytest.approx(sum(accs.values()) / 2)
    assert rows[1]["train-loss"] > 0


@pytest.mark.slow
def test_docs_library_examples(example_runs):
    """Each example of docs/flower-library.md, as the page shows its code, runs through `flwr run`."""
    out, tmp = example_runs
    doc = (ROOT / "docs" / "flower-library.md").read_text()
    for path in ("own-serverapp/ownserver/app.py", "own-clientapp/ownclient/app.py",
                 "plain-flower-client/plainapp/client_app.py"):
        assert (EXAMPLES / path).read_text().rstrip() in doc, path
        assert f"flwr run examples/{path.split('/')[0]} --stream" in doc
    for name, done in out.items():
        assert (done.returncode, done.status) == (0, "finished:completed"), name + done.stdout[-3000:] + done.stderr
        assert "ERROR" not in done.stdout, name + done.stdout[-3000:]
    # 1: your ServerApp ran FedSMOO's start() and saved Result.arrays: your Net's keys, trained
    final = torch.load(tmp / "final.pt")
    assert list(final) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert "round 3: federated accuracy" in out["own-serverapp"].stdout
    # 2: fedapp's ServerApp ran SCAFFOLD with your ClientApp: every node's update every round
    rows = json.loads((tmp / "results" / "own" / "rounds.json").read_text())["rounds"]
    assert [r["replies"] for r in rows[1:]] == [2, 2] and rows[0]["round"] == 0
    assert 0.0 < rows[-1]["fed-accuracy"] <= 1.0


def test_the_plain_examples_clientapp_is_known_plain_before_any_message(monkeypatch):
    """Flower loads an app from its folder, first on sys.path: examples/plain-flower-client's ClientApp
    has no query function, fedapp's own (the checkout's app) and examples/own-clientapp's have one."""
    monkeypatch.syspath_prepend(str(ROOT))
    assert not app_is_plain()
    monkeypatch.syspath_prepend(str(EXAMPLES / "own-clientapp"))
    assert not app_is_plain()
    monkeypatch.syspath_prepend(str(PLAIN))
    assert app_is_plain()


def test_plain_clients_are_sampled_by_their_exact_node_ids():
    """Node ids are 64-bit: a pool with ids above and below 2**63 is float64 to NumPy, whose draw of
    the ids themselves came back with other low digits (the round's clients then unknown). The draw
    of positions is the same draw, exact."""
    from types import SimpleNamespace

    import numpy as np

    from fedapp.server.discovery import Federation

    pool = [2866985134364038145, 12000000000000000001]
    for seed in range(4):
        strategy = SimpleNamespace(cfg=SimpleNamespace(min_train_nodes=1), rng=np.random.default_rng(seed))
        sampled = Federation(strategy, lambda: False).sample(pool, 0.5)
        assert len(sampled) == 1 and sampled[0] in pool
        ids = sorted(int(p) for p in np.random.default_rng(seed).choice(pool, size=1, replace=False))
        assert ids[0] not in pool  # what drawing the ids themselves gives
        assert sampled == [pool[int(np.random.default_rng(seed).choice(2, size=1, replace=False)[0])]]


def test_plain_clients_are_refused_before_round_1_by_a_strategy_that_needs_its_own(tmp_path, plain_app):
    for strategy, client in (("scaffold", "clients.scaffold.ScaffoldClient"),
                             ("fedsmoo", "clients.fedsmoo.FedSMOOClient")):
        with pytest.raises(ConfigError) as err:
            run_local(plain_config(tmp_path, strategy=strategy), client_app=plain_app)
        line = str(err.value)
        assert "\n" not in line and "runs a plain Flower ClientApp" in line and client in line
        assert not (tmp_path / "results" / "p" / "rounds.json").exists() or json.loads(
            (tmp_path / "results" / "p" / "rounds.json").read_text())["rounds"] == []


def test_plain_clients_in_process_match_a_hand_average(tmp_path, plain_app):
    """One FedAvg round of two plain clients is the example-weighted mean of what each trains alone
    (the same seeded loaders), and their replies' num-examples are capped by their first reply's."""
    from plainapp.task import Net, load_data, train

    strategy = run_local(plain_config(tmp_path, **{"num-server-rounds": 1, "fraction-evaluate": 0.0}),
                         client_app=plain_app)
    assert sorted(strategy.clients) == [101, 102] and all(c.plain for c in strategy.clients.values())
    assert [c.num_train for c in strategy.clients.values()] == [200, 200]
    torch.manual_seed(0)
    init = Net().state_dict()
    states = []
    for pid in (0, 1):
        net = Net()
        net.load_state_dict(init)
        train(net, load_data(pid, 2)[0], 1, 0.1, torch.device("cpu"))
        states.append(net.state_dict())
    assert FLOWER_METRICS["eval_acc"] == "accuracy"
    for k, v in strategy.global_state.items():
        assert torch.allclose(v, (states[0][k] + states[1][k]) / 2, atol=1e-6), k
