"""Server checkpoints: the complete strategy state after a round, and resuming from it.

A checkpoint holds the global model, every attribute a strategy class (or any of its bases)
lists in ``checkpoint_attrs``, the traffic totals, the result rows so far, the random
generator states and the round number, so a resumed run repeats exactly what the
uninterrupted run would have done. Client state is not in it: it lives with the clients
(``context.state`` in a SuperNode, ``state-dir`` on a real site), versioned by round: the
checkpoint holds which version of each client's state it builds on (``state_rounds``), so a
resumed run asks every client for exactly that one. It is a ``torch.save`` file of tensors and
plain data (dicts, lists, numbers, strings), read back with ``weights_only=True``: a file that would
build any other object, and so could run code while it is read (a ``resume-from`` file from
elsewhere), is refused before anything in it is used.
"""

from __future__ import annotations

import io
import random
import re
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord
from flwr.common import log

from fedapp.core.config import ConfigError, RunConfig
from fedapp.runtime.registry import defaults
from fedapp.core.files import atomic_write

FILENAME = "checkpoint.pt"
#: base attributes every strategy has; algorithms add theirs with ``checkpoint_attrs``
BASE_ATTRS = ("global_state", "totals", "history", "run_key", "state_rounds")
#: the run state the round driver writes and owns (``strategy.driver``)
DRIVER_ATTRS = frozenset({"totals", "history"})
#: run-config keys a resumed run may change: they set where, how long and on what it runs,
#: not what is computed
FREE_KEYS = frozenset({"num-server-rounds", "resume-from", "run-name", "results-dir", "checkpoint-every",
                       "round-timeout", "node-wait-timeout", "device", "fault-fraction", "fault-kind", "tensorboard",
                       "tracking", "keep-client-state", "max-empty-rounds", "site-keys"})


def attrs_of(strategy) -> list[str]:
    """BASE_ATTRS and each class's ``checkpoint_attrs`` along the hierarchy, so a subclass
    never has to repeat its parents' list."""
    names = [a for cls in reversed(type(strategy).__mro__) for a in vars(cls).get("checkpoint_attrs", ())]
    return list(dict.fromkeys([*BASE_ATTRS, *names]))


def owner(strategy, name: str):
    """Who holds checkpoint attribute ``name``: the strategy's driver for the run state it writes,
    else the strategy."""
    return strategy.driver if name in DRIVER_ATTRS else strategy


def due(cfg: RunConfig, server_round: int) -> bool:
    every = cfg.checkpoint_every
    # round 0 too: a run that fails in its first rounds (a full disk) can be resumed from the start
    return bool(every) and (server_round % every == 0 or server_round == cfg.num_server_rounds)


#: how a NumPy array and a Flower ArrayRecord (Flower's strategies keep their state in them) are
#: stored: as tensors under a marker key, which a checkpoint read with ``weights_only`` can hold
NUMPY, ARRAY_RECORD = "__numpy__", "__array-record__"


def _pack(value: Any) -> Any:
    """Modules and optimizers as their state dicts, NumPy arrays and ArrayRecords as tensors under a
    marker; anything else as is (object sharing kept)."""
    if isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
        return value.state_dict()
    if isinstance(value, np.ndarray):
        return {NUMPY: torch.from_numpy(value.copy())}
    if isinstance(value, ArrayRecord):
        return {ARRAY_RECORD: value.to_torch_state_dict()}
    if isinstance(value, (dict, list, tuple)):
        items = list(value.items() if isinstance(value, dict) else enumerate(value))
        packed = [(k, _pack(v)) for k, v in items]
        if all(p is v for (_, p), (_, v) in zip(packed, items)):
            return value
        return dict(packed) if isinstance(value, dict) else type(value)(p for _, p in packed)
    return value


def _unpack(saved: Any) -> Any:
    """What ``_pack`` stored under a marker, back as a NumPy array or an ArrayRecord; anything
    else as it was loaded (a Counter stays a Counter)."""
    if isinstance(saved, dict) and saved.keys() == {NUMPY}:
        return saved[NUMPY].numpy()
    if isinstance(saved, dict) and saved.keys() == {ARRAY_RECORD}:
        return ArrayRecord(saved[ARRAY_RECORD])
    if isinstance(saved, (dict, list, tuple)):
        items = list(saved.items() if isinstance(saved, dict) else enumerate(saved))
        unpacked = [(k, _unpack(v)) for k, v in items]
        if all(u is v for (_, u), (_, v) in zip(unpacked, items)):
            return saved
        return type(saved)(unpacked) if isinstance(saved, dict) else type(saved)(u for _, u in unpacked)
    return saved


def _restore(current: Any, saved: Any) -> Any:
    """``saved`` put into ``current`` in place where the structure matches (tensors copied,
    dicts and lists filled), so views a strategy derived from its state (FedALS's body and
    head, IFCA's first cluster model) see the restored values; otherwise ``saved``."""
    if isinstance(current, (torch.nn.Module, torch.optim.Optimizer)):
        current.load_state_dict(saved)
        return current
    if (isinstance(current, torch.Tensor) and isinstance(saved, torch.Tensor)
            and current.shape == saved.shape and current.dtype == saved.dtype):
        with torch.no_grad():
            current.copy_(saved)
        return current
    if isinstance(current, dict) and isinstance(saved, dict) and current.keys() == saved.keys():
        for k in current:
            current[k] = _restore(current[k], saved[k])
        return current
    if isinstance(current, list) and isinstance(saved, list) and len(current) == len(saved):
        current[:] = [_restore(c, s) for c, s in zip(current, saved)]
        return current
    return saved


def save(strategy, path: Path, server_round: int) -> None:
    """Write the strategy's state after ``server_round`` to ``path`` atomically."""
    doc = {
        "round": server_round,
        "strategy": strategy.cfg.strategy,
        "config": strategy.cfg.as_dict(),
        "attrs": {name: _pack(getattr(owner(strategy, name), name)) for name in attrs_of(strategy)},
        "rng": {"numpy": strategy.rng.bit_generator.state, "torch": torch.get_rng_state(),
                "python": random.getstate()},
    }
    write(path, doc)
    strategy.kept_state_rounds = dict(strategy.state_rounds)


def write(path: Path, doc: Any) -> None:
    """``torch.save`` of ``doc`` (tensors and plain data) to ``path``, atomically."""
    buf = io.BytesIO()
    torch.save(doc, buf)
    atomic_write(path, buf.getvalue())


def load(path: str | Path) -> dict[str, Any]:
    path = Path(path).expanduser()
    if path.is_dir():
        path = path / FILENAME
    if not path.is_file():
        raise ConfigError(f"run config 'resume-from' = {str(path)!r}: no checkpoint there")
    try:
        doc = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(doc, dict) or not {"round", "config", "attrs", "rng"} <= doc.keys():
            raise ValueError("not a fedapp checkpoint")
    except Exception as err:  # truncated, corrupt or foreign: unpickling raises many kinds
        text = str(err).strip()
        if code := re.search(r"GLOBAL ([\w.]+)", text):  # torch's weights-only unpickler
            raise ConfigError(f"run config 'resume-from' = {str(path)!r}: refused, it would call {code[1]} when "
                              "loaded (a checkpoint holds only tensors and plain data, so this one could run "
                              "code)") from None
        # torch's own first line is advice on loading it unsafely; its reason comes later
        reason = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", text)
        raise ConfigError(f"run config 'resume-from' = {str(path)!r}: cannot read it as a checkpoint "
                          f"({type(err).__name__}: {reason[1] if reason else text.splitlines()[0] if text else ''})"
                          ) from None
    return doc


def check_compatible(doc: dict[str, Any], cfg: RunConfig, path: str | Path) -> None:
    """Raise ConfigError when the checkpoint's run had other settings (only FREE_KEYS may differ)."""
    # a key added to fedapp since the checkpoint was written had its default there
    old, new = {**defaults(), **doc["config"]}, cfg.as_dict()
    changed = sorted(k for k in set(old) | set(new) if k not in FREE_KEYS and old.get(k) != new.get(k))
    if changed:
        raise ConfigError(f"run config 'resume-from' = {str(path)!r}: the checkpoint's run had other settings "
                          f"for {', '.join(f'{k} ({old.get(k)!r} there, {new.get(k)!r} here)' for k in changed)}")


def resume(strategy, path: str | Path) -> int:
    """Restore ``strategy`` from the checkpoint at ``path``; returns the round to run next.

    Raises ConfigError when the checkpoint was written by a run with other settings
    (only FREE_KEYS may differ).
    """
    doc = load(path)
    check_compatible(doc, strategy.cfg, path)
    for name, saved in doc["attrs"].items():
        into = owner(strategy, name)
        setattr(into, name, _restore(getattr(into, name, None), _unpack(saved)))
    if "state_rounds" not in doc["attrs"]:
        log(WARNING, "%s predates versioned client state: every client restarts its state from scratch", path)
    strategy.kept_state_rounds = dict(strategy.state_rounds)
    strategy.rng.bit_generator.state = doc["rng"]["numpy"]
    torch.set_rng_state(doc["rng"]["torch"])
    random.setstate(doc["rng"]["python"])
    return doc["round"] + 1
