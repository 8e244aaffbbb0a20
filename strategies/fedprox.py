"""FedProx: FedAvg on the server; the proximal term lives in the client."""

from clients.fedprox import FedProxClient
from fedapp.core.config import Key
from strategies.base import FedStrategy
from strategies.keys import LR_DECAY


class FedProx(FedStrategy):
    """FedProx (Li et al., MLSys 2020).

    Clients approximately minimise F_i(w) + (mu/2)||w - w_t||^2 (mu = ``fedprox.proximal-mu``);
    the server averages as FedAvg: w_{t+1} = sum_i n_i w_i / sum_i n_i.
    """

    config_prefix = "fedprox"
    config_keys = (Key("proximal-mu", float, 0.01, "Proximal coefficient mu.", low=0.0), LR_DECAY)
    client_keys = ("proximal-mu",)


ALGORITHMS = {"fedprox": (FedProx, FedProxClient)}
