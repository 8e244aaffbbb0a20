"""Launch to the first round, process by process: ``fedapp run`` of the app ``fedapp new`` writes (its
defaults: FedAvg, the synthetic data, 2 clients), or with ``--strategy`` one ``python -m
fedapp.runtime.launch`` of a benchmark setting; when each process appeared, when round 0's row (the end of
discovery and the first central evaluation) and round 1's were written, and the CPU seconds each process
had used at round 0.

Every process of a launch inherits its ``FEDAPP_LAUNCH_ID``: the launcher, ``flwr run``, ``flwr log``,
the SuperLink, the SuperExec, the simulation process, Ray's services and workers. They are sampled
from ``/proc`` every 0.1 s; a process that exits keeps its last sample. Prints one JSON line.

    python -m simulations.bench.startup                      # `fedapp run` of a new app
    python -m simulations.bench.startup --strategy fedavg    # FedAvg's benchmark setting at 10 clients
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import emit, run_config_str  # noqa: E402
from overhead import SETTINGS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TICK, PAGE = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")

#: a process's role, from its command line (first match)
ROLES = (("from fedapp.core.compat import flwr_cli", "flwr run (launcher's, prewarmed)"),
         ("fedapp.runtime.launch", "launcher"), ("-m fedapp run", "launcher"),
         ("flwr run", "flwr run"), ("flwr log", "flwr log"), ("flwr ls", "flwr ls"),
         ("flwr stop", "flwr stop"), ("flower-superlink", "superlink"), ("flower-superexec", "superexec"),
         ("flwr-simulation", "simulation"), ("gcs_server", "ray gcs"), ("raylet", "ray raylet"),
         ("dashboard/agent.py", "ray dashboard agent"), ("runtime_env/agent", "ray runtime-env agent"),
         ("dashboard.py", "ray dashboard"), ("log_monitor", "ray log monitor"), ("monitor.py", "ray monitor"),
         ("ClientAppActor", "ray worker (ClientAppActor)"), ("ray::IDLE", "ray::IDLE"), ("ray::", "ray worker"))


def role(cmdline: str) -> str:
    """The process's role; for any other process its command line, each absolute path cut to its last
    part (a line names no folder of the machine it was measured on)."""
    plain = " ".join(Path(word).name if word.startswith("/") else word for word in cmdline.split())
    return next((name for key, name in ROLES if key in cmdline), plain[:60])


def commit(tree: Path) -> str | None:
    """The commit checked out in ``tree``: which code a line measured, without the checkout's folder."""
    r = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or None


def pss_bytes(proc: Path) -> int:
    """A process's proportional set size: its resident pages, each shared page divided among the
    processes that share it (forked workers, Ray's workers), so a tree's PSS adds up to its memory."""
    for line in (proc / "smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return int((proc / "statm").read_text().split()[1]) * PAGE


def sample(token: bytes, ours: dict[int, bool], seen: dict[int, dict], t0: float, pss: bool = False) -> int:
    """Update ``seen`` (pid -> first seen, CPU, memory, role) with the launch's processes now alive;
    returns their memory together: RSS, or with ``pss`` the PSS (``pss_bytes``, which makes the kernel
    walk each process's page tables: too costly for start-up's 0.1 s samples)."""
    total = 0
    now = time.time() - t0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        pid = int(d.name)
        try:
            if pid not in ours:
                ours[pid] = token in (d / "environ").read_bytes().split(b"\0")
            if not ours[pid]:
                continue
            fields = (d / "stat").read_text().rpartition(")")[2].split()
            mem = pss_bytes(d) if pss else int((d / "statm").read_text().split()[1]) * PAGE
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        row = seen.setdefault(pid, {"first": now, "role": "", "ppid": int(fields[1])})
        row.update(cpu=(int(fields[11]) + int(fields[12])) / TICK, mem=mem, last=now)
        total += mem
        if cmd:  # an exiting process's command line reads empty
            row["role"] = role(cmd)
    return total


def rows_at(path: Path | None) -> list[dict]:
    try:
        return json.loads(path.read_text())["rounds"] if path is not None else []
    except (OSError, ValueError, KeyError):
        return []


def follow(cmd: list[str], cwd: Path, env: dict, rows_file, limit: float | None) -> dict:
    """Run ``cmd`` (a launch whose processes inherit ``env``'s FEDAPP_LAUNCH_ID) and sample its processes
    until it ends; ``rows_file()``: its rounds.json once there is one. ``limit``: stop it (as Ctrl-C
    does) after that many seconds and return what was seen so far."""
    token = env["FEDAPP_LAUNCH_ID"].encode()
    ours: dict[int, bool] = {}
    seen: dict[int, dict] = {}
    at: dict[int, float] = {}  # seconds to round k's row
    at_first: dict[int, float] | None = None
    t0, stopped = time.time(), False
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        ours[proc.pid] = True
        while proc.poll() is None:
            if limit is not None and not stopped and time.time() - t0 > limit:
                proc.send_signal(signal.SIGINT)
                stopped = True
            sample(b"FEDAPP_LAUNCH_ID=" + token, ours, seen, t0)
            if len(at) < 2:
                for row in rows_at(rows_file()):
                    at.setdefault(row["round"], time.time() - t0)
                if 0 in at and at_first is None:
                    at_first = {pid: row["cpu"] for pid, row in seen.items()}
            time.sleep(0.1)
        wall = time.time() - t0
        err.seek(0)
        failed = err.read()[-1000:] if proc.returncode and not stopped else None
    procs = sorted(({"role": r["role"], "pid": pid, "ppid": r["ppid"], "first_seen_s": round(r["first"], 2),
                     "cpu_to_first_round_s": None if at_first is None else at_first.get(pid),
                     "cpu_total_s": r["cpu"]} for pid, r in seen.items()), key=lambda r: r["first_seen_s"])
    return {"to_first_round_s": at.get(0), "to_round_1_s": at.get(1), "wall_s": wall,
            "stopped_at_s": limit if stopped else None, "failed": failed,
            "cpu_to_first_round_s": None if at_first is None else sum(at_first.values()),
            "processes": procs, "load": os.getloadavg(), "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def timeline(cfg: dict, rounds: int = 1, limit: float | None = None, tree: Path = ROOT) -> dict:
    """``python -m fedapp.runtime.launch`` of ``cfg`` for ``rounds`` rounds; ``tree``: the checkout whose
    launcher and app run (another commit's, to compare)."""
    with tempfile.TemporaryDirectory(prefix="fedapp-startup-") as tmp:
        cfg = {**cfg, "num-server-rounds": rounds, "eval-every": rounds, "results-dir": f"{tmp}/results",
               "run-name": "startup"}
        env = {**os.environ, "FEDAPP_LAUNCH_ID": uuid.uuid4().hex, "PYTHONPATH": str(tree)}
        cmd = [sys.executable, "-m", "fedapp.runtime.launch", "--run-config", run_config_str(cfg),
               "--flwr-home", f"{tmp}/flwr-home", "--port-base", "39790"]
        out = follow(cmd, tree, env, lambda: Path(tmp) / "results/startup/rounds.json", limit)
    return {"strategy": cfg["strategy"], "clients": cfg["num-clients"], **out}


def new_app_timeline(limit: float | None = None, tree: Path = ROOT) -> dict:
    """``fedapp run APP`` of the app ``fedapp new APP`` writes, as written (its 10 rounds: the launch ends
    soon after round 1), started from the folder above it."""
    with tempfile.TemporaryDirectory(prefix="fedapp-startup-") as tmp:
        env = {**os.environ, "FEDAPP_LAUNCH_ID": uuid.uuid4().hex, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, "-m", "fedapp", "new", "app"], cwd=tmp, env=env, check=True,
                       capture_output=True)
        cmd = [sys.executable, "-m", "fedapp", "run", "app"]
        out = follow(cmd, Path(tmp), env, lambda: next(Path(tmp, "app", "results").glob("*/rounds.json"), None), limit)
    return {"app": "fedapp new", "strategy": "fedavg", "clients": 2, **out}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=sorted(SETTINGS), help="a benchmark setting through python -m "
                   "fedapp.runtime.launch (default: `fedapp run` of a new app)")
    p.add_argument("--local-steps", type=int, default=5, help="--strategy: local steps of the one round")
    p.add_argument("--limit", type=float, help="stop the launch after this many seconds (Ctrl-C) and report so far")
    p.add_argument("--tree", type=Path, default=ROOT, help="launch the app of this checkout (default: this one)")
    p.add_argument("--out", help="also append the JSON line to this file")
    a = p.parse_args(argv)
    if a.strategy is None:
        emit({**new_app_timeline(limit=a.limit, tree=a.tree.resolve()), "tree": commit(a.tree)}, a.out)
        return
    cfg = {**SETTINGS[a.strategy], "local-steps": a.local_steps}
    if a.strategy == "pefll":
        cfg["pefll.k"] = a.local_steps
    emit({**timeline(cfg, limit=a.limit, tree=a.tree.resolve()), "tree": commit(a.tree)}, a.out)


if __name__ == "__main__":
    main()
