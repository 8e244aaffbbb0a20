"""Shared test settings: Flower offline and private, small torch thread pool."""

import os

# One BLAS thread: on a loaded 2-core machine numpy's threads slow small dot products 20-1000x.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

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


@pytest.fixture
def small_config(tmp_path):
    """A fast run config on the offline synthetic data."""
    return {
        "num-clients": 4, "num-server-rounds": 2, "local-steps": 3, "batch-size": 16,
        "results-dir": str(tmp_path / "results"), "run-name": "t", "seed": 3,
    }


def pytest_collection_modifyitems(items):
    """Under pytest-xdist's ``--dist loadgroup`` (scripts/test.sh) tests spread over the workers one
    by one; those that share a module-scoped fixture (a federation of real processes, a run made once)
    stay together on one worker, so the fixture starts once."""
    for item in items:
        defs = getattr(item, "_fixtureinfo", None)
        if defs and any(d.scope == "module" for ds in defs.name2fixturedefs.values() for d in ds):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
