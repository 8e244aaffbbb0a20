"""The processes of one launch (``fedapp.runtime.launch``): a private Flower environment, the local
SuperLink Flower's CLI would start, a prewarmed `flwr`, and finding and stopping every process a
launch started, however the launcher ends (Linux's parent-death signal and a reaper process)."""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Flower's executables sit beside this interpreter: `.venv/bin/python -m fedapp.runtime.launch` works
#: without an activated venv, and `flwr` finds `flower-superlink` there too
BIN = Path(sys.executable).parent
#: environment variable every process of one launch inherits, so all of them can be found
LAUNCH_ID = "FEDAPP_LAUNCH_ID"


#: seconds between the SuperExec's requests for a new run (Flower's default 1.0): a submitted run's
#: simulation process started on average half of it after the submission
SUPEREXEC_POLL = "0.25"


def flwr_env(home: Path, port_base: int) -> dict[str, str]:
    """Environment for a private, offline Flower: own FLWR_HOME and local SuperLink ports."""
    env = dict(os.environ)
    env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", SUPEREXEC_POLL)
    env["PATH"] = os.pathsep.join([str(BIN), env.get("PATH", "")])
    env.update(FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
               FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
               FLWR_LOCAL_SUPERLINK_HTTP_API_PORT=str(port_base + 1),
               FLWR_LOCAL_CONTROL_API_PORT=str(port_base + 3))
    return env


def write_flower_config(home: Path, num_supernodes: int, num_cpus: int = 1, num_gpus: float = 0.0) -> Path:
    """$FLWR_HOME/config.toml with one local simulation connection named 'local'."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.toml"
    path.write_text(
        '[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = ":local:"\n'
        f"options.num-supernodes = {num_supernodes}\n"
        f"options.backend.client-resources.num-cpus = {num_cpus}\n"
        f"options.backend.client-resources.num-gpus = {num_gpus}\n")
    return path


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def ends_with_this_process(sig: signal.Signals = signal.SIGKILL):
    """A ``preexec_fn`` that has Linux send the child ``sig`` when this process ends, however it
    ends (SIGKILL included: ``prctl(PR_SET_PDEATHSIG)``, kept across the child's exec); None off Linux.
    A `flwr` CLI process left running would start a new local SuperLink of its own."""
    if sys.platform != "linux":
        return None
    # looked up here: the child between fork and exec runs as little as it can (other threads' locks)
    prctl, parent = ctypes.CDLL(None, use_errno=True).prctl, os.getpid()

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(sig))
        if os.getppid() != parent:  # this process ended before the signal was armed
            os.kill(os.getpid(), sig)

    return arm


class Reaper:
    """A process that stops this launch's processes (``stop_local_superlink``) if the launcher ends
    without stopping them itself: the parent-death signal reaches only the launcher's own children,
    not the SuperExec, simulation and Ray processes below the SuperLink. It waits on a pipe from the
    launcher, which reads end-of-file when the launcher ends, however it ends; ``done`` tells it the
    launcher has cleaned up. It runs in a session of its own (a Ctrl-C to the launcher's process
    group leaves it be) and without the launch id (it is no process of the launch)."""

    CODE = ("import sys\nif sys.stdin.buffer.read() != b'done':\n"
            "    import shutil\n    from pathlib import Path\n"
            "    from fedapp.runtime.processes import stop_local_superlink\n"
            "    stop_local_superlink(Path(sys.argv[1]), sys.argv[2])\n"
            "    if sys.argv[3] == 'remove':\n        shutil.rmtree(sys.argv[1], ignore_errors=True)\n")

    def __init__(self, home: Path, env: dict, remove: bool = False):
        """``remove``: the Flower home is the launch's own temporary one, removed with its processes."""
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(home), env[LAUNCH_ID],
                                      "remove" if remove else "keep"],
                                     env={k: v for k, v in env.items() if k != LAUNCH_ID}, cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)

    def done(self) -> None:
        self.proc.communicate(b"done")


def superlink_command(home: Path, env: dict) -> list[str]:
    """The command Flower's CLI starts the local SuperLink of FLWR_HOME ``home`` with
    (``flwr/cli/local_superlink.py``; ``tests/test_flwr_run.py`` compares the two)."""
    runtime = home / "local-superlink"
    return [str(BIN / "flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
            "--control-api-address", f"127.0.0.1:{env['FLWR_LOCAL_CONTROL_API_PORT']}", "--host", "127.0.0.1",
            "--port", env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"], "--log-file", str(runtime / "superlink.log"),
            "--log-rotation-interval-hours", "24", "--log-rotation-backup-count", "7",
            "--database", str(runtime / "state.db")]


def superlink_ready(env: dict) -> bool:
    """Whether the local SuperLink answers its health check (as `flwr` asks it)."""
    try:
        url = f"http://127.0.0.1:{env['FLWR_LOCAL_SUPERLINK_HTTP_API_PORT']}/health"
        with urllib.request.urlopen(url, timeout=0.4) as response:
            return response.status == 200
    except (OSError, ValueError):
        return False


def ports_free(port_base: int) -> bool:
    """Whether nothing listens on the local SuperLink's ports of ``port_base`` (+1 HTTP API, +3
    control API), checked by binding them."""
    with socket.socket() as http, socket.socket() as control:
        try:
            for sock, port in ((http, port_base + 1), (control, port_base + 3)):
                # as the SuperLink binds: a port whose last connections are closing is free
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_base(tries: int = 100) -> int:
    """A port base whose SuperLink ports are free now (drawn at random, so parallel launches
    rarely try the same ones)."""
    draw = random.SystemRandom()
    for _ in range(tries):
        if ports_free(base := draw.randrange(20000, 60000)):
            return base
    raise RuntimeError("no free local ports for the SuperLink")


def start_local_superlink(home: Path, env: dict, cwd: Path = ROOT) -> subprocess.Popen:
    """Start this launch's own local SuperLink, the one `flwr run` would start, on the ports of
    ``env``, in folder ``cwd`` (the app's: the ServerApp and the ClientApps run there). The launcher starts it beside its run-config check: `flwr run` starts it only after
    its own imports, and waits for it before submitting, so the three were in series (about 2, 2
    and 3.5 s of CPU)."""
    (home / "local-superlink").mkdir(parents=True, exist_ok=True)
    # SIGTERM when the launcher ends: Flower's SuperLink then stops its SuperExec itself
    return subprocess.Popen(superlink_command(home, env), env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=ends_with_this_process(signal.SIGTERM))


#: seconds the launcher waits for the SuperLink it started (`flwr run` waits 15 s, which a SuperLink
#: importing at a few per cent of a core on a busy machine does not make)
SUPERLINK_START_LIMIT = 300.0


def wait_for_superlink(proc: subprocess.Popen, home: Path, env: dict, limit: float = SUPERLINK_START_LIMIT) -> None:
    """Until the SuperLink ``proc`` answers; it must still run then (what answers is this one)."""
    end = time.time() + limit
    while not superlink_ready(env) or proc.poll() is not None:
        if proc.poll() is not None:
            raise RuntimeError(f"the local SuperLink exited with code {proc.returncode}; see "
                               f"{home / 'local-superlink' / 'superlink.log'}")
        if time.time() > end:
            raise RuntimeError(f"the local SuperLink did not answer within {limit:.0f} s; see "
                               f"{home / 'local-superlink' / 'superlink.log'}")
        time.sleep(0.2)


class PrewarmedFlwr:
    """A `flwr` process started early: it imports Flower's CLI (about 1 CPU s) and builds the app's
    FAB (``app_files``) of the app folder ``app`` while the launcher checks the run config and the
    SuperLink starts, then runs the one command it is given; closed before (a bad run config), it is
    stopped having run none."""

    CODE = ("import json, sys\nfrom pathlib import Path\nfrom fedapp.core.compat import flwr_cli\n"
            "from fedapp.runtime.appdir import app_files\n"
            "app = Path(sys.argv[1])\ncli = flwr_cli(app_files(app), app)\nline = sys.stdin.readline()\n"
            "if line.strip():\n    sys.exit(cli(json.loads(line)))\n")

    def __init__(self, env: dict, app: Path = ROOT):
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(app)], env=env, cwd=ROOT, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     preexec_fn=ends_with_this_process())

    def run(self, args: list[str]) -> subprocess.CompletedProcess:
        out, err = self.proc.communicate(json.dumps(args) + "\n")
        return subprocess.CompletedProcess(["flwr", *args], self.proc.returncode, out, err)

    def close(self) -> None:
        """Stop it if it still waits for its command (it has run none)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def _processes() -> list[tuple[int, int, str]]:
    rows = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    out = []
    for row in rows.splitlines():
        pid, ppid, args = (row.strip().split(None, 2) + [""])[:3]
        out.append((int(pid), int(ppid), args))
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a SuperLink's SuperExec runs in a session of its own)."""
    children: dict[int, list[int]] = {}
    for p, ppid, _ in _processes():
        children.setdefault(ppid, []).append(p)
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def _has_env(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, another user's, or no /proc
        return False


def launched_processes(home: Path, token: str | None = None) -> list[int]:
    """The local SuperLink of ``home``, everything below it (SuperExec, the simulation, Ray's
    GCS, raylet, agents and workers), and any process that inherited ``token``
    (FEDAPP_LAUNCH_ID): Ray workers outlive their parents and end up under init."""
    marker = str(home / "local-superlink")
    procs = _processes()
    found = {pid for pid, _, args in procs if marker in args and "flower-superlink" in args}
    if token:
        found |= {pid for pid, _, _ in procs if pid != os.getpid() and _has_env(pid, f"{LAUNCH_ID}={token}")}
    children: dict[int, list[int]] = {}
    for pid, ppid, _ in procs:
        children.setdefault(ppid, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(os.getpid())
    return sorted(found)


def stop_local_superlink(home: Path, token: str | None = None, grace: float = 5.0) -> None:
    """Stop the SuperLink that flwr started for this FLWR_HOME and every process it started:
    SIGTERM, then SIGKILL for what is left after ``grace`` s (some Ray agents ignore SIGTERM)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        for pid in launched_processes(home, token):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        end = time.time() + wait
        while time.time() < end:
            if not launched_processes(home, token):
                return
            time.sleep(0.2)

