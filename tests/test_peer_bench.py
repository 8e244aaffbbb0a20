"""The peer benchmark's harness (simulations/bench/peer.py): fedapp and pfl-research start from the same
images and the same model, so their round-0 central evaluations agree."""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "simulations" / "bench"))

try:
    import pfl  # noqa: F401
except ImportError:
    pfl = None


def _image_tree(root: Path, classes: int = 3, train: int = 8, test: int = 5) -> Path:
    """Random 32x32 RGB PNGs in ``root/{train,test}/<class>/``, each class its own mean colour."""
    rng = np.random.default_rng(7)
    for split, n in (("train", train), ("test", test)):
        for c in range(classes):
            folder = root / split / f"c{c}"
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = np.clip(rng.normal(60 + 60 * c, 40, (32, 32, 3)), 0, 255).astype(np.uint8)
                buf = io.BytesIO()
                Image.fromarray(pixels).save(buf, format="PNG")
                (folder / f"{i}.png").write_bytes(buf.getvalue())
    return root


@pytest.mark.skipif(pfl is None, reason="pfl-research is not installed (the bench extra, which conflicts with dev)")
def test_peer_round0_equal(tmp_path, monkeypatch):
    import peer

    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    cfg = {**peer.WORKLOAD, "dataset": "imagefolder", "data-dir": str(_image_tree(tmp_path / "tree")),
           "num-clients": 4, "fraction-train": 0.5, "num-server-rounds": 1, "eval-every": 1,
           "results-dir": str(tmp_path / "results"), "run-name": "peer"}
    export = peer.export(cfg, tmp_path / "export")
    z = np.load(export / "data.npz")
    # the partitions exported are fedapp's: every training image once, in 4 clients
    assert sorted(z["users"].tolist()) == list(range(24)) and z["offsets"].tolist() == [0, 6, 12, 18, 24]

    ours, theirs = tmp_path / "fedapp" / "events.jsonl", tmp_path / "pfl" / "events.jsonl"
    ours.parent.mkdir()
    theirs.parent.mkdir()
    peer.fedapp_child(cfg, peer.Events(str(ours), str(ours.parent)))
    # pfl in its own process: importing it sets torch.multiprocessing's start method for the whole process
    subprocess.run([sys.executable, str(ROOT / "simulations/bench/peer.py"), "--child", "pfl", "--data", str(export),
                    "--rounds", "1", "--every", "1", "--events", str(theirs)], check=True, cwd=ROOT)
    a, b = (json.loads(f.read_text().splitlines()[0]) for f in (ours, theirs))
    assert a["round"] == b["round"] == 0
    # 15 test images: accuracy is a count over 15; the loss, summed in float64 against pfl's float sums
    assert a["accuracy"] == pytest.approx(b["accuracy"], abs=1e-9)
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
    assert 0 < a["loss"] < 10
