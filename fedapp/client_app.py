"""ClientApp: turns Flower messages into calls of the configured client class.

The client class (see ``clients/``) is chosen by the run config's ``strategy``. What
must outlive a message (duals, control variates, private bodies or heads) lives in
``context.state`` as ArrayRecords named ``state.<name>``; it is replaced only after
``fit`` returned, so a client that fails mid-round keeps its last committed state.

A SuperNode's ``context.state`` lives in its memory. When the node config names a
``state-dir``, every commit is also written there (one file per run, strategy and
partition, replaced atomically), and a restarted SuperNode, whose context starts empty,
reads it back at its next message. The run is named by the ``run-key`` every message's
config carries: a nonce the server draws for each new run and keeps in its checkpoint, so
a resumed run finds its clients' files and no other run ever reads them. A state too large to keep for every client in memory
(``state-memory-mb``) is only written to that file (or to ``state-spill-dir``), and the
context keeps a reference to it.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from pathlib import Path

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp

from fedapp import registry
from fedapp.config import RunConfig, parse_run_config
from fedapp.experiment import ClientData, client_data, device_of, model_for
from fedapp.faults import fault_mod
from fedapp.records import Payload, from_record, make_content, payload_of
from fedapp.results import atomic_write
from fedapp.watchdog import superlink_watchdog_mod

# Ray starts its workers at nice 15 (RAY_worker_niceness): beside any other busy process the
# simulated clients then get a few per cent of a core, and a round takes many times its compute.
# The simulation process imports this module before it starts Ray, so with 0 the workers keep
# the priority of the run that started them, unless the user chose another.
os.environ.setdefault("RAY_worker_niceness", "0")
# Ray's raylet also prestarts one idle worker per CPU when the simulation process registers; the
# simulated clients' actors get workers of their own beside them, so the prestarted ones only cost
# start-up CPU (two workers, 0.5 CPU s each at 2 CPUs) and memory. Unless the user chose otherwise.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")

STATE_PREFIX = "state."
SPILLED = "spilled-state"  # ConfigRecord {"path": file} when the committed state is only on disk

# the SuperLink watchdog, only at a SuperNode's ClientApp processes (fedapp/watchdog.py), and
# fault injection, a no-op unless the run config sets fault-fraction (fedapp/faults.py)
app = ClientApp(mods=[superlink_watchdog_mod, fault_mod])


def partition_id(context: Context) -> int:
    try:
        return int(context.node_config["partition-id"])
    except KeyError:
        raise ValueError("node config needs 'partition-id' (and 'num-partitions', or 'data-dir')") from None


def state_path(context: Context, cfg: RunConfig, spill: bool = False, key: str | None = None) -> Path | None:
    """This site's state file for the run ``key`` (the server's run-key; else the run id), when
    the node config names a ``state-dir`` or the state is spilled (then ``state-spill-dir``, by
    default under the system's temp dir)."""
    state_dir = context.node_config.get("state-dir") or (
        spill and (cfg.state_spill_dir or Path(tempfile.gettempdir()) / "fedapp-state"))
    if not state_dir:
        return None
    run = key or f"run{context.run_id}"
    return Path(str(state_dir)).expanduser() / f"{run}-{cfg.strategy}-p{partition_id(context)}.pt"


def load_state(context: Context, cfg: RunConfig, key: str | None = None) -> Payload:
    """The last committed state: from the context, or from ``state-dir`` after a SuperNode restart."""
    state = {name[len(STATE_PREFIX):]: from_record(rec) for name, rec in context.state.array_records.items()
             if name.startswith(STATE_PREFIX)}
    path = Path(context.state[SPILLED]["path"]) if SPILLED in context.state else state_path(context, cfg, key=key)
    if not state and path is not None and path.exists():
        state = torch.load(path, weights_only=True)
    return state


def spills(cfg: RunConfig, state: Payload) -> bool:
    """Whether ``state``, held by every client, would exceed ``state-memory-mb`` in memory."""
    nbytes = sum(v.numel() * v.element_size() for tensors in state.values() for v in tensors.values())
    return bool(cfg.state_memory_mb) and nbytes * cfg.num_clients > cfg.state_memory_mb * 2**20


def commit_state(context: Context, cfg: RunConfig, state: Payload, key: str | None = None) -> None:
    """Replace the persisted client state by ``state`` as a whole."""
    state = {name: {k: v.detach().cpu() for k, v in tensors.items()} for name, tensors in state.items()}
    spill = spills(cfg, state)
    if (path := state_path(context, cfg, spill, key)) is not None:
        # file first: if writing fails the reply fails and the context keeps the old state too;
        # a crash mid-write leaves only a temporary file next to the last complete one
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write(path, buf.getvalue())
    for name in [n for n in context.state.array_records if n.startswith(STATE_PREFIX)] + [SPILLED]:
        context.state.pop(name, None)
    if spill:
        context.state[SPILLED] = ConfigRecord({"path": str(path)})
        return
    for name, tensors in state.items():
        context.state[STATE_PREFIX + name] = ArrayRecord(tensors)


_DATA: dict[tuple, ClientData] = {}


def cached_client_data(cfg: RunConfig, pid: int, data_dir: str | None) -> ClientData:
    """``client_data``, kept per process for one run config: gathering a partition's tensors
    costs tens of ms per message, and all partitions together are one copy of the dataset
    (read-only: clients never write to their data)."""
    key = tuple(sorted(cfg.as_dict().items()))
    if _DATA and next(iter(_DATA))[0] != key:  # another run in this process: drop the old one
        _DATA.clear()
    if (key, pid, data_dir) not in _DATA:
        _DATA[key, pid, data_dir] = client_data(cfg, pid, data_dir=data_dir)
    return _DATA[key, pid, data_dir]


def set_threads(cfg: RunConfig) -> None:
    """Torch intra-op threads: ``num-threads``, or the CPUs Ray gave this simulated client, so
    that parallel workers do not oversubscribe the cores (each spinning thread pool slows all
    of them). Outside Ray, torch's default: a SuperNode has its machine to itself."""
    n = cfg.num_threads
    ray = sys.modules.get("ray")
    # getattr: a module that another thread is still importing has no attributes yet
    if not n and getattr(ray, "is_initialized", bool)():
        n = max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1)))
    if n and torch.get_num_threads() != n:
        torch.set_num_threads(n)


def run_key(msg: Message) -> str | None:
    """The server's name for this run (``FedStrategy.run_key``), which keys the state files."""
    key = msg.content["config"].get("run-key") if "config" in msg.content.config_records else None
    return None if key is None else "".join(c for c in str(key) if c.isalnum() or c in "-_") or None


def make_client(cfg: RunConfig, context: Context, key: str | None = None):
    """The configured client for this node: its data, a fresh model, its saved state."""
    set_threads(cfg)
    pid = partition_id(context)
    data_dir = context.node_config.get("data-dir") or None
    data = cached_client_data(cfg, pid, data_dir)
    model = model_for(cfg, data)
    return registry.get(cfg.strategy).client(cfg, model, data, load_state(context, cfg, key), device_of(cfg))


def _reply(msg: Message, payload: Payload, metrics: dict, pid: int) -> Message:
    return Message(make_content(payload, metrics={**metrics, "partition-id": pid}), reply_to=msg)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """Discovery: the partition id and split sizes this node serves."""
    cfg = parse_run_config(context.run_config)
    pid = partition_id(context)
    data = cached_client_data(cfg, pid, context.node_config.get("data-dir") or None)
    sizes = {"num-train": len(data.train_y), "num-test": len(data.test_y)}
    if "num-partitions" in context.node_config:  # simulated partitions: the server checks num-clients
        sizes["num-partitions"] = int(context.node_config["num-partitions"])
    return _reply(msg, {}, sizes, pid)


@app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = parse_run_config(context.run_config)
    client = make_client(cfg, context, run_key(msg))
    payload, metrics = client.fit(payload_of(msg.content), dict(msg.content["config"]))
    commit_state(context, cfg, client.state, run_key(msg))
    return _reply(msg, payload, metrics, client.data.pid)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    cfg = parse_run_config(context.run_config)
    client = make_client(cfg, context, run_key(msg))
    payload, metrics = client.evaluate(payload_of(msg.content), dict(msg.content["config"]))
    return _reply(msg, payload, metrics, client.data.pid)
