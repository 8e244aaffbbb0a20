"""Differential privacy of the model updates: Flower's DP wrappers and clipping mods, and the privacy spent.

``dp`` (run config) wraps the strategy in one of Flower 1.42's Message-API wrappers
(``flwr.serverapp.strategy.DifferentialPrivacy{Server,Client}Side{Fixed,Adaptive}Clipping``) for its
training rounds: each sampled client's update w_i - w is clipped to the L2 norm C (on the server, or
at the client by Flower's ``fixedclipping_mod`` / ``adaptiveclipping_mod``, which fedapp's ClientApp
applies through ``fedapp.core.dp_mod.dp_mod`` when the run asks for it), the strategy averages the clipped models
uniformly, and the wrapper adds Gaussian noise of std z C / n to the mean, n the clients sampled
(McMahan et al., "Learning Differentially Private Recurrent Language Models", ICLR 2018). Adaptive
clipping moves C each round towards a quantile of the update norms from a noised count of the
clipped updates (Andrew et al., "Differentially Private Learning with Adaptive Clipping", NeurIPS
2021). None of their arithmetic is repeated here.

The mechanism is sound only where every record a client sends up is the model and the server's new
state is the plain mean of those models: the strategies in ``ACCEPTS``. Every other one refuses
``dp`` at preflight with its reason (``REFUSALS``; docs/reliability.md has the table).

The privacy spent is client-level (ε, δ) under add-or-remove-one-client, by the Rényi DP accountant
of Google's ``dp-accounting`` (Mironov, "Rényi Differential Privacy", CSF 2017; the library Flower's
own accountant wraps), with no amplification by sampling: the sample follows the run's ``seed``,
which the run config holds. Each round that releases a model composes one Gaussian mechanism whose
multiplier is what the wrapper actually added (:func:`release_multiplier`); the rounds' rows carry it
(``dp-release-multiplier``) and the running ε at ``dp-delta`` (``dp-epsilon``), so a resumed run
continues the count from its checkpointed rows.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from logging import WARNING
from typing import Any, Protocol

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import (DifferentialPrivacyClientSideAdaptiveClipping,
                                     DifferentialPrivacyClientSideFixedClipping,
                                     DifferentialPrivacyServerSideAdaptiveClipping,
                                     DifferentialPrivacyServerSideFixedClipping, Strategy)

from fedapp.core.compat import zero_norm_clipping
from fedapp.core.config import RunConfig
from fedapp.core.dp_mod import CLIENT_MODS, CLIPPED, dp_mod  # noqa: F401  # dp_mod: a ClientApp's, also by this name
from fedapp.server.discovery import sample_size
from fedapp.server.hooks import RoundHooks
from fedapp.server.replies import check_reply
from fedapp.server.rounds import Driver

#: ``dp`` -> Flower's wrapper
WRAPPERS = {"server-fixed": DifferentialPrivacyServerSideFixedClipping,
            "server-adaptive": DifferentialPrivacyServerSideAdaptiveClipping,
            "client-fixed": DifferentialPrivacyClientSideFixedClipping,
            "client-adaptive": DifferentialPrivacyClientSideAdaptiveClipping}
UNCLIPPED = ("unclipped: the reply is not marked dp-clipped by strategies.privacy.dp_mod (fedapp's ClientApp applies it; "
             "a ClientApp of one's own lists it in its mods; a plain Flower ClientApp clips nothing)")

#: strategies every mechanism is sound for: a reply is the model alone ("arrays"), the server's new
#: model is the mean of the replies (uniform under dp), and nothing else the server keeps or sends
#: is computed from the replies
ACCEPTS = ("fedavg", "fedprox", "fedsam", "perfedavg", "knnper")

_NO_MODEL = "it keeps no single global model ({}), while Flower's wrappers clip against one model and noise it"
_SERVER_OPT = ("its server optimiser's {} built from the un-noised mean of the replies; the wrapper noises "
               "only the model that comes out of the optimiser")
_NOT_MEAN = "{}, so one client moves the model by more than the C / n the noise is calibrated to"
#: every other registered strategy: why the mechanism is not sound for it (the preflight's line)
REFUSALS = {
    "scaffold": "its replies carry a control-delta besides the model: Flower's wrapper would clip that delta "
                "as if it were a model, and the server's control variate is built from the un-noised deltas",
    "fedsmoo": "its replies carry a perturbation besides the model, which no wrapper bounds, and its server "
               "duals and global perturbation are built from the un-noised replies",
    "feddyn": "its server dual h is updated from the un-noised mean, and the model it returns is the mean less "
              "h / alpha, not the mean the noise is calibrated to",
    "fedspeed": "its server dual h is updated from the un-noised mean, and the model it returns is the mean less "
                "h / alpha, not the mean the noise is calibrated to",
    "fedcm": "its momentum Delta is computed from the un-noised mean and broadcast to every client; only the "
             "model is noised",
    "mofedsam": "its momentum Delta is computed from the un-noised mean and broadcast to every client; only the "
                "model is noised",
    "fedadam": _SERVER_OPT.format("moments are"),
    "flwr:FedAdam": _SERVER_OPT.format("moments are"),
    "flwr:FedYogi": _SERVER_OPT.format("moments are"),
    "flwr:FedAdagrad": _SERVER_OPT.format("moments are"),
    "flwr:FedAvgM": _SERVER_OPT.format("momentum is"),
    "fedfa": _NOT_MEAN.format("it weighs the replies by -log2 of their training accuracy"),
    "maxfl": _NOT_MEAN.format("it averages only the clients that joined, fewer than the n sampled"),
    "pfedme": _NOT_MEAN.format("its server step mixes beta (up to 2) times the num-examples-weighted mean in"),
    "flwr:FedAvg": _NOT_MEAN.format("Flower's FedAvg weighs the replies by num-examples (Flower's own "
                                    "accountant refuses it too; fedavg averages uniformly under dp)"),
    "flwr:FedProx": _NOT_MEAN.format("Flower's FedProx weighs the replies by num-examples (fedprox averages "
                                     "uniformly under dp)"),
    "flwr:QFedAvg": _NOT_MEAN.format("its q-FFL step weighs each update by the client's loss to the power q"),
    **{f"flwr:{name}": "a robust aggregate's sensitivity to one client is not the mean's C / n the noise is "
                       "calibrated to" for name in ("FedMedian", "FedTrimmedAvg", "Krum", "MultiKrum", "Bulyan")},
    "fedals": _NO_MODEL.format("the clients keep their own bodies between body averages"),
    "fedals-scaffold": _NO_MODEL.format("the clients keep their own bodies between body averages"),
    "fedrep": _NO_MODEL.format("a shared body; every head stays on its client"),
    "hcct": _NO_MODEL.format("a model per group"),
    "hcct-e": _NO_MODEL.format("a model per group"),
    "hcct-p": _NO_MODEL.format("a model per group"),
    "ifca": _NO_MODEL.format("k cluster models"),
    "flsc": _NO_MODEL.format("k cluster models"),
    "independent": _NO_MODEL.format("every model stays on its client"),
    "local": _NO_MODEL.format("every model stays on its client"),
    "pefll": _NO_MODEL.format("a hypernetwork and an embedding network, updated by several exchanges a round"),
    "pfedhn": _NO_MODEL.format("a hypernetwork and client embeddings"),
}


def refusal(strategy: str) -> str:
    """Why ``dp`` is not sound for ``strategy`` ('': it is)."""
    if strategy in ACCEPTS:
        return ""
    return REFUSALS.get(strategy, "it is not one of the strategies whose update is the plain mean of their "
                                  f"replies' models ({', '.join(ACCEPTS)})")


def planned_sample(cfg: RunConfig) -> int:
    """Clients a round samples when every training client is connected (the preflight's n); counted,
    not drawn, so an absurd ``num-clients`` allocates nothing here."""
    from fedapp.core.data.indices import num_unseen

    seen = cfg.num_clients - num_unseen(cfg.num_clients, cfg.unseen_fraction)
    return sample_size(seen, cfg.fraction_train, cfg.min_train_nodes)


class Wrapped(RoundHooks, Protocol):
    """What a private round uses of the strategy it wraps (``strategies.base.FedStrategy``, the Flower
    Strategy Flower's wrapper is built around): the driver's hooks and these."""

    driver: Driver
    dp_wrapper: Strategy  # set by wrapper() at the first private round

    def set_global_arrays(self, arrays: ArrayRecord, what: str = "arrays") -> None: ...
    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]: ...


def wrapper(strategy: Wrapped) -> Strategy:
    """Flower's wrapper for the run's ``dp`` around ``strategy``, built at its first round (n: the
    clients each round samples from those connected) and kept; a resumed adaptive run restarts from
    the clipping norm its last row ended on."""
    dp = getattr(strategy, "dp_wrapper", None)
    if dp is not None:
        return dp
    cfg = strategy.cfg
    zero_norm_clipping()
    n = sample_size(len(strategy.driver.train_pool()), cfg.fraction_train, cfg.min_train_nodes)
    cls = WRAPPERS[cfg.dp]
    if cfg.dp.endswith("fixed"):
        dp = cls(strategy, cfg.dp_noise_multiplier, cfg.dp_clipping_norm, n)
    else:
        norm = next((r["dp-clipping-norm-next"] for r in reversed(strategy.history) if "dp-clipping-norm-next" in r),
                    cfg.dp_clipping_norm)
        dp = cls(strategy, cfg.dp_noise_multiplier, n, initial_clipping_norm=norm,
                 target_clipped_quantile=cfg.dp_target_clipped_quantile, clip_norm_lr=cfg.dp_clip_norm_lr,
                 clipped_count_stddev=cfg.dp_clipped_count_stddev or None)
    strategy.dp_wrapper = dp
    return dp


def clippable(strategy: Wrapped, replies: Iterable[Message]) -> list[Message]:
    """The replies Flower's wrapper may clip and average, read back into memory where they went to
    disk (``reply-memory-mb``): no error, from a partition addressed in this exchange, the arrays
    expected (Flower's clipping would fail on, or broadcast, others);
    under client-side dp marked ``dp-clipped`` by ``dp_mod`` (a plain Flower ClientApp, or a
    ClientApp of one's own without the mod, clips nothing). The others are dropped here with their
    reasons, as the driver drops them."""
    driver, expected = strategy.driver, strategy.expected["train"]
    pids = {strategy.clients[pid].node_id: pid for pid in expected}
    good, bad = [], []
    for msg in replies:
        pid = pids.get(msg.metadata.src_node_id)
        if (spilled := driver.wire.spilled.pop(msg.metadata.reply_to_message_id, None)) is not None:
            msg.content = spilled.content(msg.content)  # the wrapper clips records in memory
        if strategy.cfg.dp in CLIENT_MODS and msg.has_content() and CLIPPED not in msg.content.metric_records.get(
                "metrics", {}):
            driver.wire.drop("unclipped", pid=pid, detail=UNCLIPPED)
            continue
        try:
            fits = not msg.has_error() and pid is not None and check_reply(
                msg.content, pid, expected[pid], strategy.clients[pid].plain) is None
        except Exception:  # noqa: BLE001  # too odd to check: parse_replies says why
            fits = False
        (good if fits else bad).append(msg)
    driver.parse_replies(bad, expected)  # drops each, counted by its reason
    return good


def release_multiplier(dp: Strategy, clip: float, valid: int) -> float:
    """Noise multiplier of the Gaussian mechanism one round released, as the wrapper ran it: the model
    mean over ``valid`` replies clipped to ``clip`` (sensitivity clip / valid) got noise of std
    z' C' / n (``compute_stdv``, with the wrapper's clipping norm C' after the round: an adaptive
    wrapper updates it before it noises), so its multiplier is z' (C' / clip) (valid / n); an adaptive
    wrapper also released the clipped count, of sensitivity 1, with noise of std sigma_b. Both
    Gaussian mechanisms together are one with z^-2 = z_model^-2 + sigma_b^-2 (Rényi DP of Gaussians
    adds). 0: no noise, no privacy."""
    z_model = dp.noise_multiplier * (dp.clipping_norm / clip) * (valid / dp.num_sampled_clients)
    sigma_b = getattr(dp, "clipped_count_stddev", None)
    if sigma_b is None:
        return z_model
    if z_model == 0 or sigma_b == 0:
        return 0.0
    return (z_model**-2 + sigma_b**-2) ** -0.5


def epsilon(multipliers: Iterable[float], delta: float) -> float:
    """Client-level epsilon at ``delta`` of the Gaussian mechanisms with these noise multipliers
    composed (add-or-remove-one relation), by dp-accounting's RDP accountant; inf when one has none."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    multipliers = list(multipliers)
    if any(z <= 0 for z in multipliers):
        return math.inf
    accountant = RdpAccountant()  # add-or-remove-one by default
    for z, count in Counter(multipliers).items():
        accountant.compose(dp_event.GaussianDpEvent(z), count)
    return float(accountant.get_epsilon(delta))


def noise_for_target(target: float, delta: float, rounds: int) -> float:
    """The noise multiplier z whose ``rounds`` releases compose to ``target`` epsilon at ``delta`` by
    :func:`epsilon`'s accountant (``dp-target-epsilon``): bisection on z, epsilon falling as z grows,
    to within 1e-6 of z above the target's z (so the epsilon spent is at most the target)."""
    lo, hi = 0.0, 1.0
    while epsilon([hi] * rounds, delta) > target:
        lo, hi = hi, 2 * hi
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if epsilon([mid] * rounds, delta) > target else (lo, mid)
    return hi


def private_round(strategy: Wrapped, server_round: int, grid: Grid) -> dict[str, Any]:
    """One training round through Flower's wrapper: its configure_train (client-side: the clipping norm
    in every config), the exchange, its aggregate_train (server-side: every reply clipped; then the
    strategy's uniform mean and the noise); the noised model becomes the global one. The row's
    ``dp-*`` entries: the clipping norm the round used, the multiplier it released with and the
    epsilon spent so far."""
    dp, cfg = wrapper(strategy), strategy.cfg
    clip = dp.clipping_norm
    msgs = list(dp.configure_train(server_round, strategy.global_arrays(),
                                   ConfigRecord(dict(strategy.base_config["train"])), grid))
    replies = clippable(strategy, strategy.driver.wire.exchange(grid, msgs, expected=strategy.expected["train"]))
    if not replies:  # nothing to clip: the strategy skips the round, nothing is released
        arrays, metrics = strategy.aggregate_train(server_round, [])
    else:
        arrays, metrics = dp.aggregate_train(server_round, replies)
    row: dict[str, Any] = {**dict(metrics or {"replies": 0, "skipped": 1}), "dp-clipping-norm": clip}
    if cfg.dp.endswith("adaptive"):
        row["dp-clipping-norm-next"] = dp.clipping_norm
    if arrays is not None:
        strategy.set_global_arrays(arrays)
        row["dp-release-multiplier"] = release_multiplier(dp, clip, int(row["replies"]))
    elif replies and cfg.dp.endswith("adaptive"):  # the noised clipped count alone was released
        row["dp-release-multiplier"] = dp.clipped_count_stddev
    released = [r["dp-release-multiplier"] for r in (*strategy.history, row) if "dp-release-multiplier" in r]
    if released:
        row["dp-epsilon"] = epsilon(released, cfg.dp_delta)
    if row.get("dp-epsilon") == math.inf and server_round == 1:
        log(WARNING, "dp: no noise (dp-noise-multiplier 0), so no privacy: dp-epsilon is inf")
    return row
