"""FedAvg: the shared machinery with every hook at its default."""

from clients.fedavg import FEDAVG
from strategies.base import FedStrategy
from strategies.settings import LR_DECAY, declare


class FedAvg(FedStrategy):
    """Federated Averaging (McMahan et al., AISTATS 2017).

    w_{t+1} = sum_{i in S_t} n_i w_i^{t,K} / sum_{i in S_t} n_i, where S_t is the seeded
    sample of clients of round t, n_i their training example counts and w_i^{t,K} the
    model after K local SGD steps from w_t.
    """

    config_prefix, config_keys, client_keys = declare(FEDAVG, LR_DECAY)


ALGORITHMS = {"fedavg": FedAvg}
