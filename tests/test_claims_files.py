"""The claims files of the four papers keep one format: each claim with its kind, the paper's and
our numbers, the seeds, whether it holds (and why not), its setting and the command that made it."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"id", "kind", "claim", "paper", "ours", "reference_code", "seeds", "holds", "note", "setting", "command"}


@pytest.mark.parametrize("paper", ["fedsmoo", "fedals", "pefll", "hcct"])
def test_claims_file_format(paper):
    claims = json.loads((ROOT / "simulations" / paper / "claims.json").read_text())
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
        assert c["kind"] in {"learning", "bookkeeping", "construction", "code-equality"}, c["kind"]
        assert c["holds"] or c["note"], f"{c['id']}: a claim that does not hold says why"
        assert c["command"].startswith(("python -m simulations.", "python -m pytest ")), c["command"]
