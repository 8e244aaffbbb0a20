"""FedSAM and MoFedSAM clients: the SAM gradient, alone or inside FedCM's momentum."""

from clients.base import FedClient
from clients.fedcm import FedCMClient
from clients.keys import ALPHA, DECAY_IN_MIX, LR_DECAY, RHO, Settings
from clients.sam import SAMSteps


class FedSAMClient(SAMSteps, FedClient):
    """Qu et al., "Generalized Federated Learning via Sharpness Aware Minimization" (ICML 2022):
    local SAM steps with radius ``rho``, then FedAvg."""


class MoFedSAMClient(SAMSteps, FedCMClient):
    """MoFedSAM (Qu et al., 2022): v = alpha * g_SAM + (1 - alpha) * Delta (FedCM with SAM gradients)."""


#: fedsam's run-config keys (``fedsam.<key>``)
FEDSAM = Settings("fedsam", keys=(RHO, LR_DECAY), client_keys=("rho",))
#: mofedsam's run-config keys (``mofedsam.<key>``)
MOFEDSAM = Settings("mofedsam", keys=(RHO, ALPHA, DECAY_IN_MIX, LR_DECAY),
                    client_keys=("rho", "alpha", "decay-in-mix"))

ALGORITHMS = {"fedsam": (FEDSAM, FedSAMClient), "mofedsam": (MOFEDSAM, MoFedSAMClient)}
