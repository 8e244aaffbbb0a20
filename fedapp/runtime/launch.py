"""Run a Flower app folder with ``flwr run`` on a private local simulation federation, and clean up:
``fedapp run [APP_DIR]``, and in a checkout ``python -m fedapp.runtime.launch``.

``flwr run --stream`` exits 0 even when the run failed, and the local SuperLink it
starts keeps running; this launcher submits the run, follows its log, reads the
final status with ``flwr ls --run-id ID --format json``, and stops the SuperLink it
started. It starts that SuperLink itself, on free ports, in the app's folder, while it checks the
run config of an app of fedapp's ServerApp (``fedapp/runtime/preflight.py``), and submits once the
check passed, never to a SuperLink that another launch (or anything else) runs; on Ctrl-C,
SIGTERM or ``--timeout`` it stops the run and every process it started. When it ends without
that cleanup (SIGKILL, the kernel's out-of-memory killer), its processes end with it
(``fedapp/runtime/processes.py``). Its Flower home is a temporary folder of its own, removed
afterwards, unless ``--flwr-home`` names one. Used by ``scripts/run.sh``, the tests and the benchmarks.

    fedapp run myapp --run-config "strategy='fedprox' num-server-rounds=5"
    python -m fedapp.runtime.launch --run-config "strategy='fedprox' num-server-rounds=5"
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from fedapp.core.config import COMMON_KEYS, ConfigError
from fedapp.runtime.appdir import (app_files, read_app, run_config_overrides,  # noqa: F401 (the launcher's API)
                                   serves_fedapp, toml_value)
from fedapp.runtime.processes import (BIN, LAUNCH_ID, ROOT, PrewarmedFlwr, Reaper,  # noqa: F401
                                      ends_with_this_process, flwr_env, free_port_base, launched_processes,
                                      ports_free, process_tree, start_local_superlink, stop_local_superlink,
                                      superlink_command, wait_for_superlink, write_flower_config, _processes)

NUM_CLIENTS = next(k for k in COMMON_KEYS if k.name == "num-clients")
#: what ``python -m fedapp.runtime.launch`` runs: the checkout it lives in, or (installed) this folder
CHECKOUT = ROOT if (ROOT / "pyproject.toml").is_file() else Path(".")


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



def check_app(app: Path, run_config: dict):
    """fedapp's preflight of the app's whole run config (its table and the overrides), with the app's
    own modules importable (a ``model = "pkg.module:Net"`` of the app), as its ServerApp imports them."""
    from fedapp.core.experiment import release_data
    from fedapp.runtime.preflight import check as preflight

    # no __pycache__ left in the app's sources
    sys.path.insert(0, str(app))
    bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        cfg = preflight(run_config, base=app)
    finally:
        sys.path.remove(str(app))
        sys.dont_write_bytecode = bytecode
    release_data()  # the check's dataset: this process waits out the run and never trains
    return cfg


class Launch:
    """One launch: its Flower home, the processes it started, and what it learnt of its run; the steps
    of ``launch`` and the cleanup that stops every process whatever happened."""

    def __init__(self, app: Path, home: Path | None, port_base: int | None, stream: bool):
        self.app, self.stream = app, stream
        self.table, self.components = read_app(app)  # a folder that is no Flower app: before anything starts
        if port_base is not None and not ports_free(port_base):
            raise ConfigError(f"--port-base {port_base}: port {port_base + 1} or {port_base + 3} is in use (another "
                              "SuperLink?); a launch only submits to a SuperLink it started: leave --port-base out "
                              "to use free ports")
        # a Flower home of its own: nothing in the app's folder or the user's ~/.flwr, removed afterwards
        self.private = home is None
        self.home = Path(tempfile.mkdtemp(prefix="fedapp-flwr-") if home is None else home).resolve()
        self.env = flwr_env(self.home, free_port_base() if port_base is None else port_base)
        # a caller may set the id to find the processes itself (the tests do)
        self.token = self.env[LAUNCH_ID] = os.environ.get(LAUNCH_ID) or uuid.uuid4().hex
        self.found: list[Path] = []  # the results folder, once the ServerApp's log names it
        self.log = self.submitter = self.reader = None
        self.keep_home = False
        self.reaper = Reaper(self.home, self.env, remove=self.private)  # before anything it would have to stop

    def overrides(self, run_config: str | list[str], check: bool) -> tuple[dict, dict]:
        """The keys to submit and the whole run config they make with the app's table; for an app of
        fedapp's ServerApp (``check``) the whole is checked first. The app's folder goes in as its
        ``app-dir``, where the app declares one, so relative paths read from there."""
        overrides = run_config_overrides(run_config)
        if "app-dir" in self.table:
            overrides.setdefault("app-dir", str(self.app))
        merged = {**self.table, **overrides}
        if check and serves_fedapp(self.components):
            from fedapp.runtime.results import run_name

            # an app without the key runs in its folder (the SuperLink's): the check reads its paths there too
            cfg = check_app(self.app, {**merged, "app-dir": merged.get("app-dir") or str(self.app)})
            if "run-name" in self.table:  # the time of the launch, not of the run's start
                overrides.setdefault("run-name", run_name(cfg))
        return overrides, merged

    def start(self, run_config: str | list[str], num_supernodes: int | None, check: bool, num_cpus: int,
              num_gpus: float) -> dict:
        """Start the SuperLink and the `flwr` that will submit, beside this process reading and checking
        the run config (a bad one stops both, in ``close``, before anything is submitted); the overrides."""
        superlink = start_local_superlink(self.home, self.env, cwd=self.app)
        self.submitter = PrewarmedFlwr(self.env, self.app)
        overrides, merged = self.overrides(run_config, check)
        if num_supernodes is None:  # checked as the run config's key, before the SuperNodes are made
            num_supernodes = NUM_CLIENTS.parse(merged.get("num-clients", NUM_CLIENTS.default))
        write_flower_config(self.home, num_supernodes, num_cpus, num_gpus)
        try:
            wait_for_superlink(superlink, self.home, self.env)  # --timeout is the run's: from the submission
        except RuntimeError:
            self.keep_home = True  # the error names the SuperLink's log there
            raise
        return overrides

    def submit(self, overrides: dict) -> str:
        """Submit the run and follow its log; its run id."""
        args = ["run", str(self.app), "local", "--format", "json"]
        if overrides:
            args += ["--run-config", " ".join(f"{k}={toml_value(v)}" for k, v in overrides.items())]
        sub = self.submitter.run(args)
        try:
            run_id = json.loads(sub.stdout)["run-id"]
        except (ValueError, KeyError, TypeError):
            raise RuntimeError(f"flwr run did not start a run:\n{sub.stdout}\n{sub.stderr}") from None
        self.log = subprocess.Popen([str(BIN / "flwr"), "log", str(run_id), "local", "--stream"], env=self.env,
                                    cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    errors="replace", preexec_fn=ends_with_this_process())
        self.reader = threading.Thread(target=follow_log, args=(self.log.stdout, self.stream, self.found), daemon=True)
        self.reader.start()
        return str(run_id)

    def follow(self, run_id: str, timeout: float | None) -> dict | RunStopped:
        """The run's final status (with its results folder), or, stopped by Ctrl-C or ``timeout``, why."""
        deadline = None if timeout is None else time.time() + timeout
        try:
            for every in status_waits():
                if (status := wait_for_status(run_id, self.env, self.log, deadline, every))["status"].startswith(
                        "finished"):
                    break
                if deadline is not None and time.time() > deadline:
                    raise TimeoutError
        except (KeyboardInterrupt, TimeoutError) as why:
            return self.stop_run(run_id, timeout if isinstance(why, TimeoutError) else None)
        try:  # the log stream ends with the run: let it print the last lines
            self.log.wait(timeout=5)
            self.reader.join(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        status["results"] = str(self.found[0]) if self.found else None
        return status

    def stop_run(self, run_id: str, timed_out: float | None) -> RunStopped:
        """Stop the run on the SuperLink (``timed_out``: after that many seconds of --timeout)."""
        # a second Ctrl-C must not cut the cleanup short and orphan the simulation again
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        status = None
        try:
            _flwr(["stop", run_id, "local"], self.env, timeout=60)
            end = time.time() + 10
            while time.time() < end and not (status := run_status(run_id, self.env))["status"].startswith("finished"):
                time.sleep(0.5)
        except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
            pass  # the processes are stopped in ``close`` either way
        finally:
            signal.signal(signal.SIGINT, old)
        what = "interrupted" if timed_out is None else f"timed out after {timed_out:.0f} s (--timeout)"
        return RunStopped(f"run {run_id} {what}: stopped it and its processes; the results so far are in "
                          f"{self.found[0] if self.found else 'its results folder'}", status,
                          130 if timed_out is None else 124)

    def close(self) -> None:
        """Stop every process of the launch, and remove its own Flower home."""
        old = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            if self.submitter is not None:
                self.submitter.close()
            # the log follower first: a `flwr log` still running would start a new local SuperLink
            if self.log is not None:
                self.log.terminate()
                try:
                    self.log.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.log.kill()
                    self.log.wait()
            stop_local_superlink(self.home, self.token)
            if self.private and not self.keep_home:
                shutil.rmtree(self.home, ignore_errors=True)
            self.reaper.done()
        finally:
            signal.signal(signal.SIGINT, old)


def launch(run_config: str | list[str] = "", num_supernodes: int | None = None, home: Path | None = None,
           port_base: int | None = None, num_cpus: int = 1, num_gpus: float = 0.0, timeout: float | None = None,
           stream: bool = True, app: Path = ROOT, check: bool = True) -> dict:
    """Submit one run of the app folder ``app``, wait for it, return its final ``flwr ls`` entry (stops
    the SuperLink).

    The run goes to a SuperLink this call starts, on free ports (``port_base``: on those ports,
    which must be free), never to one that was running already; ``home``: the Flower home (default a
    temporary one, removed afterwards). ``num_supernodes`` defaults to the run config's ``num-clients``
    (the app's table, a TOML file's, an override's). With ``check``, an app of fedapp's ServerApp has
    its whole run config validated here first (fedapp/runtime/preflight.py): a bad one raises
    ConfigError before anything is submitted. Ctrl-C (KeyboardInterrupt) or ``timeout`` s stop the run,
    the SuperLink and every process they started, and raise RunStopped; the results written so far stay.
    """
    run = Launch(Path(app).resolve(), home, port_base, stream)
    try:
        overrides = run.start(run_config, num_supernodes, check, num_cpus, num_gpus)
        outcome = run.follow(run.submit(overrides), timeout)
    finally:
        run.close()
    if isinstance(outcome, RunStopped):
        replot(run.found[0] if run.found else None)  # nothing writes to the folder any more
        raise outcome
    return outcome


def _sigterm(signum, frame):
    raise KeyboardInterrupt


EPILOG = ("Ctrl-C (or SIGTERM) stops the run on the SuperLink and every process it started (simulation, Ray) and "
          "keeps the results so far (rounds.json/csv, plot.png, checkpoint.pt); exit status 0 completed, 1 failed, "
          "2 bad run config, 124 timed out, 130 interrupted.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The launcher's options, shared by ``fedapp run`` and ``python -m fedapp.runtime.launch``."""
    p.add_argument("--run-config", action="append", default=[],
                   help="run-config overrides, as for `flwr run --run-config` (\"k=v k2='s'\"), and/or "
                        "TOML files; may be repeated; later values win, so a file combines with overrides")
    p.add_argument("--num-supernodes", type=int, default=None, help="default: the run config's num-clients")
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs per simulated client")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPU share per simulated client")
    p.add_argument("--timeout", type=float, default=None,
                   help="stop the run (like Ctrl-C) after this many seconds; default: no limit")
    p.add_argument("--flwr-home", type=Path, default=None,
                   help="Flower home (config.toml, local SuperLink state); default: a temporary folder, removed after")
    p.add_argument("--port-base", type=int, default=None,
                   help="the local SuperLink's HTTP API port is this + 1, its control API this + 3; they must be "
                        "free (default: free ports drawn at random, so parallel launches never meet)")


def run_app(a: argparse.Namespace) -> None:
    """Launch the app folder ``a.app`` with the options of ``add_arguments``, and exit with the run's status."""
    # Ctrl-C must reach us even where the shell started us with SIGINT ignored (`cmd &`)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        status = launch(a.run_config, a.num_supernodes, home=a.flwr_home, port_base=a.port_base, num_cpus=a.num_cpus,
                        num_gpus=a.num_gpus, timeout=a.timeout, app=a.app)
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m fedapp.runtime.launch", description=__doc__.split("\n\n")[0],
                                epilog=EPILOG)
    p.add_argument("--app", type=Path, default=CHECKOUT,
                   help="the Flower app folder to run (default: this checkout; installed: this folder)")
    add_arguments(p)
    run_app(p.parse_args(argv))


if __name__ == "__main__":
    main()
