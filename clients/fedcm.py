"""FedCM client: every local step mixes the gradient with the server's momentum direction."""

from __future__ import annotations

import torch

from clients.base import FedClient
from fedapp.records import Payload


class FedCMClient(FedClient):
    """Xu et al., "FedCM: Federated Learning with Client-level Momentum" (2021).

    Each step uses v = alpha * g + (1 - alpha) * Delta, Delta the global update direction
    the server sends in ``momentum``; alpha = ``<prefix>.alpha``. Weight decay is part of g
    (g = grad f_i(w) + weight_decay * w), not added by the optimizer after the mix: Delta already
    carries the round's decay, so an unscaled optimizer decay on top of it would compound to
    weight_decay / alpha at the fixed point Delta = v.
    """

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.direction = {k: v.to(self.device) for k, v in payload["momentum"].items()}

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        opt = super().make_optimizer(lr)
        for group in opt.param_groups:  # applied in correct_gradient, inside the alpha-weighted g
            group["weight_decay"] = 0.0
        return opt

    def correct_gradient(self) -> None:
        super().correct_gradient()
        alpha, decay = self.cfg.algo("alpha"), self.cfg.weight_decay
        with torch.no_grad():
            for k, p in self.params.items():
                p.grad.add_(p, alpha=decay).mul_(alpha).add_(self.direction[k], alpha=1.0 - alpha)
