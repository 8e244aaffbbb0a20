"""FedSAM (FedAvg server) and MoFedSAM (FedCM server), both with SAM clients."""

from clients.fedsam import FEDSAM, MOFEDSAM
from strategies.base import FedStrategy
from strategies.fedcm import FedCM
from strategies.settings import LR_DECAY, declare


class FedSAM(FedStrategy):
    """FedSAM (Qu et al., ICML 2022): clients take SAM steps
    w <- w - eta g(w + rho g/||g||); the server averages as FedAvg."""

    config_prefix, config_keys, client_keys = declare(FEDSAM, *FEDSAM.keys, LR_DECAY)


class MoFedSAM(FedCM):
    """MoFedSAM (Qu et al., ICML 2022): FedCM's server with SAM clients,
    local direction alpha g(w + rho g/||g||) + (1 - alpha) Delta_t."""

    config_prefix, config_keys, client_keys = declare(MOFEDSAM, *MOFEDSAM.keys, LR_DECAY)


ALGORITHMS = {"fedsam": FedSAM, "mofedsam": MoFedSAM}
