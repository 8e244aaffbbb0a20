"""The built-in ``shakespeare`` dataset (LEAF's next-character task from the raw plays) and ``lstm``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SHARED_DATA
from fedapp.core.data import load_dataset
from fedapp.core.data.text import SHAKESPEARE_WINDOW
from fedapp.runtime.inprocess import run_local
from fedapp.core.models import build_model, param_count

PLAYS = SHARED_DATA / "shakespeare.tar.gz"
needs_plays = pytest.mark.skipif(not PLAYS.is_file(), reason=f"the raw plays are not at {PLAYS}")


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One derivation for the module's tests (about 10 s), in a private cache."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _private_cache(cache, monkeypatch):
    monkeypatch.setenv("FEDAPP_CACHE", str(cache))


def test_lstm_is_leafs_shakespeare_model():
    """Caldas et al.: embedding 8, two LSTM layers of 256, a linear head over the characters."""
    model = build_model("lstm", (SHAKESPEARE_WINDOW,), 82, vocab_size=82, seq_len=SHAKESPEARE_WINDOW)
    lstm = 4 * 256 * (8 + 256 + 2) + 4 * 256 * (256 + 256 + 2)  # gates: input and hidden weights, two biases
    assert param_count(model) == 82 * 8 + lstm + 256 * 82 + 82 == 820_450
    assert model.lstm.num_layers == 2 and model.embed.embedding_dim == 8


@needs_plays
def test_shakespeare_roles_windows_and_split():
    ds = load_dataset("shakespeare", str(SHARED_DATA), num_clients=5, seed=0)
    assert ds.input_shape == (SHAKESPEARE_WINDOW,) and ds.train_x.dtype == torch.int8
    # LEAF's 80 characters, padding and unknown
    assert ds.num_classes == ds.vocab_size == 82 and sorted(np.unique(ds.train_client)) == [0, 1, 2, 3, 4]
    for role in range(5):  # each window is the role's text, the label its next character
        x, y = ds.train_x[ds.train_client == role], ds.train_y[ds.train_client == role]
        assert torch.equal(x[1:, :-1], x[:-1, 1:]) and torch.equal(x[1:, -1].long(), y[:-1])
        # the first test window starts one window after the last training window's label
        tx = ds.test_x[ds.test_client == role]
        if len(tx):
            assert len(tx) + len(x) + SHAKESPEARE_WINDOW - 1 <= len(x) / 0.9 + SHAKESPEARE_WINDOW
    again = load_dataset("shakespeare", str(SHARED_DATA), num_clients=5, seed=0)  # from the cache
    assert torch.equal(again.train_x, ds.train_x)


@needs_plays
def test_shakespeare_lstm_trains(tmp_path):
    """FedAvg with LEAF's LSTM (and LEAF's step size 0.8) on three roles: the loss falls and the next
    character is predicted far above chance (1 in 82). Evaluated centrally only, to keep it short."""
    strategy = run_local({"dataset": "shakespeare", "data-dir": str(SHARED_DATA), "model": "lstm",
                          "partition": "natural", "num-clients": 3, "num-server-rounds": 2, "local-steps": 10,
                          "batch-size": 16, "lr": 0.8, "fraction-evaluate": 0.0, "seed": 2,
                          "results-dir": str(tmp_path), "run-name": "r"})
    rows = strategy.history
    assert rows[-1]["train-loss"] < rows[1]["train-loss"]
    assert rows[-1]["central-loss"] < rows[0]["central-loss"]
    assert rows[-1]["central-accuracy"] > 0.1 > rows[0]["central-accuracy"]


def made_up_play(folder, speakers: tuple[str, ...], seed: int) -> str:
    """A play of made-up speech in the raw plays' layout, in ``folder``."""
    rng = np.random.default_rng(seed)
    words = ["thou", "art", "the", "moon", "and", "I", "shall", "go", "hence", "good", "night", "sweet"]
    turns = []
    for i in range(12):
        speech = "\n".join(" ".join(rng.choice(words, 8)) + "," for _ in range(3))
        turns.append(f"{speakers[i % len(speakers)]}.\n{speech}\n")
    folder.mkdir(parents=True)
    (folder / "play.txt").write_text("A PLAY\n\nACT I.\n\nScene I. A heath.\n\n" + "\n".join(turns))
    return str(folder)


def test_each_site_serves_its_own_plays(tmp_path):
    """Every site's node config points at its own plays; one vocabulary, so one model, everywhere."""
    from fedapp.runtime.client_app import app
    from fedapp.runtime.inprocess import InProcessGrid

    server = made_up_play(tmp_path / "server" / "shakespeare", ("Ham", "Hor"), 0)
    sites = [made_up_play(tmp_path / f"site{i}", ("Lear", "Fool", "Kent"), i + 1) for i in range(2)]
    cfg = {"dataset": "shakespeare", "data-dir": str(Path(server).parent), "model": "lstm", "partition": "natural",
           "num-clients": 2, "num-server-rounds": 1, "local-steps": 2, "batch-size": 16, "lr": 0.8,
           "results-dir": str(tmp_path / "results"), "run-name": "r"}
    nodes = [{"partition-id": i, "data-dir": d} for i, d in enumerate(sites)]
    strategy = run_local(cfg, grid=InProcessGrid(app, 2, cfg, node_configs=nodes))
    own = [load_dataset("shakespeare", d, num_clients=0) for d in sites]  # all three roles of a site are one client
    assert {p: c.num_train + c.num_test for p, c in strategy.clients.items()} == {
        i: len(ds.train_y) for i, ds in enumerate(own)}
    assert strategy.history[-1]["replies"] == 2
