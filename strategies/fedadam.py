"""FedAdam with Flower's own ``flwr.serverapp.strategy.FedAdam`` step as its server optimiser."""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord
from flwr.serverapp.strategy import FedAdam as FlowerFedAdam
from flwr.serverapp.strategy.fedopt import FedOpt
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from clients.fedavg import FEDADAM
from fedapp.core.config import Key
from fedapp.core.records import make_content, to_record
from strategies.base import FedStrategy
from strategies.flower import as_tensors
from strategies.settings import LR_DECAY, declare


class _Aggregated(FedOpt):
    """Where Flower's ``FedAdam.aggregate_train`` takes the round's aggregate from its replies
    (``super().aggregate_train``): here the aggregate itself is passed in."""

    def aggregate_train(self, server_round: int, replies: ArrayRecord) -> tuple[ArrayRecord, None]:
        return replies, None


class AdamStep(FlowerFedAdam, _Aggregated):
    """Flower's FedAdam as an optimiser: ``aggregate_train(round, aggregate)`` is its update of
    ``current_arrays`` towards an aggregate of the replies (its m_t, v_t and bias-corrected eta),
    line for line Flower's, with no messages."""


class FedAdam(FedStrategy):
    """FedAdam (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

    With Delta_t = sum_i n_i w_i / sum_i n_i - w_t (a robust ``aggregation``: its combination of
    the w_i less w_t):
    m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t, v_t = beta_2 v_{t-1} + (1 - beta_2) Delta_t^2,
    w_{t+1} = w_t + eta_t m_t / (sqrt(v_t) + tau), eta_t Flower's bias-corrected ``eta``.
    The arithmetic is Flower's: its weighted mean (``aggregate_arrayrecords``) and its
    ``FedAdam.aggregate_train`` step (``AdamStep``); m_t and v_t are kept here (checkpoints carry them).
    """

    config_prefix, config_keys, client_keys = declare(
        FEDADAM,
        Key("eta", float, 0.01, "Server learning rate eta.", low=0.0, low_open=True),
        Key("beta-1", float, 0.9, "First-moment decay beta_1.", low=0.0, high=1.0),
        Key("beta-2", float, 0.99, "Second-moment decay beta_2.", low=0.0, high=1.0),
        Key("tau", float, 1e-3, "Adaptivity tau.", low=0.0, low_open=True),
        LR_DECAY,
    )
    checkpoint_attrs = ("m_t", "v_t")

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.m_t: dict[str, np.ndarray] | None = None
        self.v_t: dict[str, np.ndarray] | None = None
        self.adam = AdamStep(eta=cfg.algo("eta"), beta_1=cfg.algo("beta-1"), beta_2=cfg.algo("beta-2"),
                             tau=cfg.algo("tau"))

    def aggregate(self, server_round, replies):
        if self.cfg.aggregation == "mean":  # Flower's own weighted mean
            mean = aggregate_arrayrecords([make_content({"arrays": r.payload["arrays"]},
                                                        metrics={"num-examples": r.num_examples}) for r in replies],
                                          "num-examples")
        else:  # Delta_t from the robust combination
            mean = to_record(self.combine([r.payload["arrays"] for r in replies], [r.num_examples for r in replies]))
        adam = self.adam
        adam.current_arrays = {k: v.numpy() for k, v in self.global_state.items()}
        adam.m_t, adam.v_t = self.m_t, self.v_t
        arrays, _ = adam.aggregate_train(server_round, mean)
        self.m_t, self.v_t = adam.m_t, adam.v_t
        self.global_state = as_tensors(arrays, self.global_state)


ALGORITHMS = {"fedadam": FedAdam}
