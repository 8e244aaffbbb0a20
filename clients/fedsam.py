"""FedSAM and MoFedSAM clients: the SAM gradient, alone or inside FedCM's momentum."""

from clients.base import FedClient
from clients.fedcm import FedCMClient
from clients.sam import SAM


class FedSAMClient(FedClient):
    """Qu et al., "Generalized Federated Learning via Sharpness Aware Minimization" (ICML 2022):
    local SAM steps with radius ``rho``, then FedAvg."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sam = SAM()

    def compute_gradient(self, x, y):
        return self.sam.gradient(self.model, lambda: self.loss(x, y), self.setting("rho"))


class MoFedSAMClient(FedCMClient):
    """MoFedSAM (Qu et al., 2022): v = alpha * g_SAM + (1 - alpha) * Delta (FedCM with SAM gradients)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sam = SAM()

    def compute_gradient(self, x, y):
        return self.sam.gradient(self.model, lambda: self.loss(x, y), self.setting("rho"))
