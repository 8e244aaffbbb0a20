"""Per-site client state in a node config's ``state-dir``, and sites with their own data,
through the real ClientApp in process (the end-to-end SuperNode restart is in
test_deployment.py)."""

import os

import numpy as np
import pytest
import torch
from flwr.app import Context, MessageType, RecordDict
from PIL import Image

from clients.scaffold import ScaffoldClient
from fedapp.runtime.client_app import app, commit_state, end_of_run, load_state, state_path
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.inprocess import InProcessGrid, run_local


def site_configs(n, state_dir=None):
    return [{"partition-id": i, "num-partitions": n, **({"state-dir": str(state_dir)} if state_dir else {})}
            for i in range(n)]


def restarted(msg, ctx):
    """The ClientApp on a SuperNode restarted right before this message: its context starts empty."""
    return app(msg, Context(ctx.run_id, ctx.node_id, dict(ctx.node_config), RecordDict(), ctx.run_config))


def test_commit_then_load_through_a_fresh_context(tmp_path):
    cfg = parse_run_config({"strategy": "scaffold"})
    node = {"partition-id": 3, "state-dir": str(tmp_path / "state")}
    state = {"control": {"w": torch.randn(3, 2), "b": torch.arange(2.0)}}
    commit_state(Context(7, 1, node, RecordDict(), {}), cfg, state, version=1)
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["run7-scaffold-p3-r1.pt"]  # no temporary left
    loaded = load_state(Context(7, 1, node, RecordDict(), {}), cfg, version=1)
    assert loaded.keys() == state.keys()
    assert all(torch.equal(loaded["control"][k], v) for k, v in state["control"].items())
    assert load_state(Context(8, 1, node, RecordDict(), {}), cfg) is None  # another run starts clean
    no_dir = Context(7, 1, {"partition-id": 3}, RecordDict(), {})
    commit_state(no_dir, cfg, state, version=1)
    assert state_path(no_dir, cfg) is None and load_state(no_dir, cfg).keys() == {"control"}  # memory only


def test_versions_kept_are_the_asked_ones(tmp_path):
    """A commit keeps the versions it is told to (the checkpoint's) and drops the rest, in memory
    and on disk; each version reads back as it was committed. At the end of the run only the last
    version stays (keep-client-state), or no file."""
    cfg = parse_run_config({"strategy": "scaffold"})
    for node in ({"partition-id": 0, "state-dir": str(tmp_path / "state")}, {"partition-id": 0}):
        ctx = Context(7, 1, node, RecordDict(), {})
        states = {r: {"control": {"w": torch.full((2,), float(r))}} for r in range(1, 5)}
        commit_state(ctx, cfg, states[1], version=1)
        commit_state(ctx, cfg, states[2], version=2, keep=(1,))
        commit_state(ctx, cfg, states[3], version=3, keep=(2,))
        commit_state(ctx, cfg, states[4], version=4, keep=(2,))
        for r, want in ((2, 2.0), (4, 4.0), (None, 4.0)):
            assert torch.equal(load_state(ctx, cfg, version=r)["control"]["w"], torch.full((2,), want))
        assert load_state(ctx, cfg, version=1) is None and load_state(ctx, cfg, version=3) is None
        if "state-dir" in node:
            assert sorted(p.name for p in (tmp_path / "state").iterdir()) == ["run7-scaffold-p0-r2.pt",
                                                                                "run7-scaffold-p0-r4.pt"]
            fresh = Context(7, 1, node, RecordDict(), {})  # a restarted SuperNode reads them from disk
            assert torch.equal(load_state(fresh, cfg, version=2)["control"]["w"], torch.full((2,), 2.0))
        assert end_of_run(ctx, cfg, None, keep=4) == (1 if "state-dir" in node else 0)  # keep-client-state
        assert load_state(ctx, cfg, version=2) is None and load_state(ctx, cfg, version=4) is not None
        assert end_of_run(ctx, cfg, None, keep=None) == (1 if "state-dir" in node else 0)
        assert not list((tmp_path / "state").glob("run7-*"))


@pytest.mark.parametrize("strategy", ["scaffold", "feddyn", "fedsmoo", "fedals"])
def test_restart_before_every_message_with_state_dir_equals_in_memory_state(strategy, small_config, tmp_path):
    """SCAFFOLD's c_i, FedDyn's/FedSMOO's duals, FedALS's body and momentum survive restarts
    through state-dir: the run is bit-identical to one whose nodes never restart."""
    run_config = {**small_config, "strategy": strategy, "num-server-rounds": 3, "fraction-train": 0.5,
                  "fraction-evaluate": 0.0, "central-eval": False}
    steady = run_local(run_config)
    grid = InProcessGrid(restarted, 4, run_config, site_configs(4, tmp_path / "state"))
    restarting = run_local(run_config, grid=grid)
    for k, v in steady.global_state.items():
        assert torch.equal(restarting.global_state[k], v), k
    amnesic = run_local(run_config, grid=InProcessGrid(restarted, 4, run_config, site_configs(4)))
    assert any(not torch.equal(amnesic.global_state[k], v) for k, v in steady.global_state.items())


def test_scaffold_control_after_restart_is_the_one_before(small_config, tmp_path):
    run_config = {**small_config, "strategy": "scaffold", "num-server-rounds": 2, "fraction-evaluate": 0.0,
                  "central-eval": False, "keep-client-state": True}
    grid = InProcessGrid(app, 4, run_config, site_configs(4, tmp_path / "state"))
    strategy = run_local(run_config, grid=grid)
    cfg = parse_run_config(run_config)
    before = {ctx.node_id: load_state(ctx, cfg)["control"] for ctx in grid.contexts.values()}
    after = {ctx.node_id: load_state(Context(ctx.run_id, ctx.node_id, dict(ctx.node_config), RecordDict(),
                                             ctx.run_config), cfg, strategy.run_key)["control"]
             for ctx in grid.contexts.values()}
    for node, control in before.items():
        assert all(torch.equal(after[node][k], v) for k, v in control.items())
    # and the server's c is still the mean of the c_i read back from disk
    for k, c in strategy.control.items():
        assert torch.allclose(c, sum(a[k] for a in after.values()) / 4, atol=1e-6)


@pytest.mark.parametrize("failure", ["training", "writing"])
def test_a_failed_round_leaves_the_last_committed_state(failure, small_config, tmp_path, monkeypatch):
    run_config = {**small_config, "strategy": "scaffold", "num-server-rounds": 1, "fraction-evaluate": 0.0,
                  "central-eval": False, "keep-client-state": True}
    grid = InProcessGrid(app, 4, run_config, site_configs(4, tmp_path / "state"))
    strategy = run_local(run_config, grid=grid)
    cfg = parse_run_config(run_config)
    ctx = grid.contexts[strategy.clients[0].node_id]
    path = state_path(ctx, cfg, key=strategy.run_key, version=1)
    committed = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("crash")

    if failure == "training":  # the client has already changed its state when it fails
        def after_train(self, payload, config):
            self.state["control"] = {k: v + 1 for k, v in self.scaffold.c_i.items()}
            crash()
        monkeypatch.setattr(ScaffoldClient, "after_train", after_train)
    else:  # the process dies between writing the temporary file and renaming it
        monkeypatch.setattr(os, "replace", crash)
    msgs = [m for m in strategy.driver.wire.messages(strategy.driver.sampled_contents("train", 2), MessageType.TRAIN)
            if m.metadata.dst_node_id == ctx.node_id]
    [reply] = grid.send_and_receive(msgs)
    assert reply.has_error()
    assert path.read_bytes() == committed and [p.name for p in path.parent.glob(f"*-p0-*")] == [path.name]
    monkeypatch.undo()
    kept = load_state(ctx, cfg)["control"]
    reread = load_state(Context(ctx.run_id, ctx.node_id, dict(ctx.node_config), RecordDict(), {}), cfg,
                        strategy.run_key)["control"]
    assert all(torch.equal(reread[k], v) for k, v in kept.items())


def image_tree(root, train_per_class, test_per_class, seed):
    rng = np.random.default_rng(seed)
    for split, n in (("train", train_per_class), ("test", test_per_class)):
        for label in ("cat", "dog"):
            (root / split / label).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{i}.png")
    return root


def test_sites_train_on_their_own_image_folders(tmp_path, monkeypatch):
    """Each SuperNode's data-dir is its data: the server's discovery sees each site's own sizes."""
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    server_tree = image_tree(tmp_path / "server", 2, 3, seed=0)  # the ServerApp's central test set
    site_a = image_tree(tmp_path / "a", 5, 2, seed=1)
    site_b = image_tree(tmp_path / "b", 8, 0, seed=2)  # no test folder: test-fraction of its own train
    run_config = {"dataset": "imagefolder", "data-dir": str(server_tree), "partition": "iid", "model": "logreg",
                  "num-clients": 2, "num-server-rounds": 1, "local-steps": 2, "batch-size": 4,
                  "test-fraction": 0.25, "results-dir": str(tmp_path / "results"), "run-name": "sites"}
    nodes = [{"partition-id": 0, "data-dir": str(site_a)}, {"partition-id": 1, "data-dir": str(site_b)}]
    strategy = run_local(run_config, grid=InProcessGrid(app, 2, run_config, nodes))
    assert (strategy.clients[0].num_train, strategy.clients[0].num_test) == (10, 4)
    assert (strategy.clients[1].num_train, strategy.clients[1].num_test) == (12, 4)  # 16 images, 25% held out
    assert strategy.history[-1]["replies"] == 2


def test_new_run_never_loads_another_runs_state(small_config, tmp_path):
    """A second run with the same run-name (and, in process, even the same run id) at sites with
    a state-dir starts from a clean state: it equals a run at sites that never had any."""
    run_config = {**small_config, "strategy": "scaffold", "num-server-rounds": 2, "fraction-evaluate": 0.0,
                  "central-eval": False}
    kept = {**run_config, "keep-client-state": True}
    first = run_local(kept, grid=InProcessGrid(restarted, 4, kept, site_configs(4, tmp_path / "state")))
    second = run_local(run_config, grid=InProcessGrid(restarted, 4, run_config, site_configs(4, tmp_path / "state")))
    clean = run_local(run_config, grid=InProcessGrid(restarted, 4, run_config, site_configs(4, tmp_path / "fresh")))
    assert first.run_key != second.run_key
    assert all(torch.equal(second.global_state[k], v) for k, v in clean.global_state.items())
    assert all(torch.equal(second.control[k], v) for k, v in clean.control.items())
    # the first run kept its state (keep-client-state), the second removed its own at its end
    files = sorted(p.name for p in (tmp_path / "state").iterdir())
    assert files == sorted(f"{first.run_key}-scaffold-p{i}-r{r}.pt" for i, r in first.state_rounds.items())


def test_a_resumed_run_finds_its_clients_state(small_config, tmp_path, monkeypatch):
    """The exception: a run resumed from a checkpoint (a new run, restarted sites) reads the
    state its clients committed, and ends as the uninterrupted run does."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    run_config = {**small_config, "strategy": "scaffold", "num-server-rounds": 3, "fraction-evaluate": 0.0,
                  "central-eval": False, "fraction-train": 0.5}
    full = run_local({**run_config, "run-name": "full"})
    stopped = run_local({**run_config, "num-server-rounds": 2, "keep-client-state": True},
                        grid=InProcessGrid(restarted, 4, run_config, site_configs(4, tmp_path / "state")))
    resumed_config = {**run_config, "resume-from": str(tmp_path / "results" / "t")}
    resumed = run_local(resumed_config,
                        grid=InProcessGrid(restarted, 4, resumed_config, site_configs(4, tmp_path / "state")))
    assert resumed.run_key == stopped.run_key
    assert all(torch.equal(resumed.global_state[k], v) for k, v in full.global_state.items())
    assert all(torch.equal(resumed.control[k], v) for k, v in full.control.items())
