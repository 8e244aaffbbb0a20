"""Config errors that need the data, the model or the machine: named by key, before any run."""

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedapp.core.config import ConfigError
from fedapp.core.experiment import dataset
from fedapp.runtime.inprocess import run_local
from fedapp.runtime.preflight import check

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))


def tree(root: Path, splits=("train", "test"), per_class=3, mode=lambda split: "L") -> Path:
    """An ImageFolder tree of 6x5 images, two classes, ``per_class`` images each per split."""
    rng = np.random.default_rng(0)
    for split in splits:
        for label in ("a", "b"):
            (root / split / label).mkdir(parents=True)
            for i in range(per_class):
                img = Image.fromarray(rng.integers(0, 256, (6, 5), dtype=np.uint8)).convert(mode(split))
                img.save(root / split / label / f"{i}.png")
    return root


@pytest.mark.parametrize("overrides, key", [
    ({"partition": "pathological", "partition-classes": 11}, "partition-classes"),  # synthetic has 10 classes
    ({"model": "resnet20"}, "model"),  # synthetic: 60 features, not images
    ({"lrr": 0.1}, "lrr"),
    ({"unseen-fraction": 0.9, "num-clients": 2}, "unseen-fraction"),
    ({"partition": "shards-halfnormal", "partition-shards": 1}, "partition-shards"),
    ({"dataset": "cifar10", "partition": "iid", "data-dir": "/nonexistent/data"}, "data-dir"),
    ({"resume-from": "/nonexistent/checkpoint.pt"}, "resume-from"),
    ({"app-dir": "/nonexistent/myapp"}, "app-dir"),  # an app moved since `fedapp new` recorded its folder
])
def test_config_error_names_its_key_in_one_line(overrides, key):
    with pytest.raises(ConfigError) as err:
        check(overrides)
    assert f"'{key}'" in str(err.value) and "\n" not in str(err.value)


def test_misspelled_key_suggests_the_right_one():
    with pytest.raises(ConfigError, match="'lrr': did you mean 'lr'"):
        check({"lrr": 0.1})


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_gpu_is_a_config_error():
    with pytest.raises(ConfigError, match="'device' = 'cuda' but torch finds no CUDA"):
        check({"device": "cuda"})
    check({"device": "cuda"}, local=False)  # a deployment's clients may have the GPU


def test_more_clients_than_examples(tmp_path):
    data = tree(tmp_path / "t", per_class=2)  # 4 training images
    with pytest.raises(ConfigError, match="'num-clients' = 5 exceeds the 4 training examples"):
        check({"dataset": "imagefolder", "data-dir": str(data), "partition": "iid", "num-clients": 5})


def test_corrupt_image_names_its_file(tmp_path):
    data = tree(tmp_path / "t")
    (data / "train" / "b" / "1.png").write_bytes(b"not a png")
    with pytest.raises(ConfigError, match=r"'data-dir'.*cannot decode image .*train/b/1\.png"):
        check({"dataset": "imagefolder", "data-dir": str(data), "partition": "iid"})


def test_grey_train_and_rgb_test_load_as_rgb(tmp_path):
    data = tree(tmp_path / "t", mode=lambda split: "L" if split == "train" else "RGB")
    cfg = check({"dataset": "imagefolder", "data-dir": str(data), "partition": "iid"})
    ds = dataset(cfg)
    assert ds.train_x.shape[1:] == ds.test_x.shape[1:] == (3, 6, 5)
    assert torch.equal(ds.train_x[:, 0], ds.train_x[:, 2])  # grey widened: equal channels


def test_corrupt_checkpoint_names_resume_from(tmp_path):
    bad = tmp_path / "checkpoint.pt"
    bad.write_bytes(b"\x80\x04garbage")
    with pytest.raises(ConfigError, match="'resume-from' = .*cannot read it as a checkpoint"):
        check({"resume-from": str(bad)})


def test_no_test_split_turns_central_evaluation_off(tmp_path, caplog):
    caplog.set_level("WARNING", logger="flwr")
    data = tree(tmp_path / "t", splits=("train",), per_class=4)
    strategy = run_local({"dataset": "imagefolder", "data-dir": str(data), "partition": "iid", "num-clients": 2,
                          "num-server-rounds": 1, "local-steps": 1, "results-dir": str(tmp_path / "r")})
    assert strategy.history and not any("central-accuracy" in row for row in strategy.history)
    assert all("fed-accuracy" in row for row in strategy.history[1:])
    assert "has no test split: central evaluation is off" in caplog.text


def _command_lines() -> list[str]:
    """The command line of every process now running."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:  # the process ended meanwhile
            pass
    return lines


def test_launcher_names_a_config_error_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedapp.runtime.launch", "--flwr-home", str(tmp_path / "h"),
                          "--run-config", "partition='pathological' partition-classes=11"],
                         cwd=ROOT, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["error: run config 'partition-classes' = 11 exceeds the 10 classes of "
                                       "dataset 'synthetic'"]
    # nothing was submitted: the local SuperLink the launcher starts beside its check holds no run, and is gone
    state = tmp_path / "h" / "local-superlink" / "state.db"
    if state.exists():
        with sqlite3.connect(state) as db:  # a SuperLink stopped before it wrote its schema has no run table
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            assert "run" not in tables or db.execute("SELECT COUNT(*) FROM run").fetchone() == (0,)
    assert not [c for c in _command_lines() if str(tmp_path / "h") in c]


def _set_up() -> bool:
    """scripts/setup.sh has run for this checkout and pyproject.toml (so run.sh will not install)."""
    stamp = ROOT / ".venv" / "fedapp-setup.stamp"
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return stamp.is_file() and stamp.read_text().split() == [str(ROOT), digest]


@pytest.mark.skipif(not _set_up(), reason="scripts/setup.sh has not set up .venv for this checkout")
def test_run_sh_names_a_config_error_in_one_line():
    out = subprocess.run(["bash", "scripts/run.sh", "lrr=0.1"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.splitlines() == ["error: unknown run config key(s): 'lrr': did you mean 'lr'? "
                                       "(python -m fedapp list shows every key)"]


def test_release_data_gives_back_what_the_check_loaded(tmp_path):
    import gc
    import weakref

    from fedapp.core import experiment

    experiment.release_data()  # what earlier tests left cached
    data = tree(tmp_path / "imgs")
    cfg = check({"dataset": "imagefolder", "data-dir": str(data), "partition": "iid", "num-clients": 2})
    held = weakref.ref(dataset(cfg).train_x)  # the check's copy, still cached
    assert held() is not None and experiment._partitions.cache_info().currsize == 1
    experiment.release_data()
    gc.collect()
    assert held() is None and experiment._dataset.cache_info().currsize == 0
    assert experiment._partitions.cache_info().currsize == 0
