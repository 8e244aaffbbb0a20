"""FedALS Fig. 1 (simulations/fedals/figure1.py): the consensus distance of each layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simulations.fedals import figure1

ROOT = Path(__file__).resolve().parents[1]


def test_consensus_distance_by_hand():
    """Two layers, K = 2 clients: layer a (values 1, 3 and 0, 0) has mean (0.5, 1.5) and distance
    ((0.5^2 + 1.5^2) * 2) / 2 = 2.5; layer b (2 and -2) has mean 0 and distance (4 + 4) / 2 = 4."""
    states = [{"a.w": torch.tensor([1.0, 3.0]), "b.w": torch.tensor([2.0])},
              {"a.w": torch.tensor([0.0, 0.0]), "b.w": torch.tensor([-2.0])}]
    assert figure1.consensus(states, [["a.w"], ["b.w"]]) == pytest.approx([2.5, 4.0])


def test_figure1_records_every_round_and_layer():
    """A two-round smoke run records, per round, one distance per layer of the model, all positive (the
    clients' models differ after their steps); the committed cpu run's table is on the FedALS page."""
    result = figure1.measure(2, 0, smoke=True)
    assert len(result["distance"]) == 2 and all(len(r) == len(result["layers"]) == 3 for r in result["distance"])
    assert all(d > 0 for r in result["distance"] for d in r)
    committed = ROOT / "simulations" / "fedals" / "figure1-cpu.json"
    page = (ROOT / "simulations" / "fedals" / "README.md").read_text()
    assert figure1.summary_table(json.loads(committed.read_text())) in page
