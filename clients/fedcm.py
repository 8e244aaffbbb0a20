"""FedCM client: every local step mixes the gradient with the server's momentum direction."""

from __future__ import annotations

from clients.base import FedClient
from fedapp.records import Payload


class FedCMClient(FedClient):
    """Xu et al., "FedCM: Federated Learning with Client-level Momentum" (2021).

    Each step uses v = alpha * g + (1 - alpha) * Delta, Delta the global update direction
    the server sends in ``momentum``; alpha = ``<prefix>.alpha``.
    """

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.direction = {k: v.to(self.device) for k, v in payload["momentum"].items()}

    def correct_gradient(self) -> None:
        super().correct_gradient()
        alpha = self.cfg.algo("alpha")
        for k, p in self.params.items():
            p.grad.mul_(alpha).add_(self.direction[k], alpha=1.0 - alpha)
