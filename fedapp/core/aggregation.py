"""Combinations of client states, key by key: the weighted mean every algorithm averages with, the
coordinate-wise statistics and (Multi-)Krum of the robust ``aggregation`` settings. Shared by the
server strategies and by clients that average models themselves (IFCA)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch
from flwr.app import ArrayRecord, RecordDict

from fedapp.core.compat import select_multikrum
from fedapp.core.records import Tensors


def weighted_mean(states: list[Tensors], weights: Iterable[float]) -> Tensors:
    """Sum_i w_i * state_i / Sum_i w_i, key by key, keeping each tensor's dtype."""
    w = torch.tensor(list(weights), dtype=torch.float64)
    w = (w / w.sum()).tolist()
    out = {}
    for k, ref in states[0].items():
        # accumulated in place: stacking every reply in float64 costs replies x model memory
        mean = torch.zeros(ref.shape, dtype=torch.float64)
        for wi, s in zip(w, states):
            mean.add_(s[k], alpha=wi)
        out[k] = mean.round().to(ref.dtype) if not ref.is_floating_point() else mean.to(ref.dtype)
    return out


def coordinate_wise(states: list[Tensors], combine) -> Tensors:
    """``combine`` (a function of a (replies, ...) float64 array, reducing axis 0) key by key,
    keeping each tensor's dtype."""
    out = {}
    for k, ref in states[0].items():
        value = torch.from_numpy(np.asarray(combine(np.stack([s[k].double().numpy() for s in states]))))
        out[k] = value.round().to(ref.dtype) if not ref.is_floating_point() else value.to(ref.dtype)
    return out


def krum_select(states: list[Tensors], f: int, m: int) -> list[int]:
    """Indices of the m states (Multi-)Krum selects with f attackers assumed (Flower's
    ``select_multikrum``, on float64 copies so that huge updates do not overflow)."""
    contents = [RecordDict({"s": ArrayRecord([s[k].double().numpy() for k in s])}) for s in states]
    chosen = {id(c) for c in select_multikrum(contents, f, min(m, len(states)))}
    return [i for i, c in enumerate(contents) if id(c) in chosen]
