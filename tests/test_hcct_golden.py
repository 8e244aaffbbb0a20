"""HCCT against numbers stored from the authors' code (simulations/hcct/authors_golden.py)."""

import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

from clients.hcct import HCCTClient
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import ClientData
from fedapp.core.models import build_model
from fedapp.server.discovery import ClientInfo
from fedapp.server.replies import Reply
from strategies.hcct import HCCT

GOLDEN = json.loads((Path(__file__).parent / "data" / "hcct_authors_golden.json").read_text())
SETTING = tomllib.loads((Path(__file__).parents[1] / "simulations" / "hcct" / "golden.toml").read_text())
ALPHAS = sorted(float(a) for a in GOLDEN["runs"])


def run_ours(alpha: float, first_round: str = "global") -> list[dict]:
    """Our server strategy and client on the golden setting; the epochs' groups and client models."""
    cfg = parse_run_config({**SETTING, "hcct.alpha": alpha, "hcct.first-round": first_round})
    model = build_model("logreg", (6,), 3)
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    model.load_state_dict({k: torch.tensor(v).reshape(shapes[k]) for k, v in GOLDEN["init"].items()})
    strategy = HCCT(cfg, model, None)
    clients = {}
    for pid, d in enumerate(GOLDEN["data"]):
        x, y = torch.tensor(d["x"]), torch.tensor(d["y"])
        data = ClientData(pid, x, y, x[:0], y[:0], 3, (), (), False)
        clients[pid] = HCCTClient(cfg, build_model("logreg", (6,), 3), data)
        strategy.clients[pid] = ClientInfo(pid, len(y), 0, False)
    epochs = []
    for rnd in range(1, cfg.num_server_rounds + 1):  # train_round without the message exchange
        strategy.groups = strategy.partition(rnd, sorted(clients))
        strategy.starts = {g: strategy.group_start(g) for g in strategy.groups}
        replies = [Reply(pid, *c.answer_train(strategy.train_payload(pid, rnd), {**strategy.client_config("train", pid, rnd), "server-round": rnd}))
                   for pid, c in clients.items()]
        strategy.aggregate(rnd, replies)
        epochs.append({"groups": sorted(list(g) for g in strategy.groups), "models": dict(strategy.models)})
    return epochs


@pytest.mark.parametrize("alpha", sorted(GOLDEN["runs"], key=float))
def test_matches_authors_hcct_code(alpha):
    """Same groups every epoch and the same group models (float32 tolerance) as the authors' loop,
    with their first epoch (one group of all clients: hcct.first-round = "global")."""
    theirs = GOLDEN["runs"][alpha]
    ours = run_ours(float(alpha))
    assert [e["groups"] for e in ours] == [e["groups"] for e in theirs]
    for o, t in zip(ours, theirs):
        for pid, state in t["models"].items():
            for k, v in state.items():
                np.testing.assert_allclose(o["models"][int(pid)][k].flatten().numpy(), v, rtol=1e-5, atol=1e-6)


def test_setting_file_is_the_fixture_setting():
    """golden.toml (the claims file's setting) is what the authors' code ran."""
    base = SETTING
    assert (base["num-clients"], base["num-server-rounds"]) == (len(GOLDEN["data"]), GOLDEN["epochs"])
    assert (base["lr"], base["lr-decay"], base["batch-size"]) == (GOLDEN["lr"], GOLDEN["lr-decay"], GOLDEN["batch-size"])
    assert ALPHAS == [0.0, 30.0, 200.0]  # the comment of golden.toml


def test_paper_first_round_is_the_documented_difference():
    """Algorithm 1 starts with singletons (our default): the first epoch differs from the authors'."""
    ours = run_ours(30.0, first_round="singletons")
    assert ours[0]["groups"] == [[0], [1], [2], [3], [4]]
    assert GOLDEN["runs"]["30.0"][0]["groups"] == [[0, 1, 2, 3, 4]]
