"""cProfile of the app's own per-message work: the real ServerApp and ClientApp over the
in-process grid (no Ray, no SuperLink), so what shows up is fedapp's overhead and training.

    python simulations/bench/profile_local.py --local-steps 1 --top 25
    python simulations/bench/profile_local.py --run-config "strategy='scaffold'"
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time

from common import BASE, load

import torch

from fedapp.core.compat import parse_config_args
from fedapp.runtime.inprocess import run_local


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--local-steps", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--run-config", default="", help="extra overrides, e.g. \"strategy='fedsmoo'\"")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--sort", default="tottime")
    a = p.parse_args()
    torch.set_num_threads(1)
    extra = parse_config_args([a.run_config]) if a.run_config else {}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = {**BASE, "local-steps": a.local_steps, "num-server-rounds": a.rounds, "central-eval": False,
               "fraction-evaluate": 0.0, "results-dir": tmp, "run-name": "p", **extra}
        run_local({**cfg, "num-server-rounds": 1})  # warm the per-process caches
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        strategy = run_local(cfg)
        prof.disable()
        wall = time.perf_counter() - t0
    msgs = sum(r.get("replies", 0) for r in strategy.history)
    print(f"{msgs} training messages in {wall:.2f} s: {1000 * wall / max(msgs, 1):.1f} ms per message "
          f"at {a.local_steps} local steps; {load()}")
    pstats.Stats(prof).sort_stats(a.sort).print_stats(a.top)


if __name__ == "__main__":
    main()
