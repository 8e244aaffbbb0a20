"""Peak memory of an in-process run (``fedapp.runtime.inprocess``) of a paper setting, and where the clients'
state is: FedSMOO at 100 ResNet-18-GN clients keeps two model-sized duals per client (90 MB),
9 GB for all of them, which ``state-memory-mb`` spills to disk.

The run goes in a child process (one torch thread, the serial engine), shortened to ``--rounds``
rounds of ``--local-steps`` steps with no evaluation; the setting's participation and sizes stay.
This process samples the child's process tree every 0.5 s (``common.Monitor``: summed RSS), the
child reports its kernel high-water mark (VmHWM, the exact peak of its RSS), and after each round
the summed RSS and the number of clients whose state is on disk are recorded. One JSON line.
``--census`` also has the child count, after each round and before any explicit garbage collection,
the client objects still alive and the bytes of the tensors alive (what waits for Python's cycle
collector shows here); ``--set key=value`` changes any run-config key (a smaller model, say).

    python simulations/bench/memory.py simulations/fedsmoo/paper-cifar10-dir0.6-10pct-of-100.toml --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

from common import ROOT, Monitor, record, tree

CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from fedapp.runtime.inprocess import run_local
if {census!r}:
    import gc, torch
    import fedapp.server.loop
    from clients.base import FedClient
    record = fedapp.server.loop.record

    def counted(driver, row, writer, result=None):
        objs = gc.get_objects()  # no gc.collect(): what the run itself left alive
        storages = {{t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in objs
                    if type(t) in (torch.Tensor, torch.nn.Parameter)}}
        with open(sys.argv[2] + "/census.jsonl", "a") as f:  # read at each round boundary by the parent
            f.write(json.dumps({{"clients_alive": sum(isinstance(o, FedClient) for o in objs),
                                "tensor_mib": sum(storages.values()) / 2**20}}) + "\\n")
        record(driver, row, writer, result)
    fedapp.server.loop.record = counted
run_local(json.loads(sys.argv[1]))
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print("VMHWM_KIB", hwm, flush=True)
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("setting", help="a run-config TOML file (simulations/<paper>/*.toml)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--local-steps", type=int, default=1)
    p.add_argument("--fraction", type=float, help="fraction-train instead of the setting's")
    p.add_argument("--state-memory-mb", type=float, help="instead of the default (2048)")
    p.add_argument("--reply-memory-mb", type=float,
                   help="instead of the default (2048); a huge value holds every reply of a round in memory")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="run-config keys instead of the setting's (TOML values: model='mlp')")
    p.add_argument("--census", action="store_true",
                   help="count the client objects and tensor bytes alive after each round (slower)")
    p.add_argument("--out")
    a = p.parse_args()
    with open(a.setting, "rb") as f:
        cfg = tomllib.load(f)
    with tempfile.TemporaryDirectory(prefix="fedapp-memory-") as tmp:
        spill = Path(tmp) / "spill"
        cfg.update({"num-server-rounds": a.rounds, "local-steps": a.local_steps, "eval-every": a.rounds,
                    "central-eval": False, "fraction-evaluate": 0.0, "checkpoint-every": 0, "num-threads": 1,
                    "local-workers": 1, "results-dir": f"{tmp}/results", "run-name": "memory",
                    "state-spill-dir": str(spill)})
        cfg.update(tomllib.loads("\n".join(a.set)))
        if a.fraction is not None:
            cfg["fraction-train"] = a.fraction
        if a.state_memory_mb is not None:
            cfg["state-memory-mb"] = a.state_memory_mb
        if a.reply_memory_mb is not None:
            cfg["reply-memory-mb"] = a.reply_memory_mb
        mon = Monitor(tmp, Path(tmp) / "results/memory/rounds.json")
        census = Path(tmp) / "census.jsonl"
        per_round: list[dict] = []

        def after_rounds() -> None:  # summed RSS and state files at each round boundary
            while not mon.done.wait(0.5):
                while len(per_round) < len(mon.round_at):
                    files = list(spill.glob("*.pt"))
                    per_round.append({"round": len(per_round), "rss_mib": sum(r for _, r in tree(tmp).values()) / 2**20,
                                      "peak_so_far_mib": mon.peak_rss / 2**20, "clients_with_state_on_disk": len(files),
                                      "state_on_disk_mib": sum(f.stat().st_size for f in files) / 2**20,
                                      "time": time.strftime("%H:%M:%S")})
                    if a.census:  # the child's count, written just before the round's row
                        per_round[-1].update(json.loads(census.read_text().splitlines()[len(per_round) - 1]))
                    print(json.dumps(per_round[-1]), file=sys.stderr, flush=True)  # a stopped run keeps these

        mon.start()
        watcher = threading.Thread(target=after_rounds, daemon=True)
        watcher.start()
        t0 = time.time()
        out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), census=a.census), json.dumps(cfg), tmp],
                             capture_output=True, text=True)
        wall = time.time() - t0
        mon.done.set()
        mon.join()
        watcher.join()
        if out.returncode:
            sys.exit(out.stderr[-3000:])
        hwm = int(out.stdout.split("VMHWM_KIB")[1].split()[0]) / 2**10
        rows = json.loads((Path(tmp) / "results/memory/rounds.json").read_text())["rounds"]
        files = list(spill.glob("*.pt"))
        record(a.out, bench="memory", setting=a.setting, strategy=cfg["strategy"], model=cfg["model"],
               clients=cfg["num-clients"], fraction=cfg["fraction-train"], rounds=a.rounds, local_steps=a.local_steps,
               reply_memory_mb=cfg.get("reply-memory-mb", 2048.0), changed=a.set,
               peak_tree_rss_mib=mon.peak_rss / 2**20, child_vmhwm_mib=hwm, per_round=per_round,
               clients_with_state_on_disk=len(files), state_on_disk_mib=sum(f.stat().st_size for f in files) / 2**20,
               train_seconds=[r.get("train-seconds") for r in rows if r["round"] > 0], wall_s=wall)


if __name__ == "__main__":
    main()
