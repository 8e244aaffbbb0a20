"""Properties of the repository as a whole, checked on its tracked files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: the first folder of an absolute path that belongs to one machine: checkouts and scratch space (work,
#: farm, tmp), home folders (root, home, Users), mounts and installs (mnt, opt), an old root file system
MACHINE_ROOTS = ("work", "tmp", "root", "home", "old_root", "farm", "opt", "mnt", "Users")
#: an absolute path under one of ``MACHINE_ROOTS``: it starts a token (not after a word, ``.``, ``~``, ``/``,
#: ``-`` or a placeholder's closing ``>``, ``}``, ``)``, so relative paths and ``$HOME/...`` do not count),
#: names the whole root folder, and is not followed by a placeholder segment (``<user>``, ``$VAR``)
MACHINE_PATH = re.compile(r"(?<![\w.~/\->})$])/(?:%s)(?![\w-])(?!/(?:<|\$))" % "|".join(MACHINE_ROOTS))


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / name for name in out.decode().split("\0") if name]


def machine_paths(text: str) -> list[tuple[int, str]]:
    """(line number, the line's first such path) for each line of ``text`` naming a machine path."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        m = MACHINE_PATH.search(line)
        if m:
            found.append((number, line[m.start():m.start() + 60].split()[0]))
    return found


def test_machine_path_pattern():
    # the roots are put in with % so that this file names no machine path itself
    named = ["--out /%s/x/rows.json" % "tmp", '"results-dir": "/%s/runs/a"' % "work", "cd /%s" % "home",
             "`/%s/bin/python`" % "opt", "ANCHOR_PY=/%s/venv" % "root", "PATH=/a:/%s/b" % "mnt"]
    not_named = ["simulations/bench/%s/x" % "tmp", "../%s/x" % "work", "~/%s/x" % "work", "$HOME/%s/x" % "tmp",
                 "<runs>/%s/x" % "work", "${OUT}/%s/x" % "tmp", "/usr/bin/env", "/proc/self/status",
                 "/etc/hosts", "/dev/null", "/var/lib/flwr", "/%s/<user>/data" % "home",
                 "/%s/$USER/x" % "home", "/%sfs" % "tmp", "https://example.org/%s/x" % "home"]
    assert [bool(machine_paths(s)) for s in named] == [True] * len(named)
    assert [bool(machine_paths(s)) for s in not_named] == [False] * len(not_named)


def test_no_machine_paths():
    """No tracked text file names an absolute path of a particular machine: a folder under one of
    ``MACHINE_ROOTS`` at the root of the file system (a checkout, a home or temporary folder, a mount).
    Commands, configs and results say where things go with a placeholder instead: ``OUT``, ``<runs>``,
    ``$ANCHOR_SRC``, ``~``, or a path relative to the checkout.

    Allowed, as they name no particular machine: system paths (``/usr/``, ``/etc/``, ``/dev/``, ``/proc/``,
    ``/sys/``, ``/bin/``) and the documented layout of a deployment's hosts (``/var/lib/...``, ``/srv/...``),
    which are not under ``MACHINE_ROOTS``; and a machine root followed by a placeholder segment
    (``<user>``, ``$USER``). Binary files (a NUL byte in their first 8 KiB) and symbolic links are skipped.
    """
    found = []
    for path in tracked_files():
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue
        rel = path.relative_to(ROOT)
        found += [f"{rel}:{number}: {hit}" for number, hit in machine_paths(data.decode(errors="replace"))]
    if found:
        pytest.fail(f"{len(found)} lines name a machine path (use a placeholder):\n" + "\n".join(found), pytrace=False)


def test_results_pages_at_most_250_lines():
    """Each paper's results page and the performance page: what a Flower Baselines README gives, at most
    250 lines (the history stays in git, the raw lines in simulations/bench/results/)."""
    pages = sorted(ROOT.glob("simulations/*/README.md")) + [ROOT / "docs" / "performance.md"]
    long = {str(p.relative_to(ROOT)): n for p in pages if (n := len(p.read_text().splitlines())) > 250}
    assert len(pages) == 5 and long == {}


PROBE = '''
import os, pytest
@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    with open(os.environ["PROBE_OUT"], "a") as f:
        slow = "slow" if item.get_closest_marker("slow") else "-"
        f.write(os.environ.get("PYTEST_XDIST_WORKER", "") + " " + slow + " " + item.nodeid + "\\n")
    pytest.skip("probe")
'''


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> list[tuple[str, bool, str]]:
    """(worker, slow, node id) of each test as each worker set it up (and skipped it) under scripts/test.sh's
    ``--dist loadgroup`` on two workers: a federation's module (slow, one group), a module whose tests share
    built models (one group), and two of single tests, the smoke table commands among them slow."""
    tmp = tmp_path_factory.mktemp("probe")
    (tmp / "probe.py").write_text(PROBE)
    out = tmp / "ran.txt"
    env = {**os.environ, "PYTHONPATH": str(tmp), "PROBE_OUT": str(out)}
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "probe", "-p", "no:cacheprovider", "-n", "2", "--dist",
                    "loadgroup", "tests/test_config.py", "tests/test_deployment.py", "tests/test_models.py",
                    "tests/test_tables.py"], cwd=ROOT, env=env, capture_output=True, check=True)
    return [(worker, slow == "slow", node) for worker, slow, node in
            (line.split(" ", 2) for line in out.read_text().splitlines())]


@pytest.mark.slow
def test_tests_sharing_a_federation_run_on_one_worker(probed):
    """scripts/test.sh's ``--dist loadgroup``: the tests of a module that share a module-scoped fixture (a
    federation of real processes) are one group on one worker, so the federation starts once (with pytest
    9.2, pytest-xdist 3.8 no longer groups: its group suffix lands in an attribute the node id ignores)."""
    deployment = {worker for worker, _, node in probed if node.startswith("tests/test_deployment.py::")}
    assert len(deployment) == 1 and len({worker for worker, _, _ in probed}) == 2, probed
    assert all(node.endswith("@test_deployment") for _, _, node in probed if node.startswith("tests/test_deployment.py"))


@pytest.mark.slow
def test_slow_tests_are_handed_out_first(probed):
    """Each worker starts on a slow test and sets up none after one that is not: the slow ones are handed
    out first, before a group of many fast tests too (pytest-xdist's own order: groups by size, then the
    rest, which gave one worker test_models.py's group first)."""
    assert sorted(node.split("::")[0] for _, slow, node in probed if slow) == [
        "tests/test_deployment.py"] * 5 + ["tests/test_tables.py"] * 6
    for worker in {worker for worker, _, _ in probed}:
        flags = [slow for w, slow, _ in probed if w == worker]
        assert flags[0] and flags == sorted(flags, reverse=True), probed
