"""In-process federation: a Grid that calls the ClientApp directly, one context per node.

Used by the tests and by fast CPU sweeps in ``simulations/``: the same ServerApp and
ClientApp code as ``flwr run``, without Ray or a SuperLink. Message contents are
serialised both ways so the clients see what a real transport delivers.

The clients of an exchange run one after another in this process (``local-workers = 1``), or
in a pool of worker processes (``local-workers = n``; 0: one per CPU), forked from this one,
each with the cores shared out (``num-threads`` 0: CPUs / workers torch threads). Where the
clients train on a GPU the workers are spawned instead and import fedapp's ClientApp by name
(CUDA cannot be used in a process forked from one that has initialised it, and forked workers
were seen to hang on an H200); they share the card as Ray's actors do. A worker
gets the node's context with the message and hands it back with the reply, so client state
lives here as in the serial engine. Every training and evaluation message seeds torch's
global generator before it builds its model (``fedapp.runtime.client_app.make_client``) and a
process runs one message at a time, so a client's randomness (initialisation, dropout, its
batches) does not depend on which worker runs it or in what order: with the same torch
threads per client, the parallel engine's run is bit-identical to the serial one.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, ProcessPoolExecutor
from typing import Any
from uuid import uuid4

import torch
from flwr.app import Context, Error, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid

from fedapp.core.compat import SERVER_NODE_ID, decode, encode, set_task_identity, task_identity
from fedapp.runtime.faults import Stalled, simulated_stalls


def _copy(content: RecordDict) -> RecordDict:
    """A deep copy through serialisation, as a transport would make it."""
    return decode(encode(content))


def _call(client_app: ClientApp, msg: Message, context: Context) -> tuple[str, Any]:
    """The ClientApp on one message: ("reply", content), ("stalled", None) or ("error", reason)."""
    try:
        with simulated_stalls():
            return "reply", client_app(msg, context).content
    except Stalled:
        return "stalled", None
    except Exception as exc:  # a failing client becomes an error reply, as in Flower
        return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"


def cores() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def workers_of(run_config: Mapping[str, Any]) -> int:
    """``local-workers``: 1 serial, n > 1 worker processes, 0 one per CPU."""
    return int(run_config.get("local-workers", 1)) or cores()


# ---- worker processes ------------------------------------------------------------------------------
_WORKER_APP: ClientApp | None = None
#: fedapp's ClientApp, as a spawned worker imports it
APP_REF = "fedapp.runtime.client_app:app"


def _init_worker(client_app: ClientApp | str, threads: int, identity: tuple[int, int, int]) -> None:
    """``client_app``: the app itself, inherited through fork (never pickled), or ``module:name``;
    ``identity``: the task identity messages are made under (a spawned worker inherits none)."""
    global _WORKER_APP
    if isinstance(client_app, str):
        module, name = client_app.split(":")
        client_app = getattr(importlib.import_module(module), name)
    set_task_identity(*identity)
    _WORKER_APP = client_app
    torch.set_num_threads(threads)


def start_method(client_app: ClientApp, run_config: Mapping[str, Any]) -> tuple[str, ClientApp | str]:
    """How the workers start, and the app they are given: spawned with ``APP_REF`` for fedapp's
    ClientApp training on CUDA, else forked with the app itself (the platform's default start
    where it cannot fork)."""
    from fedapp.runtime.client_app import app

    if client_app is app and run_config.get("device", "auto") != "cpu" and torch.cuda.is_available():
        return "spawn", APP_REF
    return ("fork" if "fork" in mp.get_all_start_methods() else mp.get_start_method()), client_app


def _work(blob: bytes, metadata: dict, context: Context) -> tuple[str, Any, Context]:
    """One message in a worker: the content comes and goes serialised, the context goes back
    with the state the client committed."""
    msg = Message(decode(blob), dst_node_id=metadata["_dst_node_id"], message_type=metadata["_message_type"])
    msg.metadata.__dict__.update(metadata)
    kind, out = _call(_WORKER_APP, msg, context)
    return kind, encode(out) if kind == "reply" else out, context


class InProcessGrid(Grid):
    """Nodes ``101..100+n`` with node config ``partition-id = i``; replies computed on push.

    A client that stalls (``fedapp.runtime.faults``) is a reply that never arrives: exchanges return
    without it, as a real grid does after ``round-timeout``, but without waiting.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: Mapping[str, Any],
                 node_configs: list[dict] | None = None, run_id: int = 1, workers: int | None = None):
        self.client_app = client_app
        self.run_config = dict(run_config)
        self.run_id = run_id
        self.workers = workers_of(self.run_config) if workers is None else workers
        self._pool: Executor | None = None
        configs = node_configs or [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
        self.contexts = {101 + i: Context(run_id, 101 + i, dict(c), RecordDict(), self.run_config)
                         for i, c in enumerate(configs)}
        # Messages take their run and source from the process's task identity, as in a ServerApp.
        set_task_identity(1, run_id, SERVER_NODE_ID)
        self._replies: dict[str, Message] = {}
        #: called with each reply as it is computed (the server spills large ones at once)
        self.on_reply: Callable[[Message], Message] | None = None
        # node ids that answer discovery but no training or evaluation message: connected
        # nodes that drop out (the reference run for faulty clients)
        self.offline: set[int] = set()

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def pool(self) -> Executor:
        """The worker processes, started at the first exchange (``start_method``) and kept until ``close``."""
        if self._pool is None:
            threads = int(self.run_config.get("num-threads", 0))
            if threads:  # this process too, as the serial engine's first client would set it
                torch.set_num_threads(threads)
            method, app = start_method(self.client_app, self.run_config)
            self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context(method), initializer=_init_worker,
                                             initargs=(app, threads or max(1, cores() // self.workers),
                                                       (task_identity()[0], self.run_id, SERVER_NODE_ID)))
        return self._pool

    def close(self) -> None:
        """Stop the worker processes (a later exchange starts new ones)."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids, calls = [], []
        for msg in messages:
            mid = uuid4().hex
            msg.metadata.__dict__.update(_message_id=mid, _created_at=time.time())
            ids.append(mid)
            node = msg.metadata.dst_node_id
            if node in self.offline and msg.metadata.message_type != MessageType.QUERY:
                continue
            if self.workers > 1:
                if any(m.metadata.dst_node_id == node for _, m, _ in calls):  # a node's messages in turn
                    calls = self._collect(calls)
                calls.append((mid, msg, self.pool().submit(_work, encode(msg.content), dict(msg.metadata.__dict__),
                                                           self.contexts[node])))
                continue
            incoming = Message(_copy(msg.content), dst_node_id=node, message_type=msg.metadata.message_type)
            incoming.metadata.__dict__.update(msg.metadata.__dict__)
            kind, out = _call(self.client_app, incoming, self.contexts[node])
            self._answer(mid, msg, kind, _copy(out) if kind == "reply" else out)
        self._collect(calls)
        return ids

    def _collect(self, calls: list) -> list:
        """Wait for the workers' replies, in push order, and take back the nodes' contexts."""
        for mid, msg, call in calls:
            kind, out, self.contexts[msg.metadata.dst_node_id] = call.result()
            self._answer(mid, msg, kind, decode(out) if kind == "reply" else out)
        return []

    def _answer(self, mid: str, msg: Message, kind: str, out: Any) -> None:
        if kind == "reply":
            reply = Message(out, reply_to=msg)
        elif kind == "error":
            reply = Message(Error(code=0, reason=out), reply_to=msg)
        else:
            return
        self._replies[mid] = self.on_reply(reply) if self.on_reply else reply

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(m) for m in message_ids if m in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_local(run_config: Mapping[str, Any], num_nodes: int | None = None, client_app: ClientApp | None = None,
              grid: InProcessGrid | None = None):
    """Run the ServerApp's main loop in this process over an InProcessGrid; returns the strategy."""
    from fedapp.runtime.client_app import app as default_client_app
    from fedapp.runtime.registry import parse_run_config
    from fedapp.runtime.server_app import run

    cfg = parse_run_config(run_config)
    grid = grid or InProcessGrid(client_app or default_client_app, num_nodes or cfg.num_clients, run_config)
    try:
        return run(grid, run_config)
    finally:
        grid.close()
