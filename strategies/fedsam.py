"""FedSAM (FedAvg server) and MoFedSAM (FedCM server), both with SAM clients."""

from clients.fedsam import FedSAMClient, MoFedSAMClient
from strategies.base import FedStrategy
from strategies.fedcm import FedCM
from strategies.keys import ALPHA, DECAY_IN_MIX, LR_DECAY, RHO


class FedSAM(FedStrategy):
    """FedSAM (Qu et al., ICML 2022): clients take SAM steps
    w <- w - eta g(w + rho g/||g||); the server averages as FedAvg."""

    config_prefix = "fedsam"
    config_keys = (RHO, LR_DECAY)
    client_keys = ("rho",)


class MoFedSAM(FedCM):
    """MoFedSAM (Qu et al., ICML 2022): FedCM's server with SAM clients,
    local direction alpha g(w + rho g/||g||) + (1 - alpha) Delta_t."""

    config_prefix = "mofedsam"
    config_keys = (RHO, ALPHA, DECAY_IN_MIX, LR_DECAY)
    client_keys = ("rho", "alpha", "decay-in-mix")


ALGORITHMS = {"fedsam": (FedSAM, FedSAMClient), "mofedsam": (MoFedSAM, MoFedSAMClient)}
