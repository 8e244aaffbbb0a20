"""FedCM: the server broadcasts its last averaged update as the clients' momentum direction."""

from __future__ import annotations

from clients.fedcm import FEDCM
from fedapp.core.experiment import round_lr
from strategies.base import FedStrategy
from strategies.settings import LR_DECAY, declare


class FedCM(FedStrategy):
    """FedCM (Xu et al., 2021), global step 1.

    Clients step along alpha g + (1 - alpha) Delta_t. After averaging,
    w_{t+1} = sum_i n_i w_i / sum_i n_i and Delta_{t+1} = (w_t - w_{t+1}) / (eta_l K),
    the mean per-step descent direction of the round (Delta_1 = 0).
    """

    config_prefix, config_keys, client_keys = declare(FEDCM, *FEDCM.keys, LR_DECAY)
    checkpoint_attrs = ("momentum",)

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.momentum = self.zeros_like_params()

    def broadcast_payload(self, phase, server_round):
        if phase != "train":
            return super().broadcast_payload(phase, server_round)
        return {"arrays": self.global_state, "momentum": self.momentum}

    def aggregate(self, server_round, replies):
        old = self.global_state
        super().aggregate(server_round, replies)
        steps = sum(r.metrics["local-steps"] for r in replies) / len(replies)
        scale = round_lr(self.cfg, server_round) * steps
        self.momentum = {k: (old[k] - self.global_state[k]) / scale for k in self.momentum}


ALGORITHMS = {"fedcm": FedCM}
