"""Fault injection: a Flower mod that makes a seeded share of the clients misbehave.

Enabled by the run config (off by default): ``fault-fraction`` of the partitions, chosen
from ``seed``, answer every training and evaluation message with the fault ``fault-kind``:

- ``raise``: the client raises before training (an error reply; its state is not committed);
- ``stall``: no reply before ``round-timeout`` (the client sleeps past it, then fails);
- ``wrong-shape``: every array of the reply loses its last element (a reply without arrays
  gets a list where a scalar metric belongs);
- ``nan`` / ``inf``: the first entry of every float array (else every metric but the ids) is
  NaN / +Inf;
- ``num-examples``: the reply claims 10^12 examples;
- attacks on the update u (every float array of the reply less the record of the same name the
  client received; the array itself when none was sent), the reply carrying reference + u':

  - ``scale``: u' = 1e30 u;
  - ``negate``: u' = -10 u;
  - ``sign-flip``: u' = -u;
  - ``noise``: u' Gaussian, of the norm of the reply's own arrays (for a model: the model's norm);
  - ``collude``: u' = 2.9 |u| d, one direction d (a unit vector drawn from ``seed``) shared by every
    attacker in every round, just inside a norm bound of 3 medians;
  - ``honest-noise``: u' = u + e, Gaussian e of the norm of u: an honest-looking update with as much
    noise again, which no cosine or norm test tells from a noisy honest one;
  - ``alie``: "a little is enough" (Baruch, Baruch and Goldberg, NeurIPS 2019): u' = mu - z sigma,
    z = Phi^{-1}((n - s) / n), s = floor(n/2 + 1) - f (at least 1) for n clients and f attackers. The paper's
    attackers pool their honest updates for mu and sigma; these do not collude, so each takes its
    own update for mu and its magnitude |u| for sigma, shifting every coordinate down by z |u|.

The first five make a reply invalid (it is dropped); the attacks are valid replies, which the
server's robust aggregation has to contain.

Discovery (query) messages are answered normally: a faulty client is connected and known,
only its work is bad, so a run with faults is comparable to one where those nodes are offline.
In process (``fedapp.runtime.inprocess.InProcessGrid``) a stall does not sleep: the grid treats it as a
reply that never arrives within the timeout.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterator
from statistics import NormalDist
from contextlib import contextmanager

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MessageType, MetricRecord

from fedapp.core.compat import ClientAppCallable
from fedapp.core.config import RunConfig
from fedapp.runtime.registry import parse_run_config

KINDS = ("raise", "stall", "wrong-shape", "nan", "inf")
#: attacks on the update u: the factor u is multiplied by (``noise``, ``alie``: crafted below)
FACTORS = {"scale": 1e30, "negate": -10.0, "sign-flip": -1.0}
ATTACKS = (*FACTORS, "noise", "alie", "collude", "honest-noise", "num-examples")
INFLATED = 10**12
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


def alie_z(cfg: RunConfig) -> float:
    """Baruch et al.'s z for n clients of which f attack: Phi^{-1}((n - s) / n), s = floor(n/2 + 1) - f,
    at least 1 (attackers that are a majority already: the largest finite z)."""
    n, f = cfg.num_clients, len(faulty_partitions(cfg))
    s = max(n // 2 + 1 - f, 1)
    return float(NormalDist().inv_cdf((n - s) / n)) if n > s else 0.0


def poison(reply: Message, received: Message, kind: str, cfg: RunConfig) -> None:
    """Make the reply an attacker's, in place, as ``kind`` (one of ATTACKS) says; ``noise`` draws from
    (seed, round, partition) and ``alie`` sizes its shift from ``cfg``."""
    content = reply.content
    if kind == "num-examples":
        for name, rec in list(content.metric_records.items()):
            if "num-examples" in rec:
                content[name] = MetricRecord({**rec, "num-examples": INFLATED})
        return
    sent = received.content.array_records
    floats = [(name, key, arr.numpy().astype(np.float64)) for name, rec in content.array_records.items()
              for key, arr in rec.items() if arr.numpy().dtype.kind == "f"]
    refs, updates = {}, {}
    for name, key, a in floats:
        ref = sent[name][key].numpy() if name in sent and key in sent[name] else None
        refs[name, key] = ref.astype(np.float64) if ref is not None and ref.shape == a.shape else np.zeros(a.shape)
        updates[name, key] = a - refs[name, key]
    conf = received.content["config"]
    if kind in ("noise", "collude", "honest-noise"):
        # noise: of the arrays' own norm; honest-noise: of the update's; collude: one direction for all
        seed = [cfg.seed, 17] if kind == "collude" else [cfg.seed, int(conf["server-round"]),
                                                         int(conf["partition-id"]), 13 if kind == "noise" else 19]
        rng = np.random.default_rng(seed)
        drawn = {(name, key): rng.standard_normal(a.shape) for name, key, a in floats}
        target = (sum((a**2).sum() for _, _, a in floats) if kind == "noise"
                  else (2.9 if kind == "collude" else 1.0) ** 2 * sum((u**2).sum() for u in updates.values()))
        scale = np.sqrt(target / max(sum((g**2).sum() for g in drawn.values()), 1e-300))
        crafted = {k: scale * g + (updates[k] if kind == "honest-noise" else 0.0) for k, g in drawn.items()}
    z = alie_z(cfg) if kind == "alie" else 0.0
    for name, rec in list(content.array_records.items()):
        out = {}
        for key, arr in rec.items():
            a = arr.numpy()
            if a.dtype.kind == "f":
                u = updates[name, key]
                u = (crafted[name, key] if kind in ("noise", "collude", "honest-noise")
                     else u - z * np.abs(u) if kind == "alie" else FACTORS[kind] * u)
                a = (refs[name, key] + u).astype(a.dtype)
            out[key] = Array(a)
        content[name] = ArrayRecord(out)


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
    cfg = parse_run_config(context.run_config, side="client")
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
    if reply.has_error():
        return reply
    if kind in ATTACKS:
        poison(reply, msg, kind, cfg)
    else:
        corrupt(reply, kind)
    return reply
