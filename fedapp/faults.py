"""Fault injection: a Flower mod that makes a seeded share of the clients misbehave.

Enabled by the run config (off by default): ``fault-fraction`` of the partitions, chosen
from ``seed``, answer every training and evaluation message with the fault ``fault-kind``:

- ``raise``: the client raises before training (an error reply; its state is not committed);
- ``stall``: no reply before ``round-timeout`` (the client sleeps past it, then fails);
- ``wrong-shape``: every array of the reply loses its last element (a reply without arrays
  gets a list where a scalar metric belongs);
- ``nan`` / ``inf``: the first entry of every float array (else every metric but the ids) is
  NaN / +Inf.

Discovery (query) messages are answered normally: a faulty client is connected and known,
only its work is bad, so a run with faults is comparable to one where those nodes are offline.
In process (``fedapp.local.InProcessGrid``) a stall does not sleep: the grid treats it as a
reply that never arrives within the timeout.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MessageType, MetricRecord
from flwr.clientapp.typing import ClientAppCallable

from fedapp.config import RunConfig, parse_run_config

KINDS = ("raise", "stall", "wrong-shape", "nan", "inf")
#: metrics that identify a reply; corrupting them would test discovery, not the arrays
ID_METRICS = ("partition-id", "num-examples")


class InjectedFault(RuntimeError):
    """The error a ``raise`` (or a late ``stall``) client fails with."""


class Stalled(Exception):
    """Raised instead of sleeping when stalls are simulated (in-process grid)."""


_simulated = contextvars.ContextVar("fedapp_simulated_stalls", default=False)


@contextmanager
def simulated_stalls() -> Iterator[None]:
    """Within this block a stalling client raises :class:`Stalled` at once instead of sleeping."""
    token = _simulated.set(True)
    try:
        yield
    finally:
        _simulated.reset(token)


def faulty_partitions(cfg: RunConfig) -> set[int]:
    """The seeded round(fault-fraction * num-clients) partition ids that misbehave."""
    n = int(round(cfg.fault_fraction * cfg.num_clients))
    rng = np.random.default_rng([cfg.seed, 11])  # own stream: sampling and data seeds stay as they are
    return {int(p) for p in rng.choice(cfg.num_clients, size=n, replace=False)}


def corrupt(reply: Message, kind: str) -> None:
    """Damage the reply's content in place as ``kind`` says."""
    content = reply.content
    arrays = content.array_records
    if arrays:
        for name, rec in list(arrays.items()):
            out = {}
            for key, arr in rec.items():
                a = arr.numpy().copy()
                if kind == "wrong-shape":
                    a = a.reshape(-1)[:-1]
                elif a.dtype.kind == "f" and a.size:
                    a.reshape(-1)[0] = np.nan if kind == "nan" else np.inf
                out[key] = Array(a)
            content[name] = ArrayRecord(out)
        return
    for name, rec in list(content.metric_records.items()):
        bad = {k: ([v, v] if kind == "wrong-shape" else float("nan" if kind == "nan" else "inf"))
               if k not in ID_METRICS else v for k, v in rec.items()}
        content[name] = MetricRecord(bad)


def fault_mod(msg: Message, context: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod: pass through, unless this node's partition is one of the faulty ones."""
    if msg.metadata.message_type.split(".")[0] not in (MessageType.TRAIN, MessageType.EVALUATE):
        return call_next(msg, context)
    cfg = parse_run_config(context.run_config)
    pid = context.node_config.get("partition-id")
    if not cfg.fault_fraction or pid is None or int(pid) not in faulty_partitions(cfg):
        return call_next(msg, context)
    kind = cfg.fault_kind
    if kind == "stall":
        if _simulated.get():
            raise Stalled(f"partition {pid} stalls past round-timeout {cfg.round_timeout} s")
        time.sleep(cfg.round_timeout + 1.0)
        raise InjectedFault("fault-kind stall")  # replying this late, with nothing committed
    if kind == "raise":  # the same text from every client: the server counts the drops by it
        raise InjectedFault("fault-kind raise")
    reply = call_next(msg, context)
    if not reply.has_error():
        corrupt(reply, kind)
    return reply
