"""FedSMOO and its no-correction ablation (FedSpeed-style) on FedDyn's server."""

from __future__ import annotations

from clients.fedsmoo import FEDSPEED, FEDSMOO
from fedapp.core.perturbation import perturbation
from fedapp.server.replies import spec_of
from strategies.feddyn import FedDyn
from strategies.settings import LR_DECAY, declare


class FedSpeed(FedDyn):
    """FedSMOO's ablation "dynamic regulariser + SAM, no correction" (mu_i = s = 0):
    FedDyn's server with clients stepping along g(w_i + rho g/||g||) - lambda_i + (w_i - w)/beta."""

    config_prefix, config_keys, client_keys = declare(FEDSPEED, *FEDSPEED.keys, LR_DECAY)


class FedSMOO(FedDyn):
    """FedSMOO (Sun et al., ICML 2023), Algorithm 1.

    The server keeps w, the global perturbation s and the dual lambda (all zero at first)
    and sends (w, s). Client i keeps lambda_i and mu_i; per step, on one minibatch,
    S = g(w_i) - mu_i - s, s_hat = r S/||S||, mu_i <- mu_i + s_hat - s and
    w_i <- w_i - eta (g(w_i + s_hat) - lambda_i + (w_i - w)/beta); afterwards
    lambda_i <- lambda_i - (w_i - w)/beta and it sends (w_i, s_tilde_i = mu_i - s_hat).
    With m clients and replies from S (unweighted means):

        s = r S/||S||, S = mean_i s_tilde_i
        lambda <- lambda - sum_i (w_i - w)/(beta m)
        w <- mean_i w_i - beta lambda

    ``fedsmoo.rho`` is the paper's r, ``fedsmoo.beta`` the penalty (the public simulator's
    ``lamb`` is 1/beta). ``fedsmoo.simulator-perturbation`` takes S from the mean of mu_i as
    the authors' public simulator does. Traffic is two model-sized arrays each way.
    """

    config_prefix, config_keys, client_keys = declare(FEDSMOO, *FEDSMOO.keys, LR_DECAY)
    checkpoint_attrs = ("dual", "perturbation")

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.perturbation = self.zeros_like_params()

    def broadcast_payload(self, phase, server_round):
        if phase != "train":
            return super().broadcast_payload(phase, server_round)
        return {"arrays": self.global_state, "perturbation": self.perturbation}

    def reply_spec(self, pid, server_round):
        return spec_of({"arrays": self.global_state, "perturbation": self.perturbation})

    def aggregate(self, server_round, replies):
        super().aggregate(server_round, replies)
        mean = self.combine([r.payload["perturbation"] for r in replies], [1.0] * len(replies))
        self.perturbation = perturbation(mean, self.cfg.algo("rho"))


ALGORITHMS = {"fedspeed": FedSpeed, "fedsmoo": FedSMOO}
