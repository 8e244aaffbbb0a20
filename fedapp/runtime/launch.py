"""Run the app with ``flwr run`` on a private local simulation federation, and clean up.

``flwr run --stream`` exits 0 even when the run failed, and the local SuperLink it
starts keeps running; this launcher submits the run, follows its log, reads the
final status with ``flwr ls --run-id ID --format json``, and stops the SuperLink it
started. It starts that SuperLink itself, on free ports, while it checks the run config
(``fedapp/runtime/preflight.py``), and submits once the check passed, never to a SuperLink that
another launch (or anything else) runs; on Ctrl-C,
SIGTERM or ``--timeout`` it stops the run and every process it started. When it ends without
that cleanup (SIGKILL, the kernel's out-of-memory killer), its processes end with it: each
process it starts gets Linux's parent-death signal, and a reaper process stops what those
started in turn. Used by ``scripts/run.sh``, the tests and the benchmarks.

    python -m fedapp.runtime.launch --run-config "strategy='fedprox' num-server-rounds=5"
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from fedapp.core.config import COMMON_KEYS, ConfigError

NUM_CLIENTS = next(k for k in COMMON_KEYS if k.name == "num-clients")

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
            "    from pathlib import Path\n    from fedapp.runtime.launch import stop_local_superlink\n"
            "    stop_local_superlink(Path(sys.argv[1]), sys.argv[2])\n")

    def __init__(self, home: Path, env: dict):
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE, str(home), env[LAUNCH_ID]],
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


def start_local_superlink(home: Path, env: dict) -> subprocess.Popen:
    """Start this launch's own local SuperLink, the one `flwr run` would start, on the ports of
    ``env``. The launcher starts it beside its run-config check: `flwr run` starts it only after
    its own imports, and waits for it before submitting, so the three were in series (about 2, 2
    and 3.5 s of CPU)."""
    (home / "local-superlink").mkdir(parents=True, exist_ok=True)
    # SIGTERM when the launcher ends: Flower's SuperLink then stops its SuperExec itself
    return subprocess.Popen(superlink_command(home, env), env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
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


def app_files(root: Path) -> dict[str, Path]:
    """What Flower's ``collect_files`` gives ``flwr run`` to build the app's FAB from (every file under
    ``root`` but symlinks and what resolves outside it), without walking into the directories that
    .gitignore leaves out, whose files the FAB's rules drop: with the .venv inside the checkout that is
    42,000 files and 2.6 CPU s of `flwr run`'s start, for the same 72 files in the FAB."""
    from fedapp.core.compat import gitignore_matcher

    root = root.resolve()
    ignored = gitignore_matcher(root / ".gitignore")
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = Path(dirpath).relative_to(root)
        dirnames[:] = [d for d in dirnames if not ignored.match_file(f"{(rel / d).as_posix()}/")]
        for name in filenames:
            path = Path(dirpath) / name
            if not path.is_symlink() and path.resolve().is_relative_to(root):
                files[path.relative_to(root).as_posix()] = path
    return files


class PrewarmedFlwr:
    """A `flwr` process started early: it imports Flower's CLI (about 1 CPU s) and builds the app's
    FAB (``app_files``) while the launcher checks the run config and the SuperLink starts, then runs
    the one command it is given; closed before (a bad run config), it is stopped having run none."""

    CODE = ("import json, sys\nfrom fedapp.core.compat import flwr_cli\n"
            "from fedapp.runtime.launch import ROOT, app_files\n"
            "cli = flwr_cli(app_files(ROOT), ROOT)\nline = sys.stdin.readline()\n"
            "if line.strip():\n    sys.exit(cli(json.loads(line)))\n")

    def __init__(self, env: dict):
        self.proc = subprocess.Popen([sys.executable, "-c", self.CODE], env=env, cwd=ROOT, text=True,
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


def _flwr(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "flwr"), *args], env=env, cwd=ROOT, text=True, capture_output=True,
                          preexec_fn=ends_with_this_process(), **kw)


def run_status(run_id: str, env: dict) -> dict:
    out = _flwr(["ls", "--run-id", run_id, "--format", "json", "local"], env)
    return json.loads(out.stdout)["runs"][0]


#: seconds before the first status query while the run's log stream is open; each later wait is
#: twice the one before, up to STATUS_EVERY_MAX
STATUS_EVERY = 30.0
STATUS_EVERY_MAX = 300.0


def status_waits():
    """Seconds to wait on the log stream before each status query: STATUS_EVERY, then twice the
    wait before, up to STATUS_EVERY_MAX."""
    every = STATUS_EVERY
    while True:
        yield every
        every = min(2 * every, STATUS_EVERY_MAX)


def wait_for_status(run_id: str, env: dict, log: subprocess.Popen, deadline: float | None,
                    every: float = STATUS_EVERY) -> dict:
    """The run's status once its log stream ended (the SuperLink ends it when the run has
    finished), or after ``every`` s, or at ``deadline``. Each status query is a `flwr ls`
    process, about 1.5 s of CPU for its imports: asked every second, as before, it took most
    of a core from the run it watched; every 30 s, 0.04 CPU s a second all through a long run."""
    if log.poll() is None:
        wait = every if deadline is None else min(every, max(0.0, deadline - time.time()))
        try:
            log.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
    else:  # the stream is gone before the run finished: ask every second
        time.sleep(1.0)
    return run_status(run_id, env)


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


_TOKEN = re.compile(r"""(?P<key>[^\s=]+)=(?P<value>'[^']*'|"[^"]*"|\S+)|(?P<file>\S+\.toml)""")


def toml_value(value) -> str:
    """A value as a TOML literal for ``flwr run --run-config``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return repr(value)


def run_config_overrides(run_config: str | list[str]) -> dict:
    """The keys ``--run-config`` sets: TOML files (their tables flattened, ``a.b = 1`` as
    ``a.b``) and ``k=v`` pairs, later ones winning, so a file can be combined with overrides:
    ``--run-config "paper.toml num-server-rounds=5"``. Each file and each pair is read by Flower's
    own parser (`flwr run` takes a file or pairs, not both)."""
    from fedapp.core.compat import parse_config_args

    values: dict = {}
    for arg in [run_config] if isinstance(run_config, str) else run_config:
        rest = arg
        for m in _TOKEN.finditer(arg):
            rest = rest.replace(m.group(0), "", 1)
            if m.group("file") and not Path(m.group("file")).expanduser().is_file():
                raise ConfigError(f"--run-config: no TOML file {m.group('file')!r}")
            try:
                values.update(parse_config_args([m.group(0)]))
            except ValueError as err:  # a file that is not TOML
                raise ConfigError(f"--run-config: cannot read {m.group(0)!r}: {err}") from None
            except Exception:  # Flower's parser raises click's ClickException for a value that is not TOML
                raise ConfigError(f"--run-config: cannot read {m.group(0)!r}: the value must be a TOML "
                                  "bool, number or quoted string, e.g. strategy='fedprox'") from None
        if rest.strip():
            raise ConfigError(f"--run-config: cannot read {rest.strip()!r}: expected key=value pairs "
                              "or a .toml file")
    return values


#: the ServerApp's first log line names the run's results folder (fedapp.runtime.server_app.run)
RESULTS_LINE = re.compile(r"\bresults: (\S.*?)\s*$")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def follow_log(lines, stream: bool, found: list[Path]) -> None:
    """Echo the run's log (``stream``) and note the results folder the ServerApp names: the
    ServerApp creates it (``run_dir``), so only the run knows which it is."""
    for line in lines:
        if stream:
            sys.stdout.write(line)
            sys.stdout.flush()
        if not found and (m := RESULTS_LINE.search(ANSI.sub("", line))):
            found.append(Path(m.group(1)))


def replot(folder: Path | None) -> None:
    """Redraw plot.png from the rounds on disk: the run may have been stopped between redraws."""
    from fedapp.runtime.results import plot

    if folder is not None and (folder / "rounds.json").is_file():
        doc = json.loads((folder / "rounds.json").read_text())
        if doc["rounds"]:
            plot(doc["rounds"], folder / "plot.png", title=f"{doc['config']['strategy']} on {doc['config']['dataset']}")


class RunStopped(Exception):
    """The run was stopped before it finished (Ctrl-C, SIGTERM or --timeout)."""

    def __init__(self, message: str, status: dict | None, exit_code: int):
        super().__init__(message)
        self.status = status
        self.exit_code = exit_code


def launch(run_config: str | list[str] = "", num_supernodes: int | None = None, home: Path | None = None,
           port_base: int | None = None, num_cpus: int = 1, num_gpus: float = 0.0, timeout: float | None = None,
           stream: bool = True, app: Path = ROOT, check: bool = True) -> dict:
    """Submit one run, wait for it, return its final ``flwr ls`` entry (stops the SuperLink).

    The run goes to a SuperLink this call starts, on free ports (``port_base``: on those ports,
    which must be free), never to one that was running already. ``num_supernodes`` defaults to
    the run config's ``num-clients`` (a TOML file's too). With ``check`` the run config is
    validated here first (fedapp/runtime/preflight.py): a bad one raises ConfigError before anything is
    submitted. Ctrl-C (KeyboardInterrupt) or ``timeout`` s stop the run, the SuperLink and every
    process they started, and raise RunStopped; the results written so far stay.
    """
    home = Path(home or ROOT / ".flwr-home").resolve()
    if port_base is not None and not ports_free(port_base):
        raise ConfigError(f"--port-base {port_base}: port {port_base + 1} or {port_base + 3} is in use (another "
                          "SuperLink?); a launch only submits to a SuperLink it started: leave --port-base out to "
                          "use free ports")
    env = flwr_env(home, free_port_base() if port_base is None else port_base)
    # a caller may set the id to find the processes itself (the tests do)
    token = env[LAUNCH_ID] = os.environ.get(LAUNCH_ID) or uuid.uuid4().hex
    found: list[Path] = []  # the results folder, once the ServerApp's log names it
    log = None
    run_id = None
    submit = None
    reaper = Reaper(home, env)  # before anything it would have to stop
    try:
        # first: the SuperLink starts, and `flwr run` imports, beside this process reading and checking
        # the run config; a bad config stops both (below) before anything is submitted
        superlink = start_local_superlink(home, env)
        submit = PrewarmedFlwr(env)
        overrides = run_config_overrides(run_config)
        if num_supernodes is None:  # checked as the run config's key, before the SuperNodes are made
            num_supernodes = NUM_CLIENTS.parse(overrides.get("num-clients", NUM_CLIENTS.default))
        if check:
            from fedapp.core.experiment import release_data
            from fedapp.runtime.preflight import check as preflight
            from fedapp.runtime.results import run_name

            cfg = preflight(overrides, base=ROOT)  # the ServerApp runs in ROOT
            release_data()  # the check's dataset: this process waits out the run and never trains
            overrides.setdefault("run-name", run_name(cfg))  # the time of the launch, not of the run's start
        write_flower_config(home, num_supernodes, num_cpus, num_gpus)
        wait_for_superlink(superlink, home, env)  # --timeout is the run's: it counts from the submission
        args = ["run", str(app), "local", "--format", "json"]
        if overrides:
            args += ["--run-config", " ".join(f"{k}={toml_value(v)}" for k, v in overrides.items())]
        sub = submit.run(args)
        try:
            run_id = json.loads(sub.stdout)["run-id"]
        except (ValueError, KeyError):
            raise RuntimeError(f"flwr run did not start a run:\n{sub.stdout}\n{sub.stderr}") from None
        log = subprocess.Popen([str(BIN / "flwr"), "log", run_id, "local", "--stream"], env=env, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                               preexec_fn=ends_with_this_process())
        reader = threading.Thread(target=follow_log, args=(log.stdout, stream, found), daemon=True)
        reader.start()
        deadline = None if timeout is None else time.time() + timeout
        try:
            for every in status_waits():
                if (status := wait_for_status(run_id, env, log, deadline, every))["status"].startswith("finished"):
                    break
                if deadline is not None and time.time() > deadline:
                    raise TimeoutError
        except (KeyboardInterrupt, TimeoutError) as why:
            timed_out = isinstance(why, TimeoutError)
            # a second Ctrl-C must not cut the cleanup short and orphan the simulation again
            old = signal.signal(signal.SIGINT, signal.SIG_IGN)
            status = None
            try:
                _flwr(["stop", run_id, "local"], env, timeout=60)
                end = time.time() + 10
                while time.time() < end and not (status := run_status(run_id, env))["status"].startswith("finished"):
                    time.sleep(0.5)
            except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
                pass  # the processes are stopped below either way
            finally:
                signal.signal(signal.SIGINT, old)
            what = f"timed out after {timeout:.0f} s (--timeout)" if timed_out else "interrupted"
            stopped = RunStopped(f"run {run_id} {what}: stopped it and its processes; the results so far "
                                 f"are in {found[0] if found else 'its results folder'}", status,
                                 124 if timed_out else 130)
        else:
            try:  # the log stream ends with the run: let it print the last lines
                log.wait(timeout=5)
                reader.join(timeout=5)
            except subprocess.TimeoutExpired:
                pass
            status["results"] = str(found[0]) if found else None
            return status
    finally:
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if submit is not None:
                submit.close()
            # the log follower first: a `flwr log` still running would start a new local SuperLink
            if log is not None:
                log.terminate()
                try:
                    log.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    log.kill()
                    log.wait()
            stop_local_superlink(home, token)
            reaper.done()
        finally:
            signal.signal(signal.SIGINT, old)
    replot(found[0] if found else None)  # nothing writes to the folder any more
    raise stopped


def _sigterm(signum, frame):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m fedapp.runtime.launch", description=__doc__.split("\n\n")[0],
        epilog="Ctrl-C (or SIGTERM) stops the run on the SuperLink and every process it started "
               "(simulation, Ray) and keeps the results so far (rounds.json/csv, plot.png, checkpoint.pt); "
               "exit status 0 completed, 1 failed, 2 bad run config, 124 timed out, 130 interrupted.")
    p.add_argument("--run-config", action="append", default=[],
                   help="run-config overrides, as for `flwr run --run-config` (\"k=v k2='s'\"), and/or "
                        "TOML files; may be repeated; later values win, so a file combines with overrides")
    p.add_argument("--num-supernodes", type=int, default=None, help="default: the run config's num-clients")
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs per simulated client")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPU share per simulated client")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop the run (like Ctrl-C) after this many seconds; default: no limit")
    p.add_argument("--flwr-home", type=Path, default=ROOT / ".flwr-home",
                   help="private Flower home (config.toml, local SuperLink state); default: .flwr-home here")
    p.add_argument("--port-base", type=int, default=None,
                   help="the local SuperLink's HTTP API port is this + 1, its control API this + 3; they must be "
                        "free (default: free ports drawn at random, so parallel launches never meet)")
    a = p.parse_args(argv)
    # Ctrl-C must reach us even where the shell started us with SIGINT ignored (`cmd &`)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        status = launch(a.run_config, a.num_supernodes, home=a.flwr_home, port_base=a.port_base,
                        num_cpus=a.num_cpus, num_gpus=a.num_gpus, timeout=a.timeout)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except RunStopped as stop:
        print(stop, file=sys.stderr)
        sys.exit(stop.exit_code)
    except KeyboardInterrupt:  # before a run was submitted: what had started is stopped already
        print("interrupted before the run started", file=sys.stderr)
        sys.exit(130)
    print(f"run {status['run-id']}: {status['status']} in {status['elapsed']:.1f} s; results in {status['results']}")
    sys.exit(0 if status["status"] == "finished:completed" else 1)


if __name__ == "__main__":
    main()
