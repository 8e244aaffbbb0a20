"""Shared test settings: Flower offline and private, small torch thread pool."""

import os

# One BLAS thread: on a loaded 2-core machine numpy's threads slow small dot products 20-1000x.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")
torch.set_num_threads(1)

SHARED_DATA = ROOT.parent / "shared" / "data"

APP = ("pyproject.toml", "README.md", "LICENSE", ".gitignore", "fedapp", "strategies", "clients")


def app_checkout(dest: Path) -> Path:
    """The app's files (what `flwr run` packs into its FAB) as another checkout at ``dest``. `flwr run`
    of the copy ships the same FAB, and builds it in a fraction of a second: Flower's ``collect_files``
    walks every file under the app's folder before filtering, in this checkout the .venv's 50,000."""
    dest.mkdir(parents=True)
    for name in APP:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dest / name)
    return dest


def absent_data(name: str, data_dir: str = "") -> str | None:
    """Why dataset ``name`` cannot be read here offline, or None: a dataset of the hub that no folder
    fedapp searches holds (``../shared/data`` beside the checkout, ``$FEDAPP_DATA``, ...). A test that
    needs it skips with this reason; the suite never reaches the hub."""
    from fedapp.core.data import sources

    if name not in sources.DATASETS or sources.DATASETS[name].hub_id is None:
        return None  # synthetic, or read from data_dir, whose test makes it
    dirs = sources.search_dirs(data_dir)
    if sources._find_local(name, dirs) is not None:
        return None
    return f"dataset {name!r} is not on this machine (looked in {', '.join(map(str, dirs))})"


@pytest.fixture
def small_config(tmp_path):
    """A fast run config on the offline synthetic data."""
    return {
        "num-clients": 4, "num-server-rounds": 2, "local-steps": 3, "batch-size": 16,
        "results-dir": str(tmp_path / "results"), "run-name": "t", "seed": 3,
    }


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: tens of seconds, mostly waiting on real Flower processes (a SuperLink, "
                                       "SuperNodes, `flwr run`) or a whole run")
    # pytest-xdist 3.8 would hand out the groups of most tests first, and then the rest in this order
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the group into the node id
def pytest_collection_modifyitems(items):
    """Under pytest-xdist's ``--dist loadgroup`` (scripts/test.sh) tests spread over the workers one
    by one; those that share a module-scoped fixture (a federation of real processes, a run made once)
    stay together on one worker, so the fixture starts once. The ``slow`` tests go first, the order
    otherwise kept: started last, one of them would be the run's end while the other workers idle."""
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        if defs and any(d.scope == "module" for ds in defs.name2fixturedefs.values() for d in ds):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
