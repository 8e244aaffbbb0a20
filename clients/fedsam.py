"""FedSAM and MoFedSAM clients: the shared SAM gradient, alone or inside FedCM's momentum."""

from clients.fedcm import FedCMClient
from clients.sam import SAMClient


class FedSAMClient(SAMClient):
    """Qu et al., "Generalized Federated Learning via Sharpness Aware Minimization" (ICML 2022):
    local SAM steps with radius rho, then FedAvg."""


class MoFedSAMClient(SAMClient, FedCMClient):
    """MoFedSAM (Qu et al., 2022): v = alpha * g_SAM + (1 - alpha) * Delta (FedCM with SAM gradients)."""
