"""Package hygiene: declared dependencies, licence, and what the Flower app bundle ships."""

import ast
import io
import sys
import tomllib
import zipfile
from importlib.metadata import metadata
from pathlib import Path

import pytest
from flwr.cli.build import build_fab_from_disk
from packaging.specifiers import SpecifierSet
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: import name -> distribution name where they differ
DISTRIBUTION = {"PIL": "pillow", "flwr_datasets": "flwr-datasets", "dp_accounting": "dp-accounting",
                "mlflow": "mlflow-skinny"}


def imported_modules() -> set[str]:
    """Top-level modules the app's code imports (any scope)."""
    found = set()
    for path in [*ROOT.glob("fedapp/**/*.py"), *ROOT.glob("strategies/*.py"), *ROOT.glob("clients/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"fedapp", "strategies", "clients", "__future__"}


def test_every_imported_distribution_is_declared():
    declared = {Requirement(r).name for r in PROJECT["dependencies"]}
    optional = {Requirement(r).name for extra in PROJECT["optional-dependencies"].values() for r in extra}
    needed = {DISTRIBUTION.get(m, m) for m in imported_modules()}
    assert needed - declared - optional == set()
    assert "datasets" in declared
    flwr_datasets = next(Requirement(r) for r in PROJECT["dependencies"] if r.startswith("flwr-datasets"))
    assert any(s.operator == "<" for s in flwr_datasets.specifier)  # a new release may split differently


def test_requires_python_admits_no_version_flower_rejects():
    ours = SpecifierSet(PROJECT["requires-python"])
    for dist in ("flwr", "flwr-datasets"):
        theirs = SpecifierSet(metadata(dist)["Requires-Python"])
        assert all(v in theirs for v in ("3.10", "3.11", "3.12", "3.13") if v in ours), dist


def test_license_file_matches_pyproject():
    assert PROJECT["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


@pytest.mark.slow
def test_app_bundle_ships_code_and_no_results():
    fab = zipfile.ZipFile(io.BytesIO(build_fab_from_disk(ROOT)))
    names = fab.namelist()
    assert {"fedapp/runtime/server_app.py", "fedapp/runtime/client_app.py", "strategies/fedavg.py", "clients/base.py",
            "LICENSE"} <= set(names)
    assert not [n for n in names if n.split("/")[0] in ("results", "simulations", "tests", "docs", ".flwr-home")]
    assert sum(i.file_size for i in fab.infolist()) < 2 * 2**20
