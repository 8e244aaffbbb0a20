"""FedSAM and MoFedSAM clients: the SAM gradient, alone or inside FedCM's momentum."""

from clients.base import FedClient
from clients.fedcm import FedCMClient
from clients.keys import ALPHA, DECAY_IN_MIX, RHO, Settings
from clients.sam import SAMSteps


class FedSAMClient(SAMSteps, FedClient):
    """Qu et al., "Generalized Federated Learning via Sharpness Aware Minimization" (ICML 2022):
    local SAM steps with radius ``rho``, then FedAvg."""


class MoFedSAMClient(SAMSteps, FedCMClient):
    """MoFedSAM (Qu et al., 2022): v = alpha * g_SAM + (1 - alpha) * Delta (FedCM with SAM gradients)."""


#: the run-config keys fedsam's clients read (``fedsam.<key>``)
FEDSAM = Settings("fedsam", keys=(RHO,))
#: the run-config keys mofedsam's clients read (``mofedsam.<key>``)
MOFEDSAM = Settings("mofedsam", keys=(RHO, ALPHA, DECAY_IN_MIX))

ALGORITHMS = {"fedsam": (FEDSAM, FedSAMClient), "mofedsam": (MOFEDSAM, MoFedSAMClient)}
