"""FedAdam through Flower's own ``flwr.serverapp.strategy.FedAdam`` update."""

from __future__ import annotations

import numpy as np
from flwr.app import Message, MessageType
from flwr.serverapp.strategy import FedAdam as FlowerFedAdam

from clients.fedavg import FedAvgClient
from fedapp.config import Key
from fedapp.records import make_content
from strategies.base import FedStrategy
from strategies.keys import LR_DECAY
from strategies.flower import as_tensors, flower_replies


class FedAdam(FedStrategy):
    """FedAdam (Reddi et al., "Adaptive Federated Optimization", ICLR 2021).

    With Delta_t = sum_i n_i w_i / sum_i n_i - w_t (a robust ``aggregation``: its combination of
    the w_i less w_t):
    m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t, v_t = beta_2 v_{t-1} + (1 - beta_2) Delta_t^2,
    w_{t+1} = w_t + eta_t m_t / (sqrt(v_t) + tau), eta_t Flower's bias-corrected ``eta``.
    The arithmetic is Flower's ``FedAdam.aggregate_train``; m_t and v_t are kept here.
    """

    config_prefix = "fedadam"
    config_keys = (
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

    def aggregate(self, server_round, replies):
        opt = FlowerFedAdam(eta=self.cfg.algo("eta"), beta_1=self.cfg.algo("beta-1"),
                            beta_2=self.cfg.algo("beta-2"), tau=self.cfg.algo("tau"))
        opt.current_arrays = {k: v.numpy() for k, v in self.global_state.items()}
        opt.m_t, opt.v_t = self.m_t, self.v_t
        if self.cfg.aggregation == "mean":  # Flower's own weighted mean
            msgs = flower_replies(replies, {pid: c.node_id for pid, c in self.clients.items()})
        else:  # Delta_t from the robust combination: Flower's mean of it alone
            combined = self.combine([r.payload["arrays"] for r in replies], [r.num_examples for r in replies])
            msgs = [Message(make_content({"arrays": combined}, metrics={"num-examples": 1}),
                            dst_node_id=self.clients[replies[0].pid].node_id, message_type=MessageType.TRAIN)]
        arrays, _ = opt.aggregate_train(server_round, msgs)
        self.m_t, self.v_t = opt.m_t, opt.v_t
        self.global_state = as_tensors(arrays, self.global_state)


ALGORITHMS = {"fedadam": (FedAdam, FedAvgClient)}
