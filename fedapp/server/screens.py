"""The defence against poisoned training replies, as pure functions of the round's valid replies.

Off by default (the algorithm exactly); ``defence = "robust"`` is the direction screen with every
record's norm bound at ROBUST_FACTOR lower medians, and the fine-grained keys act alone or beside it.

The direction screen (``screen-direction``; ``median_cosines``, ``against_median``) drops a reply
whose model update, compared with the coordinate-wise median of the other replies' updates among
those sent the same model, is an outlier below the round's cosines and points against that median
beyond chance, or nowhere in a round whose replies share a direction (FLAME's cosine filtering,
Nguyen et al., USENIX Security 2022, with the coordinate-wise median of Yin et al., ICML 2018, as the
honest reference). The norm bound then scales each kept reply's update of each record
(``record_bounds``) down to the smallest of ``clip-median`` and ``screen-factor`` times the round's
lower median norm of that record (norm bounding, Sun et al., "Can You Really Backdoor Federated
Learning?", 2019, at an adaptive radius as FLAME's; ``clip-median`` 1 is one step of centered
clipping, Karimireddy, He and Jaggi, ICML 2021, centred on what was sent), and the whole update to
``clip-norm``, counting it in the round's ``clipped-replies``. The lower median is an honest norm
while attackers are fewer than half; an honest site with long updates still counts, at the bound's
weight, instead of being excluded. Replies within every bound are left as received. The
median-based bounds and the screen need 3 replies or more (``screen-factor``, the screen) or 1
(``clip-median``).

A reply's updates (``Pairs``) map (record, key) to (value, reference or None) for each of its float
arrays: the reference is what the record was sent, None where the record is an update itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.common import log

from fedapp.core.config import RunConfig
from fedapp.server.replies import Reply

Pairs = dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]

#: the direction screen drops a reply whose cosine with the other replies' median update is DIRECTION_Z
#: robust deviations below the round's median cosine and either below -chance (it points against the
#: others) or, where the round's median cosine is beyond chance, below DIRECTION_SHARE of it (it points
#: elsewhere); chance is DIRECTION_Z / sqrt(d) over the d coordinates compared (a random direction's
#: cosine with any fixed vector is ~ N(0, 1/d): 3 is its one-sided 99.87% point). Where that bound
#: exceeds DIRECTION_BOUND_MAX (under 100 coordinates) random and honest cosines overlap, and it is 0
DIRECTION_Z = 3.0
DIRECTION_BOUND_MAX = 0.3
#: in a round whose replies share a direction, an outlier carrying less than this share of the round's
#: median cosine points elsewhere (``against_median``)
DIRECTION_SHARE = 0.5
#: ``defence = "robust"``: each record's norm bound in lower medians of the round's norms of that record.
#: FLAME's 1 median clipped every honest reply above the median and cost an honest federation of 4
#: heterogeneous sites (PeFLL on the plants table) 65 points; at 3 medians the run is the plain mean's
ROBUST_FACTOR = 3.0


def updates_norm(updates: Mapping[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]) -> float:
    """L2 norm of (value, reference) pairs' differences (a reference None counts as zeros), in float64."""
    return math.sqrt(sum(float(((v.double() - (0.0 if r is None else r.double())) ** 2).sum())
                         for v, r in updates.values()))


def leave_one_out_medians(updates: list[dict[Any, torch.Tensor]]) -> list[dict[Any, torch.Tensor]]:
    """For each update, the coordinate-wise median of the others (as ``np.median`` of them), from one
    sort per key: of the n - 1 values left, the p-th smallest is the sorted p-th, or the (p+1)-th where
    the update left out ranks at or below p."""
    n, out = len(updates), [{} for _ in updates]
    for k in updates[0]:
        stacked = np.stack([u[k].numpy() for u in updates])
        order = np.argsort(stacked, axis=0)
        ranks, ordered = np.empty_like(order), np.take_along_axis(stacked, order, axis=0)
        np.put_along_axis(ranks, order, np.arange(n).reshape((n,) + (1,) * (stacked.ndim - 1)), axis=0)
        middle = [(n - 2) // 2, (n - 1) // 2]  # the middle positions of n - 1 values (one when odd)
        for j in range(n):
            r = ranks[j:j + 1]
            picked = [np.take_along_axis(ordered, p + (r <= p), axis=0)[0] for p in middle]
            out[j][k] = torch.from_numpy(picked[0] if middle[0] == middle[1] else (picked[0] + picked[1]) / 2)
    return out


def against_median(cosine: float, chance: float, low: float, mid: float) -> bool:
    """The direction screen's verdict on a reply (``median_cosines``' tuple): an outlier below
    the round's cosines (``low``: their median less DIRECTION_Z robust deviations) that points against
    the others' median update beyond chance, or, in a round whose median cosine ``mid`` is beyond
    chance, carries less than DIRECTION_SHARE of it (no more than chance at least). The first test
    holds whatever the round's median: attackers who pull it down (three -10x replies in a round of
    small honest cosines) cannot switch it off. The second catches attackers sharing one direction,
    whose partners in the others' median lift each one's cosine above chance."""
    return cosine < low and (cosine < -chance or (mid > chance and cosine <= max(chance, DIRECTION_SHARE * mid)))


def delta_pairs(pairs: list[Pairs]) -> list[dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]]]:
    """The records that are updates themselves (no reference: control-variate deltas, PeFLL's
    hypernetwork and embedding deltas), each against one shared zero, so that ``median_cosines`` tests
    their direction as one more model; only keys every reply carries in one shape."""
    keys = [k for k, (v, ref) in pairs[0].items() if ref is None
            and all(k in p and p[k][1] is None and p[k][0].shape == v.shape for p in pairs)] if pairs else []
    zeros = {k: torch.zeros_like(pairs[0][k][0]) for k in keys}
    return [{k: (p[k][0], zeros[k]) for k in keys} for p in pairs]


def record_norms(pair: Mapping[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]) -> dict[str, float]:
    """Record name -> the L2 norm of the reply's update of that record (``updates_norm``)."""
    return {name: updates_norm({k: v for k, v in pair.items() if k[0] == name})
            for name in dict.fromkeys(name for name, _ in pair)}


def record_bounds(norms: list[dict[str, float]], factors: Iterable[float]) -> dict[str, float]:
    """Per record name, the norm bound ``min(factors) *`` the lower median of the replies' update
    norms of that record (``norms``: each reply's ``record_norms``); a record no reply moved has none.
    Every record a strategy combines (models, control variates, duals, deltas) is bounded by its own
    replies' norms, so an attacker cannot hide a long update in a record whose norm is small beside
    the model's."""
    factor = min(factors, default=0.0)
    by_record: dict[str, list[float]] = {}
    for reply in norms:
        for name, n in reply.items():
            by_record.setdefault(name, []).append(n)
    medians = {name: sorted(ns)[(len(ns) - 1) // 2] for name, ns in by_record.items()}
    return {name: factor * m for name, m in medians.items() if factor and m > 0}


def sent_groups(pairs: list[Pairs], keys: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[list[int]]]:
    """The keys of ``keys`` not sent to every reply as its own arrays, and the groups of replies
    (their positions) sent the same arrays of those keys: per key, each reply's class of the arrays it
    was sent (equal arrays, one class); a key whose replies were all sent their own arrays (a
    personal model or head) has no common direction."""
    classes: dict[tuple[str, str], list[int]] = {}
    for k in keys:
        firsts: list[int] = []  # the first reply of each class
        classes[k] = []
        for p in pairs:
            c = next((c for c, j in enumerate(firsts)  # a broadcast is one tensor: no comparison
                      if p[k][1] is pairs[j][k][1] or torch.equal(p[k][1], pairs[j][k][1])), len(firsts))
            if c == len(firsts):
                firsts.append(len(classes[k]))
            classes[k].append(c)
    keys = [k for k in keys if len(set(classes[k])) < len(pairs)]
    groups: dict[tuple[int, ...], list[int]] = {}  # the replies sent the same model
    for i in range(len(pairs)):
        groups.setdefault(tuple(classes[k][i] for k in keys), []).append(i)
    return keys, list(groups.values())


def group_cosines(updates: list[dict[tuple[str, str], torch.Tensor]], keys: list[tuple[str, str]]
                  ) -> tuple[list[float], float, float]:
    """Each update's cosine with the coordinate-wise median of the others', the median of those
    cosines (``mid``) and that less DIRECTION_Z robust standard deviations (1.4826 MAD, ``low``)."""
    medians = leave_one_out_medians(updates)
    cosines = []
    for u, median in zip(updates, medians):
        scale = math.sqrt(sum(float((u[k] ** 2).sum()) for k in keys)
                          * sum(float((median[k] ** 2).sum()) for k in keys))
        cosines.append(sum(float((u[k] * median[k]).sum()) for k in keys) / scale if scale > 0 else 1.0)
    mid = float(np.median(cosines))
    low = mid - DIRECTION_Z * 1.4826 * float(np.median(np.abs(np.array(cosines) - mid)))
    return cosines, low, mid


def median_cosines(pairs: list[Pairs]) -> list[tuple[float, float, float, float]]:
    """(cosine, chance, low, mid) of each reply's model update (``pairs``: each reply's updates; its
    arrays less the records it was sent; records that are updates themselves, such as deltas and
    descriptors, left out) with the coordinate-wise median of the other replies' updates among those
    sent the same model (HCCT's groups, cluster models and personal models are compared only within
    their own model: ``sent_groups``). The reply under test is left out of its reference, which it
    would otherwise pull toward itself. ``chance`` is DIRECTION_Z / sqrt(d) over the d compared
    coordinates (a direction drawn at random has cosine ~ N(0, 1/d) with any fixed vector), or 0 where
    that exceeds DIRECTION_BOUND_MAX (random and honest cosines overlap in so few dimensions); ``mid``
    is the median of the group's cosines and ``low`` that less DIRECTION_Z robust standard deviations
    (1.4826 times their median absolute deviation), below which a reply is an outlier among the
    group's (``against_median`` judges). (1, 0, -inf, 1) where a reply has no such update or its model
    went to fewer than 3 replies."""
    keys = [k for k in pairs[0] if all(p.get(k, (None, None))[1] is not None for p in pairs)]
    out = [(1.0, 0.0, -math.inf, 1.0)] * len(pairs)
    keys, groups = sent_groups(pairs, keys)
    dims = sum(pairs[0][k][0].numel() for k in keys)
    chance = DIRECTION_Z / math.sqrt(dims) if dims else 0.0
    chance = chance if chance <= DIRECTION_BOUND_MAX else 0.0
    for group in groups if keys else []:
        if len(group) < 3:
            continue
        updates = [{k: pairs[i][k][0].double() - pairs[i][k][1].double() for k in keys} for i in group]
        cosines, low, mid = group_cosines(updates, keys)
        for i, c in zip(group, cosines):
            out[i] = (c, chance, low, mid)
    return out


Drop = Callable[..., None]  # (reason, pid=, detail=): counts and logs one dropped reply


def direction_screen(replies: list[Reply], pairs: list[Pairs], drop: Drop) -> tuple[list[Reply], list[Pairs]]:
    """The replies (and their updates) whose model update and deltas the direction screen keeps; each
    other one goes to ``drop`` as ``against-median``."""
    kept = []
    for r, pair, *verdicts in zip(replies, pairs, median_cosines(pairs), median_cosines(delta_pairs(pairs))):
        bad = [(what, v) for what, v in zip(("model update", "deltas"), verdicts) if against_median(*v)]
        if bad:
            what, (cosine, chance, low, mid) = bad[0]
            drop("against-median", pid=r.pid, detail=f"against-median: {what} at cosine {cosine:.3g} "
                 f"with the other replies' median (chance {chance:.3g}), below the others' (their "
                 f"median {mid:.3g} less 3 robust deviations, {low:.3g})")
        else:
            kept.append((r, pair))
    return [r for r, _ in kept], [p for _, p in kept]


def bound_norms(replies: list[Reply], pairs: list[Pairs], factors: list[float], clip_norm: float) -> int:
    """Scale each reply's update of each record down to its ``record_bounds`` and the whole update to
    ``clip_norm`` (0: none), in place; the number of replies scaled."""
    norms_of = [record_norms(pair) for pair in pairs]
    bounds = record_bounds(norms_of, factors)
    clipped = 0
    for r, pair, norms in zip(replies, pairs, norms_of):
        scale = {name: min(1.0, bounds.get(name, math.inf) / n) if n > 0 else 1.0 for name, n in norms.items()}
        total = math.sqrt(sum((scale[name] * n) ** 2 for name, n in norms.items()))
        if clip_norm and total > clip_norm:
            scale = {name: f * clip_norm / total for name, f in scale.items()}
        if all(f == 1.0 for f in scale.values()):
            continue
        for (name, k), (v, ref) in pair.items():
            if scale[name] < 1.0:
                base = 0.0 if ref is None else ref.double()
                r.payload[name][k] = (base + scale[name] * (v.double() - base)).to(v.dtype)
        clipped += 1
        log(INFO, "clipped the reply from partition %d: %s", r.pid, ", ".join(
            f"{name} update norm {n:.3g} to {scale[name] * n:.3g}" for name, n in norms.items() if scale[name] < 1))
    return clipped


def screen(replies: list[Reply], updates: Callable[[Reply], Pairs], cfg: RunConfig, drop: Drop
           ) -> tuple[list[Reply], int]:
    """The training replies the run's defence keeps (``direction_screen``), their updates bounded
    (``bound_norms``), and how many were scaled; ``updates`` gives a reply's ``Pairs``."""
    defended = cfg.defence == "robust"
    direction = cfg.screen_direction or defended
    screen_factor = cfg.screen_factor or (ROBUST_FACTOR if defended else 0.0)
    factors = [f for f in (cfg.clip_median, screen_factor if len(replies) >= 3 else 0.0) if f]
    if not replies or not (factors or cfg.clip_norm or direction):
        return replies, 0
    pairs = [updates(r) for r in replies]  # each reply's arrays and what it was sent, once
    if direction:
        replies, pairs = direction_screen(replies, pairs, drop)
    return replies, bound_norms(replies, pairs, factors, cfg.clip_norm)
