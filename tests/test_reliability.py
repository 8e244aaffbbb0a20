"""Faulty clients, bad replies, interrupted runs and determinism, for every strategy named below
that is registered (the others are skipped until they are)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from PIL import Image

from fedapp.runtime import checkpoint, registry
from fedapp.runtime.client_app import app, load_state
from fedapp.core.config import ConfigError
from fedapp.runtime.registry import parse_run_config
from fedapp.runtime.faults import KINDS, faulty_partitions
from fedapp.runtime.inprocess import InProcessGrid, run_local
from fedapp.runtime.server_app import build_strategy
from fedapp.server.discovery import ClientInfo

ROUNDS = 2
#: per-strategy settings that keep a run small (PeFLL generates LeNets: it needs images, and its
#: hypernetwork makes a round slow).
EXTRA = {
    "fedavg": {},
    "scaffold": {},
    "fedsmoo": {},
    "fedals": {"fedals.alpha": 2},
    "hcct": {},
    "pfedme": {"pfedme.k": 2, "pfedme.new-epochs": 1},
    "pefll": {"model": "lenet", "dataset": "imagefolder", "partition": "iid", "pefll.k": 2,
              "pefll.descriptor-batch": 8, "num-server-rounds": 1},
}
#: PeFLL's Per-FedAvg, pFedMe and kNN-Per (their evaluation fine-tunes or builds a datastore)
BASELINES = ("perfedavg", "pfedme", "knnper")
REASON = {"raise": "client-error: InjectedFault: fault-kind raise", "stall": "timeout",
          "wrong-shape": "wrong-shape", "nan": "non-finite", "inf": "non-finite"}
TIMING = ("wall-time", "train-seconds", "round-seconds")


def registered(name):
    return pytest.mark.skipif(name not in registry.algorithms(), reason=f"{name} is not registered yet")


def strategies(*names):
    return [pytest.param(n, marks=registered(n)) for n in names]


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory):
    """A tiny 28x28 grey ImageFolder (3 classes), enough for LeNet and PeFLL's descriptors."""
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for split, n in (("train", 40), ("test", 8)):
        for label in range(3):
            d = root / split / str(label)
            d.mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 60, (28, 28)) + 60 * label  # class shifts the brightness
                Image.fromarray(img.astype(np.uint8)).save(d / f"{i}.png")
    return root


@pytest.fixture
def config(tmp_path, image_tree, monkeypatch):
    monkeypatch.setenv("FEDAPP_CACHE", str(image_tree.parent / "cache"))  # decoded once per session

    def make(strategy, **kw):
        extra = dict(EXTRA.get(strategy, {}))
        if extra.get("dataset") == "imagefolder":
            extra["data-dir"] = str(image_tree)
        return {"strategy": strategy, "num-clients": 10, "num-server-rounds": ROUNDS, "local-steps": 2,
                "batch-size": 8, "seed": 5, "results-dir": str(tmp_path / "results"), "run-name": "r",
                "checkpoint-every": 0, **extra, **kw}
    return make


def run(run_config, offline=()):
    """The ServerApp's loop over an in-process grid, without results files; returns (strategy, grid)."""
    cfg = parse_run_config(run_config)
    grid = InProcessGrid(app, cfg.num_clients, run_config)
    grid.offline = {101 + pid for pid in offline}  # node 101 + i serves partition i
    strategy = build_strategy(cfg)
    strategy.start(grid)
    return strategy, grid


def tensors(strategy):
    """Every tensor of the strategy's checkpointed state, in a fixed order."""
    out = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, dict):
            for k in v:
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for x in v:
                walk(x)

    walk({a: checkpoint._pack(getattr(strategy, a)) for a in checkpoint.attrs_of(strategy) if a != "history"})
    return out


def same_rows(a, b, skip=()):
    drop = set(TIMING) | set(skip)
    return [{k: v for k, v in r.items() if k not in drop} for r in a] == [
        {k: v for k, v in r.items() if k not in drop} for r in b]


# ---- faulty clients ----------------------------------------------------------------------------
_reference: dict[str, tuple] = {}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", strategies("fedavg", "scaffold", "fedsmoo", "fedals", "pefll", "hcct", *BASELINES))
def test_faulty_replies_equal_clients_that_did_not_reply(name, kind, config):
    faulty_cfg = config(name, **{"fault-fraction": 0.3, "fault-kind": kind})
    bad = faulty_partitions(parse_run_config(faulty_cfg))
    assert len(bad) == 3
    if name not in _reference:
        _reference[name] = run(config(name), offline=bad)
    ref, _ = _reference[name]
    strategy, grid = run(faulty_cfg)

    rows = strategy.history[1:]
    assert len(rows) == strategy.cfg.num_server_rounds and not any(r.get("skipped") for r in rows)
    assert all(torch.isfinite(t.float()).all() for t in tensors(strategy))
    for row, ref_row in zip(rows, ref.history[1:]):
        # every faulty reply is dropped and counted under its reason, as many as the offline run
        # lost to the timeout (3 per exchange; other drops, if any, are the same in both runs)
        got, want = dict(row["dropped-reasons"]), dict(ref_row["dropped-reasons"])
        n = want.pop("timeout")
        assert n >= 3 and n % 3 == 0 and got.pop(REASON[kind]) == n and got == want
        assert row["dropped-replies"] == ref_row["dropped-replies"]
        assert row["replies"] == 7  # of 10 training clients
    # ... and nothing else differs: same model, same algorithm state, same metrics (bad replies
    # that arrived were uploaded, so their bytes count up where the offline clients' do not)
    arrived = kind in ("wrong-shape", "nan", "inf")
    assert same_rows(strategy.history, ref.history,
                     skip={"dropped-reasons", *([k for k in rows[-1] if "-up" in k] if arrived else [])})
    assert all(torch.equal(a, b) for a, b in zip(tensors(strategy), tensors(ref), strict=True))
    if kind in ("raise", "stall"):  # failed before fit returned: no state was ever committed
        assert all(not ctx.state.array_records for n, ctx in grid.contexts.items() if n - 101 in bad)


def test_fault_injection_is_off_by_default_and_seeded():
    cfg = parse_run_config({"num-clients": 10, "fault-fraction": 0.3})
    assert parse_run_config({}).fault_fraction == 0.0
    assert faulty_partitions(parse_run_config({})) == set()
    assert faulty_partitions(cfg) == faulty_partitions(cfg.replace(strategy="scaffold"))
    assert len(faulty_partitions(cfg.replace(fault_fraction=0.5))) == 5
    assert any(faulty_partitions(cfg.replace(seed=s)) != faulty_partitions(cfg) for s in range(1, 5))
    with pytest.raises(ConfigError, match="fault-kind"):
        parse_run_config({"fault-kind": "explode"})


# ---- reply validation ----------------------------------------------------------------------------
def test_reply_validation_reasons(config):
    strategy = build_strategy(parse_run_config(config("fedavg")))
    strategy.clients = {0: ClientInfo(101, 10, 2, False), 1: ClientInfo(102, 10, 2, False)}
    InProcessGrid(app, 2, config("fedavg"))  # sets the task identity that Flower messages carry
    spec = {"arrays": {"w": ((2,), torch.float32)}}

    def reply(node, metrics, arrays=None):
        sent = Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=node, message_type=MessageType.TRAIN)
        content = RecordDict({"metrics": MetricRecord(metrics)})
        if arrays is not None:
            content["arrays"] = ArrayRecord({"w": Array(arrays)})
        return Message(content, reply_to=sent)

    ok = np.array([1.0, 2.0], dtype=np.float32)
    cases = {
        "wrong-partition-id": reply(101, {"partition-id": 1, "num-examples": 4}, ok),
        "bad-num-examples": reply(101, {"partition-id": 0, "num-examples": 2.5}, ok),
        "non-finite": reply(101, {"partition-id": 0, "num-examples": 4, "train-loss": float("nan")}, ok),
        "wrong-shape": reply(101, {"partition-id": 0, "num-examples": 4}, ok[:1]),
        "wrong-dtype": reply(101, {"partition-id": 0, "num-examples": 4}, ok.astype(np.float64)),
        "wrong-records": reply(101, {"partition-id": 0, "num-examples": 4}),
        "unknown-node": reply(999, {"partition-id": 0, "num-examples": 4}, ok),
    }
    for reason, msg in cases.items():
        strategy.driver.wire.dropped.clear()
        assert strategy.driver.parse_replies([msg], {0: spec, 1: spec}) == []
        assert dict(strategy.driver.wire.dropped) == {reason: 1}, reason
    strategy.driver.wire.dropped.clear()
    good = [reply(102, {"partition-id": 1, "num-examples": 3}, ok),
            reply(101, {"partition-id": 0, "num-examples": 4}, ok),
            reply(101, {"partition-id": 0, "num-examples": 4}, ok)]
    valid = strategy.driver.parse_replies(good, {0: spec, 1: spec})
    assert [(r.pid, r.num_examples) for r in valid] == [(0, 4), (1, 3)]
    assert dict(strategy.driver.wire.dropped) == {"duplicate": 1}


def test_too_few_valid_replies_leave_the_state_unchanged(config):
    cfg = config("fedavg", **{"num-clients": 4, "min-train-nodes": 4, "fault-fraction": 0.3, "fault-kind": "nan"})
    strategy, _ = run(cfg)
    init = build_strategy(parse_run_config(cfg)).global_state
    assert all(r["skipped"] == 1 and r["replies"] == 3 for r in strategy.history[1:])
    assert all(torch.equal(strategy.global_state[k], v) for k, v in init.items())


# ---- client-side faults ------------------------------------------------------------------------
@pytest.mark.parametrize("name", strategies("scaffold"))
def test_a_client_failing_mid_round_keeps_its_last_committed_state(name, config, monkeypatch):
    """Partition 1 raises in round 2 after after_train already changed its state: nothing of that round
    is committed, and round 3 starts from round 1's state."""
    cls = registry.get(name).client
    seen: dict[int, dict] = {}
    real_fit, real_reply = cls.answer_train, cls.reply

    def fit(self, payload, cfg):
        if self.data.pid == 1:
            seen[int(cfg["server-round"])] = {k: {n: t.clone() for n, t in v.items()} for k, v in self.state.items()}
        return real_fit(self, payload, cfg)

    def reply(self, payload, cfg):
        if self.data.pid == 1 and int(cfg["server-round"]) == 2:
            raise RuntimeError("killed after after_train")
        return real_reply(self, payload, cfg)

    monkeypatch.setattr(cls, "answer_train", fit)
    monkeypatch.setattr(cls, "reply", reply)
    strategy, grid = run(config(name, **{"num-server-rounds": 3, "fraction-evaluate": 0.0}))
    assert [r["dropped-replies"] for r in strategy.history[1:]] == [0, 1, 0]
    after_round_1 = seen[2]
    assert after_round_1 and any(t.abs().sum() > 0 for v in after_round_1.values() for t in v.values())
    assert seen[3].keys() == after_round_1.keys()
    assert all(torch.equal(seen[3][k][n], t) for k, v in after_round_1.items() for n, t in v.items())


def test_every_client_failing_the_first_round_fails_the_run(config):
    """A set-up error at every site (here every client raising) stops the run with the clients'
    reason instead of finishing 'successfully' with skipped rounds; a later round may fail at every
    client (a fault) without stopping the run."""
    with pytest.raises(RuntimeError, match="round 1: no valid training reply in its first round.*"
                       "client-error: InjectedFault: fault-kind raise: 10"):
        run(config("fedavg", **{"fault-fraction": 1.0, "fault-kind": "raise"}))


# ---- checkpoints and resume --------------------------------------------------------------------
class Crash(Exception):
    pass


class CrashingGrid(InProcessGrid):
    """Stops the server (raises) when the first training message of round ``at`` is sent."""

    def __init__(self, *args, at: int, **kw):
        super().__init__(*args, **kw)
        self.at = at

    def push_messages(self, messages):
        messages = list(messages)
        for msg in messages:
            if msg.metadata.message_type == MessageType.TRAIN and msg.content["config"].get("server-round") == self.at:
                raise Crash(f"server stopped before round {self.at}")
        return super().push_messages(messages)


# FedAvg's clients are stateless, so it may crash rounds after its last checkpoint (they are run
# again); stateful clients have committed those rounds, so they crash right after a checkpoint
RESUME = [("fedavg", 2, 4), *[(n, 1, 3) for n in ("scaffold", "fedals", "hcct", "pefll", *BASELINES)]]


@pytest.mark.parametrize("name,every,crash_at", [pytest.param(*c, marks=registered(c[0])) for c in RESUME])
def test_interrupted_run_resumed_from_checkpoint_equals_uninterrupted(name, every, crash_at, config, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)  # seconds of matplotlib per run
    rounds = 4
    base = config(name, **{"num-clients": 4, "num-server-rounds": rounds, "checkpoint-every": every,
                           "fraction-train": 1.0 if name == "hcct" else 0.5})
    full = run_local({**base, "run-name": "full"})

    grid = CrashingGrid(app, 4, base, at=crash_at)
    with pytest.raises(Crash):
        run_local(base, grid=grid)
    folder = tmp_path / "results" / "r"
    saved = torch.load(folder / "checkpoint.pt", weights_only=False)
    assert saved["round"] == (crash_at - 1) // every * every
    # the clients kept their state (SuperNodes' contexts; state-dir on real sites)
    resumed_cfg = {**base, "resume-from": str(folder)}
    grid2 = InProcessGrid(app, 4, resumed_cfg)
    for node, ctx in grid2.contexts.items():
        ctx.state = grid.contexts[node].state
    resumed = run_local(resumed_cfg, grid=grid2)

    assert [r["round"] for r in resumed.history] == list(range(rounds + 1))
    assert same_rows(resumed.history, full.history)
    assert all(torch.equal(a, b) for a, b in zip(tensors(resumed), tensors(full), strict=True))
    doc = json.loads((folder / "rounds.json").read_text())
    assert [r["round"] for r in doc["rounds"]] == list(range(rounds + 1))
    assert same_rows(doc["rounds"], json.loads((tmp_path / "results" / "full" / "rounds.json").read_text())["rounds"])


class MidRoundCrash(InProcessGrid):
    """Stops the server (raises) once the clients of round ``at``'s first training exchange have
    trained and committed that round's state, before the server sees a reply: a SuperLink killed
    mid-round."""

    def __init__(self, *args, at: int, **kw):
        super().__init__(*args, **kw)
        self.at = at

    def push_messages(self, messages):
        messages = list(messages)
        ids = super().push_messages(messages)
        if any(m.metadata.message_type == MessageType.TRAIN and m.content["config"]["server-round"] == self.at
               for m in messages):
            raise Crash(f"server stopped in round {self.at}")
        return ids


def client_states(grid):
    """Every node's latest committed client state, flattened in a fixed order."""
    cfg = parse_run_config(grid.run_config)
    return {node: {f"{name}/{k}": v for name, tensors in sorted((load_state(ctx, cfg) or {}).items())
                   for k, v in sorted(tensors.items())} for node, ctx in sorted(grid.contexts.items())}


#: every algorithm whose clients keep state between rounds (FedCM and MoFedSAM keep theirs on the server)
STATEFUL = ["scaffold", "feddyn", "fedsmoo", "fedals", "fedals-scaffold", "hcct-p", "maxfl", "fedrep", "local",
            "pefll", "pfedme"]


@pytest.mark.parametrize("name", strategies(*STATEFUL))
def test_resume_after_a_crash_mid_round_is_exact(name, config, tmp_path, monkeypatch):
    """The server stops in round 3 after its clients trained it (they committed round 3's state);
    the run resumed from the round-2 checkpoint asks each client for its state of round 2, not
    the newer one, and ends bit for bit as the uninterrupted run: rows, server state and every
    client's state."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    base = config(name, **{"num-clients": 4, "num-server-rounds": 4, "checkpoint-every": 1,
                           "fraction-train": 1.0 if name.startswith("hcct") else 0.5, "keep-client-state": True,
                           **({"fedals.alpha": 3} if name.startswith("fedals") else {}),
                           **({"fedrep.head-steps": 2} if name == "fedrep" else {})})
    full_grid = InProcessGrid(app, 4, base)
    full = run_local({**base, "run-name": "full"}, grid=full_grid)

    grid = MidRoundCrash(app, 4, base, at=3)
    with pytest.raises(Crash):
        run_local(base, grid=grid)
    folder = tmp_path / "results" / "r"
    assert torch.load(folder / "checkpoint.pt", weights_only=False)["round"] == 2
    committed = {int(ctx.state["state-versions"]["latest"]) for ctx in grid.contexts.values()
                 if "state-versions" in ctx.state}
    assert 3 in committed  # the clients ran ahead of the checkpoint
    resumed_cfg = {**base, "resume-from": str(folder)}
    grid2 = InProcessGrid(app, 4, resumed_cfg)
    for node, ctx in grid2.contexts.items():
        ctx.state = grid.contexts[node].state
    resumed = run_local(resumed_cfg, grid=grid2)

    assert same_rows(resumed.history, full.history)
    assert all(torch.equal(a, b) for a, b in zip(tensors(resumed), tensors(full), strict=True))
    want, got = client_states(full_grid), client_states(grid2)
    assert any(want.values()) and got.keys() == want.keys()
    for node in want:
        assert got[node].keys() == want[node].keys() and all(torch.equal(got[node][k], v)
                                                             for k, v in want[node].items())


def test_resume_after_lost_client_state_says_which_clients_restart(config, tmp_path, monkeypatch, caplog):
    """A resume whose clients hold no state (a new simulation, wiped sites) goes on, and says in one
    line which partitions restart their state from scratch."""
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    base = config("scaffold", **{"num-clients": 4, "num-server-rounds": 3, "checkpoint-every": 1,
                                 "fraction-train": 0.5})
    with pytest.raises(Crash):
        run_local(base, grid=MidRoundCrash(app, 4, base, at=3))
    trained = {pid for pid, r in torch.load(tmp_path / "results" / "r" / "checkpoint.pt",
                                            weights_only=False)["attrs"]["state_rounds"].items() if r}
    with caplog.at_level(logging.WARNING):
        resumed = run_local({**base, "resume-from": str(tmp_path / "results" / "r")})
    lines = [r.getMessage() for r in caplog.records if "restart it from scratch" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("round 3: partition(s) ")
    lost = resumed.history[3]["state-lost"]
    assert set(lost) <= trained and lines[0].startswith(f"round 3: partition(s) {', '.join(map(str, lost))} ")
    assert [r["round"] for r in resumed.history] == [0, 1, 2, 3]


def test_resume_refuses_a_checkpoint_of_other_settings(config, tmp_path, monkeypatch):
    monkeypatch.setattr("fedapp.runtime.results.plot", lambda *a, **kw: None)
    base = config("fedavg", **{"num-clients": 4, "checkpoint-every": 1})
    run_local(base)
    with pytest.raises(ConfigError, match=r"lr \(0\.05 there, 0\.1 here\)"):
        run_local({**base, "lr": 0.1, "run-name": "other", "resume-from": str(tmp_path / "results" / "r")})
    with pytest.raises(ConfigError, match="no checkpoint"):
        run_local({**base, "resume-from": str(tmp_path / "nowhere")})


# ---- determinism -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", strategies("fedavg", "scaffold", *BASELINES))
def test_same_seed_same_metrics_other_seed_other_metrics(name, config):
    cfg = config(name, **{"num-clients": 4, "fraction-train": 0.5})
    a, b = run(cfg)[0], run(cfg)[0]
    c = run({**cfg, "seed": 6})[0]
    assert same_rows(a.history, b.history)
    assert all(torch.equal(x, y) for x, y in zip(tensors(a), tensors(b), strict=True))
    assert [r.get("train-loss") for r in a.history] != [r.get("train-loss") for r in c.history]
    assert not torch.equal(a.global_state["fc.weight"], c.global_state["fc.weight"])
