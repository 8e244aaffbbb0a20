"""simulations/reliability/non_iid_limits.py: the most anti-aligned pairs of replies, honest and with an
attacker, and their table on docs/reliability.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from simulations.reliability import non_iid_limits as limits

ROOT = Path(__file__).resolve().parents[1]


def test_pair_minima_by_hand():
    """Three replies sent one model (updates (1, 0), (-1, 1), (0, 1)) and a delta record each ((1, 0),
    (1, 1), (-1, 0)); partition 2 the attacker: the honest pair (0, 1) has cosine -1/sqrt(2), the
    attacker's pairs 0 and 1/sqrt(2) (model), and -1, -1/sqrt(2) (delta)."""
    sent = torch.zeros(2)
    pairs = [{("arrays", "w"): (torch.tensor(u), sent), ("delta", "d"): (torch.tensor(d), None)}
             for u, d in (([1.0, 0.0], [1.0, 0.0]), ([-1.0, 1.0], [1.0, 1.0]), ([0.0, 1.0], [-1.0, 0.0]))]
    got = limits.pair_minima(pairs, bad={2}, pids=[0, 1, 2])
    assert got["model"] == pytest.approx((-2 ** -0.5, 0.0))
    assert got["delta"] == pytest.approx((2 ** -0.5, -1.0))


def test_non_iid_limits_on_the_page():
    """docs/reliability.md shows the committed measurement's table and Multi-Krum line as printed."""
    done = json.loads((ROOT / "simulations" / "reliability" / "non-iid-limits.json").read_text())
    page = (ROOT / "docs" / "reliability.md").read_text()
    assert limits.table(done) in page and limits.krum_line(done) in page
    assert len(done) == len(limits.runs())  # every run of the script is in the committed file
