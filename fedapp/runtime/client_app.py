"""ClientApp: turns Flower messages into calls of the configured client class.

The client class (see ``clients/``) is chosen by the run config's ``strategy``. What
must outlive a message (duals, control variates, private bodies or heads) lives in
``context.state`` as ArrayRecords named ``state.<name>``; it is replaced only after
``answer_train`` returned, so a client that fails mid-round keeps its last committed state.

Client state is versioned by round: a training message of round t commits version t, and every
message names the version to start from (``state-round``: the round of this client's last
training reply the server accepted) and the version a resume could ask for (``state-keep``: the
one in the server's last checkpoint); the node keeps those two and the new one and drops the
rest. A server resumed from round r's checkpoint therefore gets every client's state of round r,
even from clients that had already trained round r+1; a client that no longer holds the version
asked for (a wiped disk, a new simulation) starts from scratch and says so (``state-missing``).

A SuperNode's ``context.state`` lives in its memory. When the node config names a
``state-dir``, every version is also written there (one file per run, strategy, partition and
round, written atomically), and a restarted SuperNode, whose context starts empty, reads it back
at its next message. The run is named by the ``run-key`` every message's config carries: a nonce
the server draws for each new run and keeps in its checkpoint, so a resumed run finds its clients'
files and no other run ever reads them. When the run has finished, the server's last message
(``end-of-run``) removes the files, or with ``keep-client-state`` every version but the last. A state too large
to keep for every client in memory (``state-memory-mb``) is only written to that file (or to
``state-spill-dir``), and the context keeps a reference to it.
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

from fedapp.runtime import registry
from fedapp.core.config import RunConfig
from fedapp.core.dp_mod import dp_mod
from fedapp.runtime.registry import parse_run_config
from fedapp.core.experiment import ClientData, client_data, device_of, model_for
from fedapp.runtime.faults import fault_mod
from fedapp.core.files import atomic_write
from fedapp.core.records import Payload, from_record, make_content, payload_of
from fedapp.runtime.watchdog import superlink_watchdog_mod

# Ray starts its workers at nice 15 (RAY_worker_niceness): beside any other busy process the
# simulated clients then get a few per cent of a core, and a round takes many times its compute.
# The simulation process imports this module before it starts Ray, so with 0 the workers keep
# the priority of the run that started them, unless the user chose another.
os.environ.setdefault("RAY_worker_niceness", "0")
# Ray's raylet also prestarts one idle worker per CPU when the simulation process registers; the
# simulated clients' actors get workers of their own beside them, so the prestarted ones only cost
# start-up CPU (two workers, 0.5 CPU s each at 2 CPUs) and memory. Unless the user chose otherwise.
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")

STATE_PREFIX = "state."  # the latest committed version's records; other kept ones: "state@<round>.<name>"
#: ConfigRecord {"<round>": spill file or "", "latest": round}: the versions this node holds in memory
#: (a spilled one only on disk), and the one committed last
VERSIONS = "state-versions"

# the SuperLink watchdog, only at a SuperNode's ClientApp processes (fedapp/runtime/watchdog.py), fault
# injection, a no-op unless the run config sets fault-fraction (fedapp/runtime/faults.py), and Flower's
# clipping mod where the run config asks for client-side dp (strategies/privacy.py), innermost: it clips
# what the client computed (an injected attacker bypasses it, as a malicious site would)
app = ClientApp(mods=[superlink_watchdog_mod, fault_mod, dp_mod])


def partition_id(context: Context) -> int:
    try:
        return int(context.node_config["partition-id"])
    except KeyError:
        raise ValueError("node config needs 'partition-id' (and 'num-partitions', or 'data-dir')") from None


def _state_dir(context: Context, cfg: RunConfig, spill: bool) -> Path | None:
    state_dir = context.node_config.get("state-dir") or (
        spill and (cfg.state_spill_dir or Path(tempfile.gettempdir()) / "fedapp-state"))
    return Path(str(state_dir)).expanduser() if state_dir else None


def _file_prefix(context: Context, cfg: RunConfig, key: str | None) -> str:
    return f"{key or f'run{context.run_id}'}-{cfg.strategy}-p{partition_id(context)}-r"


def state_path(context: Context, cfg: RunConfig, spill: bool = False, key: str | None = None,
               version: int = 0) -> Path | None:
    """This site's file of state version ``version`` for the run ``key`` (the server's run-key; else
    the run id), when the node config names a ``state-dir`` or the state is spilled (then
    ``state-spill-dir``, by default under the system's temp dir)."""
    state_dir = _state_dir(context, cfg, spill)
    return None if state_dir is None else state_dir / f"{_file_prefix(context, cfg, key)}{version}.pt"


def state_files(context: Context, cfg: RunConfig, key: str | None = None) -> dict[int, Path]:
    """Every state version of run ``key`` this site holds on disk: round -> file."""
    prefix, found = _file_prefix(context, cfg, key), {}
    for state_dir in {d for d in (_state_dir(context, cfg, False), _state_dir(context, cfg, True)) if d}:
        for path in state_dir.glob(f"{prefix}*.pt") if state_dir.is_dir() else ():
            if path.stem[len(prefix):].isdigit():
                found[int(path.stem[len(prefix):])] = path
    return found


def _held(context: Context) -> tuple[dict[int, str], int | None]:
    """The versions held in memory (round -> spill file, or "" for records) and the latest one."""
    if VERSIONS not in context.state:
        return {}, None
    rec = dict(context.state[VERSIONS])
    latest = int(rec.pop("latest"))
    return {int(r): str(p) for r, p in rec.items()}, latest


def _prefix(version: int, latest: int | None) -> str:
    return STATE_PREFIX if version == latest else f"state@{version}."


def load_state(context: Context, cfg: RunConfig, key: str | None = None, version: int | None = None
               ) -> Payload | None:
    """State version ``version`` (None: the one committed last; 0: the initial, empty state), from
    the context or from ``state-dir`` after a SuperNode restart; None when it is not held."""
    if version == 0:
        return {}
    held, latest = _held(context)
    version = latest if version is None else version
    if version is not None and version in held:
        if held[version]:  # spilled: only on disk
            return torch.load(held[version], weights_only=True)
        prefix = _prefix(version, latest)
        return {name[len(prefix):]: from_record(rec) for name, rec in context.state.array_records.items()
                if name.startswith(prefix)}
    files = state_files(context, cfg, key)
    version = max(files, default=None) if version is None else version
    return torch.load(files[version], weights_only=True) if version in files else None


def spills(cfg: RunConfig, state: Payload) -> bool:
    """Whether ``state``, held by every client, would exceed ``state-memory-mb`` in memory."""
    nbytes = sum(v.numel() * v.element_size() for tensors in state.values() for v in tensors.values())
    return bool(cfg.state_memory_mb) and nbytes * cfg.num_clients > cfg.state_memory_mb * 2**20


def _pop(context: Context, prefix: str) -> dict[str, ArrayRecord]:
    return {name[len(prefix):]: context.state.pop(name) for name in list(context.state.array_records)
            if name.startswith(prefix)}


def _retain(context: Context, cfg: RunConfig, key: str | None, keep: set[int], latest: int) -> dict[int, str]:
    """Drop every state version but those in ``keep``, from memory and disk; kept records are filed
    under their names with ``latest`` as the latest version. Returns the kept versions held in memory."""
    held, was = _held(context)
    kept = {v: p for v, p in held.items() if v in keep}
    for v, spilled in held.items():
        records = {} if spilled else _pop(context, _prefix(v, was))
        if v in kept:
            for name, rec in records.items():
                context.state[_prefix(v, latest) + name] = rec
    for v, file in state_files(context, cfg, key).items():
        if v not in keep:
            file.unlink(missing_ok=True)
    context.state.pop(VERSIONS, None)
    if kept:
        context.state[VERSIONS] = ConfigRecord({**{str(v): p for v, p in kept.items()}, "latest": latest})
    return kept


def commit_state(context: Context, cfg: RunConfig, state: Payload, key: str | None = None, version: int = 0,
                 keep: tuple[int, ...] = ()) -> None:
    """Store ``state`` as version ``version`` (the round it was trained in), keeping the versions in
    ``keep`` and dropping every other one, from memory and from disk."""
    state = {name: {k: v.detach().cpu() for k, v in tensors.items()} for name, tensors in state.items()}
    spill = spills(cfg, state)
    if (path := state_path(context, cfg, spill, key, version)) is not None:
        # file first: if writing fails the reply fails and the context keeps the old state too;
        # a crash mid-write leaves at most a temporary file next to the complete ones
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        torch.save(state, buf)
        atomic_write(path, buf.getvalue())
    kept = _retain(context, cfg, key, {*keep, version}, version)
    _pop(context, STATE_PREFIX)  # a version committed again in its round (several exchanges) is replaced
    kept.pop(version, None)
    if not spill:
        for name, tensors in state.items():
            context.state[STATE_PREFIX + name] = ArrayRecord(tensors)
    context.state[VERSIONS] = ConfigRecord({**{str(v): p for v, p in kept.items()},
                                            str(version): str(path) if spill else "", "latest": version})


def end_of_run(context: Context, cfg: RunConfig, key: str | None, keep: int | None) -> int:
    """The run has finished: with ``keep`` (keep-client-state) only that version of the state stays
    (the one the server ended on); without, every state file of the run goes (``state-dir``,
    spilled state), and the context's references to spilled state with them (state held in memory
    goes with the run's context). Returns the files removed."""
    files = state_files(context, cfg, key)
    if keep is not None:
        _retain(context, cfg, key, {keep}, keep)
        return len(files) - len(state_files(context, cfg, key))
    for file in files.values():
        file.unlink(missing_ok=True)
    if any(_held(context)[0].values()):  # spilled (a run's versions all are, or none): nothing left
        context.state.pop(VERSIONS)
    return len(files)


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
    key = _config(msg).get("run-key")
    return None if key is None else "".join(c for c in str(key) if c.isalnum() or c in "-_") or None


def _config(msg: Message) -> dict:
    return dict(msg.content["config"]) if "config" in msg.content.config_records else {}


def message_state(msg: Message, context: Context, cfg: RunConfig) -> tuple[Payload, dict[str, int]]:
    """The state version the message names (``state-round``; a message without one: the latest),
    and the reply's ``state-missing`` metric when this node does not hold it: the client then
    starts from scratch, and the server says so."""
    version = _config(msg).get("state-round")
    state = load_state(context, cfg, run_key(msg), None if version is None else int(version))
    return (state, {}) if state is not None else ({}, {"state-missing": 1} if version else {})


def make_client(cfg: RunConfig, context: Context, state: Payload):
    """The configured client for this node: its data, a fresh model, the given state."""
    set_threads(cfg)
    pid = partition_id(context)
    data_dir = context.node_config.get("data-dir") or None
    data = cached_client_data(cfg, pid, data_dir)
    model = model_for(cfg, data)
    return registry.client(cfg.strategy)(cfg, model, data, state, device_of(cfg))


def _reply(msg: Message, payload: Payload, metrics: dict, pid: int) -> Message:
    """The reply, with the message's ``reply-nonce``, which binds it to that message (the server drops
    a reply with another one: fedapp/server/replies.py)."""
    nonce = _config(msg).get("reply-nonce")
    bound = {} if nonce is None else {"reply-nonce": nonce}
    return Message(make_content(payload, metrics={**metrics, "partition-id": pid, **bound}), reply_to=msg)


def answer_query(msg: Message, context: Context, cfg: RunConfig, sizes) -> Message:
    """Discovery: the partition id this node serves and ``sizes()`` (its split sizes). At the end of a
    run (``end-of-run``): the run's client state removed, and the number of files that went."""
    pid = partition_id(context)
    config = _config(msg)
    if config.get("end-of-run"):
        keep = int(config["state-round"]) if config.get("keep-client-state") else None
        return _reply(msg, {}, {"removed-files": end_of_run(context, cfg, run_key(msg), keep)}, pid)
    return _reply(msg, {}, sizes(), pid)


@app.query()
def query(msg: Message, context: Context) -> Message:
    """``answer_query`` with the sizes of the run config's partition."""
    cfg = parse_run_config(context.run_config, side="client")

    def sizes() -> dict[str, int]:
        data = cached_client_data(cfg, partition_id(context), context.node_config.get("data-dir") or None)
        out = {"num-train": len(data.train_y), "num-test": len(data.test_y)}
        if "num-partitions" in context.node_config:  # simulated partitions: the server checks num-clients
            out["num-partitions"] = int(context.node_config["num-partitions"])
        return out

    return answer_query(msg, context, cfg, sizes)


def answer_train(msg: Message, context: Context, cfg: RunConfig, client_for) -> Message:
    """A training message answered by the client ``client_for(state)`` builds from the state version
    the message names; the new state is committed as this round's version, and the reply's
    ``state-round`` tells the server which one that is."""
    state, extra = message_state(msg, context, cfg)
    client = client_for(state)
    del state  # the client's now: what it drops while training (FedALS's loaded body) is freed
    config = _config(msg)
    payload, metrics = client.answer_train(payload_of(msg.content), config)
    if client.state:
        version = int(config["server-round"])
        # the version trained from stays too: the server may drop this reply and ask for it again
        keep = (int(config.get("state-round", 0)), int(config.get("state-keep", 0)))
        commit_state(context, cfg, client.state, run_key(msg), version, keep=keep)
        extra["state-round"] = version
    return _reply(msg, payload, {**metrics, **extra}, client.data.pid)


def answer_evaluate(msg: Message, context: Context, cfg: RunConfig, client_for) -> Message:
    """An evaluation message answered by the client ``client_for(state)`` builds (as ``answer_train``)."""
    state, extra = message_state(msg, context, cfg)
    client = client_for(state)
    payload, metrics = client.evaluate(payload_of(msg.content), _config(msg))
    return _reply(msg, payload, {**metrics, **extra}, client.data.pid)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training of the run config's strategy's client (``answer_train``)."""
    cfg = parse_run_config(context.run_config, side="client")
    return answer_train(msg, context, cfg, lambda state: make_client(cfg, context, state))


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    cfg = parse_run_config(context.run_config, side="client")
    return answer_evaluate(msg, context, cfg, lambda state: make_client(cfg, context, state))
