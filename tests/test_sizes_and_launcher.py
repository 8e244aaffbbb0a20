"""Sizes that cannot work are refused in one line before anything is allocated, and the launcher's
processes end when it ends, however it ends."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from fedapp.core.config import ConfigError
from fedapp.core.data import sources
from fedapp.core.data.sources import SYNTHETIC_MAX_CLIENT_SIZE, synthetic_bytes, synthetic_mean_size
from fedapp.runtime import preflight
from fedapp.runtime.launch import LAUNCH_ID, Reaper, _processes, launched_processes
from fedapp.runtime.registry import parse_run_config

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30


def test_absurd_sizes_fail_in_one_line(tmp_path, monkeypatch):
    """Through the check the launcher and the ServerApp run before anything else (preflight), on a
    machine with 16 GiB of 24 GiB available: each bad size is one line naming the key, and no
    synthetic data is generated nor results folder made. `num-clients = 'many'` through the real
    launcher (where it was a traceback): exit 2, one line, no process left."""
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(preflight, "memory", lambda: (16 * GIB, 24 * GIB))
    monkeypatch.setattr(sources, "make_synthetic", lambda *a, **kw: pytest.fail("synthetic data was generated"))
    results = tmp_path / "results"

    def refusal(**run_config) -> str:
        with pytest.raises(ConfigError) as err:
            preflight.check({"results-dir": str(results), **run_config})
        return str(err.value)

    # 236.75 examples a client on average, 1232 bytes each at the peak: 1e8 clients 27,164.5 GiB
    for n, need in ((100_000_000, "27,164.5"), (1_000_000, "271.6")):
        assert refusal(**{"num-clients": n}) == (
            f"run config 'num-clients' = {n}: the synthetic data of that many clients needs about {need} GiB of "
            "memory, this machine has 16.0 GiB available (24.0 GiB in all); use fewer clients")
    assert refusal(**{"num-clients": "many"}) == "run config 'num-clients' = 'many' is invalid: allowed is an int " \
                                                 "in [1, inf]"
    # Krum against the clients a round samples: 10, or 5 of them with fraction-train 0.5
    assert refusal(**{"num-clients": 10, "aggregation": "krum", "krum-byzantine": 9}) == (
        "run config 'krum-byzantine' = 9 is invalid with the 10 clients a round samples: Krum needs n > 2f + 2; "
        "allowed is 0..3")
    assert refusal(**{"num-clients": 10, "fraction-train": 0.5, "aggregation": "krum", "krum-byzantine": 3}) == (
        "run config 'krum-byzantine' = 3 is invalid with the 5 clients a round samples: Krum needs n > 2f + 2; "
        "allowed is 0..1")
    assert refusal(**{"num-clients": 10, "aggregation": "krum", "krum-byzantine": 3, "krum-select": 20}) == (
        "run config 'krum-select' = 20 is invalid with the 10 clients a round samples and 'krum-byzantine' = 3: "
        "Multi-Krum averages at most n - f; allowed is 1..7")
    assert not results.exists()
    # the largest settings Krum allows pass, and so do sizes that fit
    preflight.check_aggregation(parse_run_config(
        {"num-clients": 10, "aggregation": "krum", "krum-byzantine": 3, "krum-select": 7}))
    preflight.check_sizes(parse_run_config({"num-clients": 1000}))  # about 0.3 GiB

    # a table with two unlabelled rows of eight: the file and the count, not a KeyError
    table = tmp_path / "table"
    table.mkdir()
    (table / "train.csv").write_text("a,b,label\n1,2,0\n3,4,\n5,6,1\n7,8,\n1,1,0\n2,2,1\n3,3,0\n4,4,1\n")
    assert refusal(dataset="table", **{"data-dir": str(table), "partition": "iid"}) == (
        f"run config 'label-column' = 'label': 2 of the 8 rows of {table / 'train.csv'} have no label (empty or "
        "NaN); fill or drop them")

    home, token, results = tmp_path / "flwr-home", uuid.uuid4().hex, tmp_path / "launched"
    out = subprocess.run([sys.executable, "-m", "fedapp.runtime.launch", "--flwr-home", str(home), "--run-config",
                          f"num-clients='many' results-dir='{results}'"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), LAUNCH_ID: token}, timeout=300)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == "" and out.stderr.splitlines() == [
        "error: run config 'num-clients' = 'many' is invalid: allowed is an int in [1, inf]"]
    assert launched_processes(home, token) == [] and not results.exists()


def test_synthetic_memory_estimate_is_the_generators():
    """``synthetic_bytes`` counts per example the float64 features (60), label and client id drawn per
    client and their concatenation (2 x 496 bytes) and the float32 features (240), times the clients'
    mean size, which a draw of 200,000 client sizes as ``make_synthetic`` draws them matches."""
    rng = np.random.default_rng(0)
    drawn = np.minimum(rng.lognormal(4, 2, 200_000).astype(np.int64) + 50, SYNTHETIC_MAX_CLIENT_SIZE).mean()
    assert abs(drawn - synthetic_mean_size()) < 2.0 and round(synthetic_mean_size(), 2) == 236.75
    assert synthetic_bytes(1000) == int(1000 * synthetic_mean_size() * 1232)


def argv(pid: int) -> list[bytes]:
    """The process's command line, or [] where it has ended (a short-lived `flwr` command may)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except FileNotFoundError:
        return []


def started(pid: int) -> str | None:
    """The start time of process ``pid`` (so a reused pid is not taken for it); None once it is gone
    or a zombie (it ran to its end; only its parent's wait is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None if fields[0] == "Z" else fields[19]


@pytest.mark.slow
def test_launcher_processes_die_with_it(tmp_path):
    """A run under way through `python -m fedapp.runtime.launch`; the launcher is killed with SIGKILL
    (no cleanup of its own): every process it started, and what they started (SuperLink, SuperExec,
    simulation, Ray, the `flwr log` follower), ends, nothing starts another SuperLink, and the
    reaper that stopped them ends too."""
    results, home, token = tmp_path / "results", tmp_path / "flwr-home", uuid.uuid4().hex
    launcher = subprocess.Popen(
        [sys.executable, "-m", "fedapp.runtime.launch", "--flwr-home", str(home), "--run-config",
         f"num-server-rounds=1000 num-clients=2 local-steps=2 fraction-evaluate=0.0 results-dir='{results}' "
         "run-name='r'"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), LAUNCH_ID: token},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rounds = results / "r" / "rounds.json"
    try:
        deadline = time.time() + 600
        while not (rounds.is_file() and json.loads(rounds.read_text())["rounds"][-1]["round"] >= 1):
            assert launcher.poll() is None and time.time() < deadline, "the run did not reach round 1"
            time.sleep(0.5)
        children = [pid for pid, ppid, _ in _processes() if ppid == launcher.pid]
        procs = {pid: args for pid, _, args in _processes() if pid in set(launched_processes(home, token)) | set(children)}
        assert any("flower-superlink" in a for a in procs.values()) and any("flower-superexec" in a for a in procs.values())
        assert any(" log " in a and a.endswith("--stream") for a in procs.values())  # `flwr log <id> local --stream`
        assert sum(argv(pid)[1:3] == [b"-c", Reaper.CODE.encode()] for pid in procs) == 1
        alive = {pid: started(pid) for pid in procs}
    finally:
        launcher.kill()
        launcher.wait()
    deadline = time.time() + 120
    while left := [pid for pid, start in alive.items() if start is not None and started(pid) == start]:
        assert time.time() < deadline, [procs[pid] for pid in left]
        time.sleep(0.2)
    assert launched_processes(home, token) == []
