"""fedapp as a user installs it: the wheel `pip install .` builds, with its `fedapp` command, and an app
folder `fedapp new` writes, run from that folder through `fedapp run` and plain `flwr run`."""

import csv
import io
import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fedapp.__main__ import list_algorithms
from fedapp.runtime.appdir import flat
from fedapp.runtime.launch import BIN, flwr_env, free_port_base, launched_processes, stop_local_superlink
from fedapp.runtime.registry import defaults
from tests.conftest import ROOT


def clean_env(**extra) -> dict:
    """This environment without a PYTHONPATH that would put the checkout on the path."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **extra}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment with fedapp's wheel installed, offline: built from the checkout without
    build isolation, installed without its dependencies, which a .pth file takes from this environment
    (after the environment's own site-packages, where the wheel's packages are)."""
    tmp = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    wheel = next((tmp / "dist").glob("fedapp-*.whl"))
    subprocess.run([*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "--no-index", str(wheel)],
                   check=True, capture_output=True)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_wheel_installs_packages_and_command(installed, tmp_path):
    wheel = next(installed.parent.glob("dist/fedapp-*.whl"))
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert tops == {"fedapp", "strategies", "clients", wheel.name.split("-py3")[0] + ".dist-info"}
    where = subprocess.run([str(installed / "bin" / "python"), "-c",
                            "import fedapp, strategies, clients; print(fedapp.__file__, strategies.__file__, "
                            "clients.__file__)"], cwd=tmp_path, env=clean_env(), capture_output=True, text=True,
                           check=True).stdout.split()
    site = installed / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert [Path(p) for p in where] == [site / name / "__init__.py" for name in ("fedapp", "strategies", "clients")]
    # the command lists what the checkout's registry lists, line for line
    listed = subprocess.run([str(installed / "bin" / "fedapp"), "list"], cwd=tmp_path, env=clean_env(),
                            capture_output=True, text=True, check=True).stdout
    expected = io.StringIO()
    list_algorithms(expected)
    assert listed == expected.getvalue() and "\nfedsmoo  (strategies.fedsmoo.FedSMOO)" in listed
    # and writes an app whose run config is the registry's defaults, its folder recorded as app-dir
    subprocess.run([str(installed / "bin" / "fedapp"), "new", "myapp"], cwd=tmp_path, env=clean_env(), check=True,
                   capture_output=True)
    table = flat(tomllib.loads((tmp_path / "myapp" / "pyproject.toml").read_text())["tool"]["flwr"]["app"]["config"])
    assert table == {**defaults(), "app-dir": str(tmp_path / "myapp")}


#: the commands the docs give for the installed path, as the tests run them (the wheel: built and installed
#: offline by ``installed``; ``new_app`` and ``test_new_app_runs_from_its_folder`` the others, from the folder above)
COMMANDS = ["pip install '.[simulation]'", "fedapp new myapp", "fedapp run myapp",
            "export FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1", "flwr run myapp --stream"]
MODEL = """import torch


def build(input_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(input_shape[0], num_classes))
"""


@pytest.mark.parametrize("page", ["README.md", "docs/flower-library.md"])
def test_docs_show_the_installed_path_first(page):
    text = (ROOT / page).read_text()
    first = text.index(COMMANDS[0])
    block = text[first:text.index("\n\n", first)].replace("```", "").splitlines()
    assert [line.split("#")[0].strip() for line in block if line.strip()] == COMMANDS
    assert first < text.index("bash scripts/")  # the checkout's path second


@pytest.fixture(scope="module")
def new_app(tmp_path_factory) -> Path:
    """`fedapp new myapp`, with a model of its own (package mynet) and a CSV dataset of 240 rows in its
    folder's data/: 4 features, labels named by strings and learnable (the argmax of a fixed linear map)."""
    tmp = tmp_path_factory.mktemp("user")
    subprocess.run([str(BIN / "fedapp"), "new", "myapp"], cwd=tmp, check=True, capture_output=True)
    app = tmp / "myapp"
    (app / "mynet").mkdir()
    (app / "mynet" / "__init__.py").write_text(MODEL)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(240, 4))
    labels = np.array(["fern", "moss", "oak"])[np.argmax(x @ rng.normal(size=(4, 3)), axis=1)]
    (app / "data").mkdir()
    with open(app / "data" / "train.csv", "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["f0", "f1", "f2", "f3", "label"])
        out.writerows([*map(float, row), label] for row, label in zip(x, labels))
    return app


#: relative paths, which must be read in the app's folder wherever the run's processes are started
RUN = ("dataset='table' data-dir='data' partition='iid' model='mynet:build' num-server-rounds=1 local-steps=5 "
       "results-dir='out'")


def assert_run_in_app_folder(app: Path, name: str) -> None:
    doc = json.loads((app / "out" / name / "rounds.json").read_text())
    assert doc["config"]["data-dir"] == str(app / "data") and doc["config"]["results-dir"] == str(app / "out")
    assert [r["round"] for r in doc["rounds"]] == [0, 1] and doc["rounds"][1]["replies"] == 2
    assert 0.0 < doc["rounds"][1]["fed-accuracy"] <= 1.0 and "central-accuracy" in doc["rounds"][1]
    with open(app / "out" / name / "partition.csv", newline="") as f:
        counts = list(csv.DictReader(f))
    # the two clients hold the training rows, by the CSV's own labels (the rest is the global test split)
    assert len(counts) == 2 and {"class-fern", "class-moss", "class-oak"} <= set(counts[0])
    assert 150 <= sum(int(c["total"]) for c in counts) < 240
    # the app's own model: one linear layer, 4 features to 3 classes
    state = torch.load(app / "out" / name / "model.pt", weights_only=True)
    assert {k: tuple(v.shape) for k, v in state.items()} == {"1.weight": (3, 4), "1.bias": (3,)}


@pytest.mark.slow
def test_new_app_runs_from_its_folder(new_app, tmp_path):
    elsewhere = new_app.parent  # where `fedapp new myapp` ran: neither the app's folder nor the checkout
    done = subprocess.run([str(BIN / "fedapp"), "run", "myapp", "--run-config", f"{RUN} run-name='mine'"],
                          cwd=elsewhere, env=clean_env(), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "finished:completed" in done.stdout.splitlines()[-1]
    assert_run_in_app_folder(new_app, "mine")
    # plain `flwr run`, started elsewhere on a fresh Flower home: its ServerApp runs where its
    # SuperLink was started, and reads the paths from the app-dir `fedapp new` recorded
    home = tmp_path / "flwr-home"
    env = {**flwr_env(home, free_port_base()), "PYTHONPATH": ""}  # offline, as the docs' export
    try:
        plain = subprocess.run([str(BIN / "flwr"), "run", "myapp", "--stream", "--run-config",
                                f"{RUN} run-name='plain'"], cwd=elsewhere, env=env, capture_output=True, text=True,
                               timeout=400)
    finally:
        stop_local_superlink(home)  # plain `flwr run` leaves its local SuperLink running
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert_run_in_app_folder(new_app, "plain")
    assert launched_processes(home) == []
    # nothing of either run in the folders they were started from, or in the app's sources
    assert sorted(p.name for p in elsewhere.iterdir()) == ["myapp"]
    assert sorted(p.name for p in new_app.iterdir()) == [".gitignore", "data", "mynet", "out", "pyproject.toml"]
    assert sorted(p.name for p in (new_app / "mynet").iterdir()) == ["__init__.py"]  # no __pycache__ either
