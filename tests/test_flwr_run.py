"""One real `flwr run` simulation (Ray, local SuperLink) through the launcher."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fedapp.runtime import launch as launcher
from fedapp.core.config import ConfigError
from fedapp.runtime.launch import (BIN, LAUNCH_ID, RunStopped, flwr_env, free_port_base, launch, launched_processes,
                                   run_status, stop_local_superlink)
from tests.conftest import app_checkout

ROOT = Path(__file__).resolve().parents[1]


def superexec_environ(home: Path, token: str) -> list[bytes]:
    """The environment of the launch's SuperExec, as its process holds it."""
    for pid in launched_processes(home, token):
        args = Path(f"/proc/{pid}/cmdline").read_bytes()
        if b"flower-superexec" in args:
            return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return []


@pytest.mark.slow
def test_flwr_run_simulation_completes_and_writes_results(tmp_path, monkeypatch):
    results = tmp_path / "results"
    queries = []  # each status query is a `flwr ls` process (seconds of CPU beside the run)
    monkeypatch.setenv(LAUNCH_ID, token := uuid.uuid4().hex)
    environs = []  # the SuperExec's, at each status query (it runs until the launcher stops the SuperLink)
    monkeypatch.setattr(launcher, "run_status", lambda *a: queries.append(time.time()) or environs.append(
        superexec_environ(tmp_path / "flwr-home", token)) or run_status(*a))
    t0 = time.time()
    status = launch(f"num-server-rounds=2 num-clients=4 local-steps=5 results-dir='{results}' run-name='r'",
                    home=tmp_path / "flwr-home", stream=False, timeout=300)
    assert status["status"] == "finished:completed"
    # the launcher waits on the run's log stream, which ends with the run: one query at the end, and
    # one every STATUS_EVERY s before it, not one a second
    assert 1 <= len(queries) <= 1 + (queries[-1] - t0) / launcher.STATUS_EVERY
    # the SuperExec asks for new runs every 0.25 s, not Flower's 1 s
    assert b"FLWR_SUPEREXEC_TASK_POLL_INTERVAL=0.25" in environs[-1]
    doc = json.loads((results / "r" / "rounds.json").read_text())
    assert [r["round"] for r in doc["rounds"]] == [0, 1, 2]
    assert doc["rounds"][-1]["replies"] == 4
    assert 0.0 < doc["rounds"][-1]["fed-accuracy"] <= 1.0
    # the launcher stopped the SuperLink it started, and nothing started another one since
    time.sleep(3)
    ps = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    assert str(tmp_path / "flwr-home") not in ps


@pytest.mark.slow
def test_flwr_run_bad_config_fails_before_training(tmp_path, monkeypatch):
    calls = []  # every `flwr` command the launcher runs
    monkeypatch.setattr(launcher, "_flwr", lambda args, *a, **kw: calls.append(args))
    monkeypatch.setattr(launcher.PrewarmedFlwr, "run", lambda self, args: calls.append(args))
    monkeypatch.setenv(LAUNCH_ID, token := uuid.uuid4().hex)
    with pytest.raises(ConfigError, match="'model' = 'vgg'"):  # the launcher submits nothing
        launch("model='vgg'", home=tmp_path / "flwr-home", stream=False, timeout=120)
    # no `flwr run`, and the SuperLink started beside the check is stopped
    assert calls == [] and launched_processes(tmp_path / "flwr-home", token) == []
    monkeypatch.undo()
    # the ServerApp checks too: unchecked, the run is submitted and fails there
    status = launch("model='vgg'", home=tmp_path / "flwr-home", stream=False, timeout=120,
                    check=False)
    assert status["status"] == "finished:failed"


@pytest.mark.slow
def test_ctrl_c_stops_the_run_and_its_processes(tmp_path):
    """Ctrl-C on `python -m fedapp.runtime.launch` stops the run on the SuperLink and every process it
    started (SuperExec, simulation, Ray), exits 130 and keeps the rounds so far with their plot."""
    results, home, token = tmp_path / "results", tmp_path / "flwr-home", uuid.uuid4().hex
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedapp.runtime.launch", "--flwr-home", str(home),
         "--run-config", f"num-server-rounds=1000 num-clients=2 local-steps=20 results-dir='{results}' run-name='r'"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), LAUNCH_ID: token},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rounds = results / "r" / "rounds.json"
    try:
        deadline = time.time() + 300
        while not (rounds.is_file() and json.loads(rounds.read_text())["rounds"][-1]["round"] >= 1):
            assert proc.poll() is None and time.time() < deadline, proc.communicate()[0]
            time.sleep(0.5)
        assert launched_processes(home, token)  # the SuperLink and the simulation are running
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=240)  # the launcher stops the run, then every process it started
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert "interrupted" in out.splitlines()[-1]
    assert launched_processes(home, token) == []
    last = json.loads(rounds.read_text())["rounds"][-1]["round"]
    time.sleep(3)  # nothing trains on: the rows stay as they were
    assert json.loads(rounds.read_text())["rounds"][-1]["round"] == last < 1000
    assert (results / "r" / "plot.png").stat().st_size > 0


@pytest.mark.slow
def test_plain_flwr_run_on_a_fresh_offline_flower_home(tmp_path):
    """`flwr run . --stream` as the README gives it: a Flower home with no config (Flower writes its
    default 2-node local federation), no runtime dependency installation (offline)."""
    home, results = tmp_path / "fresh-home", tmp_path / "results"
    env = {**flwr_env(home, free_port_base()), "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    try:
        out = subprocess.run([str(BIN / "flwr"), "run", ".", "--stream", "--run-config",
                              f"num-server-rounds=1 local-steps=2 results-dir='{results}' run-name='p'"],
                             cwd=app_checkout(tmp_path / "app"), env=env, capture_output=True, text=True, timeout=300)
    finally:
        stop_local_superlink(home)  # plain `flwr run` leaves its local SuperLink running
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads((results / "p" / "rounds.json").read_text())
    assert [r["round"] for r in doc["rounds"]] == [0, 1] and doc["rounds"][1]["replies"] == 2


@pytest.mark.slow
def test_timeout_stops_the_run_and_its_processes(tmp_path):
    home, token = tmp_path / "flwr-home", uuid.uuid4().hex
    os.environ[LAUNCH_ID] = token  # launch() gives its processes this id, so they can be looked for
    try:
        with pytest.raises(RunStopped, match="timed out after 10 s") as stop:
            launch(f"num-server-rounds=1000 local-steps=20 results-dir='{tmp_path / 'results'}' run-name='r'",
                   home=home, stream=False, timeout=10)
    finally:
        del os.environ[LAUNCH_ID]
    assert stop.value.exit_code == 124
    assert launched_processes(home, token) == []


def test_the_superlink_starts_beside_the_check_and_stops_with_a_bad_config(tmp_path, monkeypatch):
    """The launcher starts the local SuperLink and the `flwr` process that will submit before it checks
    the run config, so they run beside the check; when it fails, both are stopped and nothing was submitted."""
    import fedapp.runtime.preflight

    home, token = tmp_path / "flwr-home", uuid.uuid4().hex
    monkeypatch.setenv(LAUNCH_ID, token)
    seen = []

    def check(overrides, **kw):
        seen.append([Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1:3]
                     for pid in launched_processes(home, token)])
        raise ConfigError("run config 'model' = 'x': checked")

    monkeypatch.setattr(fedapp.runtime.preflight, "check", check)
    with pytest.raises(ConfigError, match="checked"):
        launch("model='x'", home=home, stream=False, timeout=60)
    # the SuperLink (the script, under its python) and the `flwr` that will submit, importing
    assert seen == [[[str(BIN / "flower-superlink").encode(), b"--insecure"],
                     [b"-c", launcher.PrewarmedFlwr.CODE.encode()]]]
    assert launched_processes(home, token) == []


def test_superlink_command_is_flowers(tmp_path, monkeypatch):
    """The launcher's SuperLink is the one `flwr` would start for the same Flower home and ports, so
    `flwr run`, `flwr log` and the cleanup treat it as theirs."""
    import flwr.cli.constant as constant
    import flwr.cli.local_superlink as local_superlink

    started = []

    def popen(command, **kw):
        started.append(command)
        raise OSError("not started")

    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    monkeypatch.setattr(local_superlink.subprocess, "Popen", popen)
    with pytest.raises(Exception, match="not started"):
        local_superlink._start_local_superlink()
    env = {"FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": constant.LOCAL_SUPERLINK_HTTP_API_PORT,
           "FLWR_LOCAL_CONTROL_API_PORT": constant.LOCAL_CONTROL_API_PORT}
    ours = launcher.superlink_command(tmp_path, env)
    assert [Path(ours[0]).name, *ours[1:]] == started[0]


def test_prewarmed_flwr_runs_the_command_it_is_given_or_none(tmp_path):
    """The `flwr` process the launcher starts beside its check runs the command it is then given, as
    `flwr` itself does; closed first (a bad run config), it is stopped having run nothing."""
    env = flwr_env(tmp_path / "flwr-home", free_port_base())
    version = subprocess.run([str(BIN / "flwr"), "--version"], env=env, capture_output=True, text=True)
    done = launcher.PrewarmedFlwr(env).run(["--version"])
    assert (done.returncode, done.stdout) == (0, version.stdout) and "Flower" in done.stdout
    unused = launcher.PrewarmedFlwr(env)
    unused.close()
    assert unused.proc.poll() is not None
    assert not (tmp_path / "flwr-home").exists()  # no SuperLink, no config: it ran nothing


@pytest.mark.slow
def test_the_prewarmed_flwr_builds_flowers_own_fab_without_walking_ignored_folders(tmp_path):
    """`flwr run` packs the app into a FAB after walking every file under the app's folder, a .venv
    inside the checkout included (2.6 CPU s on the path to round 0); the prewarmed process builds the
    same bytes beforehand from ``app_files``, which leaves out the folders .gitignore drops."""
    from flwr.cli.build import build_fab_from_disk, build_fab_from_files

    from fedapp.runtime.launch import ROOT, app_files

    app = tmp_path / "app"
    (app / "fedapp").mkdir(parents=True)
    (app / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    (app / ".gitignore").write_text(".venv/\n/results/\n")
    for name in ("fedapp/runtime/server_app.py", "strategies/fedavg.py", "clients/base.py", "README.md", "LICENSE"):
        (app / name).parent.mkdir(exist_ok=True)
        (app / name).write_text("x = 1\n")
    for folder in (".venv/lib", "results/run", "fedapp/results"):  # the last one is not ignored
        (app / folder).mkdir(parents=True)
        (app / folder / "mod.py").write_text("y = 2\n")
    files = app_files(app)
    assert sorted(files) == [".gitignore", "LICENSE", "README.md", "clients/base.py", "fedapp/results/mod.py",
                             "fedapp/runtime/server_app.py", "pyproject.toml", "strategies/fedavg.py"]
    assert build_fab_from_files(files)[0] == build_fab_from_disk(app)
    assert build_fab_from_files(app_files(ROOT))[0] == build_fab_from_disk(ROOT)  # this checkout
