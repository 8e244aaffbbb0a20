"""Run the app with ``flwr run`` on a private local simulation federation, and clean up.

``flwr run --stream`` exits 0 even when the run failed, and the local SuperLink it
starts keeps running; this launcher submits the run, follows its log, reads the
final status with ``flwr ls --run-id ID --format json``, and stops the SuperLink it
started. Used by ``scripts/run.sh``, the tests and the benchmarks.

    python -m fedapp.launch --run-config "strategy='fedprox' num-server-rounds=5"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from fedapp.config import COMMON_KEYS

COMMON_DEFAULTS = {k.name: k.default for k in COMMON_KEYS}

ROOT = Path(__file__).resolve().parents[1]


def flwr_env(home: Path, port_base: int) -> dict[str, str]:
    """Environment for a private, offline Flower: own FLWR_HOME and local SuperLink ports."""
    env = dict(os.environ)
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


def _flwr(args: list[str], env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["flwr", *args], env=env, cwd=ROOT, text=True, capture_output=True, **kw)


def run_status(run_id: str, env: dict) -> dict:
    out = _flwr(["ls", "--run-id", run_id, "--format", "json", "local"], env)
    return json.loads(out.stdout)["runs"][0]


def stop_local_superlink(home: Path) -> None:
    """Stop the SuperLink (and its children) that flwr started for this FLWR_HOME."""
    marker = str(home / "local-superlink")

    def pids() -> list[int]:
        rows = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout.splitlines()
        return [int(pid) for pid, _, args in (r.strip().partition(" ") for r in rows)
                if marker in args and "flower-superlink" in args]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            try:
                os.killpg(os.getpgid(pid), sig)
            except ProcessLookupError:
                pass
        for _ in range(50):
            if not pids():
                return
            time.sleep(0.2)


def run_config_overrides(run_config: str) -> dict:
    """The keys a ``--run-config`` argument sets: a TOML file's table, or ``k=v`` pairs."""
    path = Path(run_config)
    if run_config.endswith(".toml") and path.is_file():
        with open(path, "rb") as f:
            return tomllib.load(f)
    return dict(kv.split("=", 1) for kv in shlex.split(run_config) if "=" in kv)


def launch(run_config: str = "", num_supernodes: int | None = None, home: Path | None = None,
           port_base: int = 39190, num_cpus: int = 1, num_gpus: float = 0.0, timeout: float = 3600,
           stream: bool = True, app: Path = ROOT) -> dict:
    """Submit one run, wait for it, return its final ``flwr ls`` entry (stops the SuperLink).

    ``num_supernodes`` defaults to the run config's ``num-clients`` (a TOML file's too).
    """
    home = Path(home or ROOT / ".flwr-home").resolve()
    if num_supernodes is None:
        num_supernodes = int(run_config_overrides(run_config).get("num-clients", COMMON_DEFAULTS["num-clients"]))
    write_flower_config(home, num_supernodes, num_cpus, num_gpus)
    env = flwr_env(home, port_base)
    log = None
    try:
        args = ["run", str(app), "local", "--format", "json"]
        if run_config:
            args += ["--run-config", run_config]
        sub = _flwr(args, env)
        try:
            run_id = json.loads(sub.stdout)["run-id"]
        except (ValueError, KeyError):
            raise RuntimeError(f"flwr run did not start a run:\n{sub.stdout}\n{sub.stderr}") from None
        log = subprocess.Popen(["flwr", "log", run_id, "local", "--stream"], env=env, cwd=ROOT,
                               stdout=None if stream else subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while (status := run_status(run_id, env))["status"].split(":")[0] != "finished":
            if time.time() > deadline:
                _flwr(["stop", run_id, "local"], env)
                raise TimeoutError(f"run {run_id} still {status['status']} after {timeout:.0f} s")
            time.sleep(1.0)
        time.sleep(1.0)  # let the log stream print the last lines
        return status
    finally:
        # the log follower first: a `flwr log` still running would start a new local SuperLink
        if log is not None:
            log.terminate()
            try:
                log.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.kill()
                log.wait()
        stop_local_superlink(home)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run-config", default="", help="run-config overrides, as for `flwr run --run-config`")
    p.add_argument("--num-supernodes", type=int, default=None, help="default: the run config's num-clients")
    p.add_argument("--num-cpus", type=int, default=1, help="CPUs per simulated client")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPU share per simulated client")
    p.add_argument("--timeout", type=float, default=3600)
    a = p.parse_args()
    status = launch(a.run_config, a.num_supernodes, num_cpus=a.num_cpus, num_gpus=a.num_gpus, timeout=a.timeout)
    print(f"run {status['run-id']}: {status['status']} in {status['elapsed']:.1f} s")
    sys.exit(0 if status["status"] == "finished:completed" else 1)


if __name__ == "__main__":
    main()
