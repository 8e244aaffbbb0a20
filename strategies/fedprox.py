"""FedProx: FedAvg on the server; the proximal term lives in the client."""

from clients.fedprox import FEDPROX
from strategies.base import FedStrategy
from strategies.settings import LR_DECAY, declare


class FedProx(FedStrategy):
    """FedProx (Li et al., MLSys 2020).

    Clients approximately minimise F_i(w) + (mu/2)||w - w_t||^2 (mu = ``fedprox.proximal-mu``);
    the server averages as FedAvg: w_{t+1} = sum_i n_i w_i / sum_i n_i.
    """

    config_prefix, config_keys, client_keys = declare(FEDPROX, *FEDPROX.keys, LR_DECAY)


ALGORITHMS = {"fedprox": FedProx}
