"""What a client's reply must be before any aggregation sees it: pure checks of one reply's records.

``check_reply`` says why a reply is invalid (``reason: detail``; the reason is the row's
dropped-reasons key) from its metrics and its arrays' metadata, before a value is decoded;
``check_nonce`` whether it answers the message its partition was sent in this exchange. The round
(``fedapp.server.rounds.Driver.parse_replies``) applies both to every reply.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from flwr.app import RecordDict

from fedapp.core.records import Payload, Tensors, array_numpy, oversize, spec_bytes

Spec = dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]]


@dataclass
class Reply:
    """One valid client reply, keyed by the partition id the client reported."""

    pid: int
    payload: Payload
    metrics: dict[str, float]

    @property
    def num_examples(self) -> int:
        return int(self.metrics["num-examples"])


#: metric names of Flower's app templates (``flwr new``) -> fedapp's: a plain Flower ClientApp's
#: replies are read as fedapp's clients' are
FLOWER_METRICS = {"train_loss": "train-loss", "eval_loss": "loss", "eval_acc": "accuracy"}

#: most keys in a reply's metrics (fedapp's clients send a few dozen at most)
REPLY_METRICS_MAX_KEYS = 256
#: most bytes of a reply's config and metric records together (Flower's ``count_bytes``)
REPLY_RECORDS_MAX_BYTES = 64 * 2**10

#: how many times the bytes of the arrays a reply should carry its arrays may declare before they are
#: dropped as they arrive (``oversized``); up to it, ``check_reply`` names what is wrong (a float64
#: model is ``wrong-dtype``)
REPLY_ARRAYS_MARGIN = 2.0


def scalars(metrics: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric entries of a row (a MetricRecord holds no dicts or strings)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def spec_of(payload: Mapping[str, Tensors]) -> Spec:
    return {name: {k: (tuple(v.shape), v.dtype) for k, v in t.items()} for name, t in payload.items()}


def check_reply(content: RecordDict, pid: int | None, spec: Spec | None, plain: bool = False) -> str | None:
    """Why a reply is invalid (``reason: detail``), or None when it is fine. A ``plain`` client's
    reply (a plain Flower ClientApp, keyed by its node id) names no partition id."""
    if pid is None:
        return "unknown-node"
    why = check_metrics(content, pid, plain)
    if why is not None or spec is None:
        return why
    return check_arrays(content, spec)


def check_metrics(content: RecordDict, pid: int, plain: bool) -> str | None:
    """``check_reply``'s verdict on the reply's config and metric records."""
    small = sum(r.count_bytes() for r in (*content.config_records.values(), *content.metric_records.values()))
    if small > REPLY_RECORDS_MAX_BYTES:
        return f"oversized: config and metric records of {small} bytes > {REPLY_RECORDS_MAX_BYTES}"
    metrics = content.metric_records.get("metrics")
    if metrics is None:
        return "wrong-records: no metrics"
    if len(metrics) > REPLY_METRICS_MAX_KEYS:
        return f"oversized: {len(metrics)} metrics > {REPLY_METRICS_MAX_KEYS}"
    for k, v in metrics.items():
        if not isinstance(v, (int, float)):
            return f"wrong-shape: metric {k} is not a scalar"
        if not math.isfinite(v):
            return f"non-finite: metric {k}"
    if not plain and metrics.get("partition-id") != pid:
        return "wrong-partition-id"
    n = metrics.get("num-examples")
    if n is None or n < 0 or n != int(n):
        return "bad-num-examples"
    return None


def check_arrays(content: RecordDict, spec: Spec) -> str | None:
    """``check_reply``'s verdict on the reply's arrays: those of ``spec`` (names, shapes, dtypes), of
    their declared bytes, all finite."""
    got = {name: {k: (tuple(a.shape), a.dtype) for k, a in rec.items()}
           for name, rec in content.array_records.items()}
    if set(got) != set(spec):
        return f"wrong-records: {sorted(got)} != {sorted(spec)}"
    for name, keys in spec.items():
        if list(got[name]) != list(keys):
            return f"wrong-keys in {name}"
        for k, (shape, dtype) in keys.items():
            gshape, gdtype = got[name][k]
            if gshape != shape:
                return f"wrong-shape: {name}/{k} {gshape} != {shape}"
            if gdtype != str(dtype).removeprefix("torch."):
                return f"wrong-dtype: {name}/{k} {gdtype} != {dtype}"
    why = oversize(content, spec_bytes(spec))  # the bytes each array holds, before any is decoded
    if why is not None:
        return f"oversized: {why}"
    for name, rec in content.array_records.items():
        for k, a in rec.items():
            arr = array_numpy(a)
            if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                return f"non-finite: {name}/{k}"
    return None


def check_nonce(nonces: Mapping[int, int], content: RecordDict, pid: int) -> str | None:
    """Why the reply does not answer the message ``pid`` was sent in this exchange (``nonces``: each
    partition's ``reply-nonce``), or None. Replies to messages the exchange did not make (tests build
    some by hand) are not bound."""
    if pid not in nonces:
        return None
    got = content["metrics"].get("reply-nonce")
    if got is None:
        return "replayed: the reply carries no reply-nonce"
    if got != nonces[pid]:
        return "replayed: the reply's reply-nonce is another message's, not this exchange's"
    return None
