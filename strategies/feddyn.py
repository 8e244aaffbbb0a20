"""FedDyn: the server keeps the mean dual lambda and corrects the average by it."""

from __future__ import annotations

from clients.feddyn import FEDDYN
from strategies.base import FedStrategy
from strategies.settings import LR_DECAY, declare


class FedDyn(FedStrategy):
    """FedDyn (Acar et al., ICLR 2021) in FedSMOO's notation, beta = 1/alpha.

    Clients minimise F_i(w) - <lambda_i, w> + ||w - w_t||^2 / (2 beta). With m training
    clients and the replies of the sampled set S (unweighted means):

        lambda <- lambda - sum_{i in S} (w_i - w_t) / (beta m)
        w_{t+1} = (1/|S|) sum_{i in S} w_i - beta lambda

    Since every lambda_i starts at 0, lambda = (1/m) sum over all clients of lambda_i.
    """

    config_prefix, config_keys, client_keys = declare(FEDDYN, *FEDDYN.keys, LR_DECAY)
    checkpoint_attrs = ("dual",)
    weighted = False

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.dual = self.zeros_like_params()

    def update_dual(self, replies, w, combined) -> None:
        """lambda <- lambda - sum_{i in S} (w_i - w) / (beta m), m = all training clients. With a
        robust ``aggregation`` the sum is |S| times the robust combination ``combined`` of the w_i
        less w (median, trimmed mean and Krum commute with the shift by w), as SCAFFOLD's control."""
        scale = self.cfg.algo("beta") * len(self.driver.train_pool())
        if self.cfg.aggregation == "mean":
            self.dual = {k: lam - sum(r.payload["arrays"][k] - w[k] for r in replies) / scale
                         for k, lam in self.dual.items()}
        else:
            self.dual = {k: lam - len(replies) * (combined[k] - w[k]) / scale for k, lam in self.dual.items()}

    def aggregate(self, server_round, replies):
        w = self.global_state
        super().aggregate(server_round, replies)  # unweighted mean (or robust combination) of the w_i
        self.update_dual(replies, w, self.global_state)
        beta = self.cfg.algo("beta")
        self.global_state = {k: v - beta * self.dual[k] if k in self.dual else v
                             for k, v in self.global_state.items()}


ALGORITHMS = {"feddyn": FedDyn}
