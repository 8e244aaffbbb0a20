"""A bad run config through the launcher: seconds and CPU seconds from `python -m fedapp.runtime.launch`
to its one-line error (exit status 2), beside the floor any check pays: a Python process importing
torch, datasets and Flower's ServerApp. The ratio launcher/floor is what the launcher adds (its
SuperLink and prewarmed `flwr` started beside the check, the check itself, their stop).

    python simulations/bench/config_error.py --repeats 3
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time

from common import ROOT, fmt, load, record, stats

BAD = "partition='pathological' partition-classes=11"  # README's example: 11 classes of a 10-class dataset


def timed(args: list[str], expect: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``args`` (its own and its reaped children's), which must exit ``expect``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != expect:
        raise SystemExit(f"{' '.join(args[:4])}: exit {done.returncode}, not {expect}:\n{done.stderr[-2000:]}")
    return wall, (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out")
    a = p.parse_args()
    floor, launcher = [], []
    for _ in range(a.repeats):
        floor.append(timed([sys.executable, "-c", "import torch, datasets, flwr.serverapp"], 0))
        with tempfile.TemporaryDirectory() as home:
            launcher.append(timed([sys.executable, "-m", "fedapp.runtime.launch", "--flwr-home", home,
                                   "--run-config", BAD], 2))
    walls = {name: stats([w for w, _ in runs]) for name, runs in (("floor", floor), ("launcher", launcher))}
    cpus = {name: stats([c for _, c in runs]) for name, runs in (("floor", floor), ("launcher", launcher))}
    print(f"import floor: {fmt(walls['floor'])}, CPU {fmt(cpus['floor'])}")
    print(f"launcher to its error line: {fmt(walls['launcher'])}, CPU {fmt(cpus['launcher'])} ({load()})")
    record(a.out, bench="config_error", floor_s=walls["floor"]["median"], launcher_s=walls["launcher"]["median"],
           floor_cpu_s=cpus["floor"]["median"], launcher_cpu_s=cpus["launcher"]["median"],
           ratio=walls["launcher"]["median"] / walls["floor"]["median"], repeats=a.repeats)


if __name__ == "__main__":
    main()
