"""FedFA: aggregation weighted by -log2 of each client's training accuracy."""

import math

from clients.fedfa import FEDFA
from fedapp.server.replies import Reply
from strategies.base import FedStrategy
from strategies.settings import declare

#: accuracies are clipped here so that -log2 stays finite and positive
ACC_CLIP = (1e-3, 1 - 1e-3)


class FedFA(FedStrategy):
    """FedFA (Huang et al., "Fairness and Accuracy in Federated Learning", 2020), as HCCT's baseline.

    w_{t+1} = sum_i p_i w_i^{t,K} / sum_i p_i with p_i = -log2(acc_i), acc_i the accuracy of the
    received model w_t on client i's training data: poorly served clients weigh more.
    """

    config_prefix, config_keys, client_keys = declare(FEDFA)

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        weights = [-math.log2(min(max(r.metrics["train-accuracy"], ACC_CLIP[0]), ACC_CLIP[1])) for r in replies]
        self.global_state = self.combine([r.payload["arrays"] for r in replies], weights)


ALGORITHMS = {"fedfa": FedFA}
