"""FedCM client: every local step mixes the gradient with the server's momentum direction."""

from __future__ import annotations

import torch

from clients.base import FedClient
from clients.keys import ALPHA, DECAY_IN_MIX, Settings
from fedapp.core.records import Payload, Tensors


class FedCMClient(FedClient):
    """Xu et al., "FedCM: Federated Learning with Client-level Momentum" (2021).

    Each step uses v = alpha * g + (1 - alpha) * Delta, Delta the global update direction
    the server sends in ``momentum``; alpha = ``alpha``. Weight decay: by default the
    optimizer adds wd w after the mix, as the authors' simulator does (v + wd w). Delta already
    carries the previous rounds' decay, so at the fixed point Delta = v + wd w the effective decay is
    wd / alpha; ``decay-in-mix`` makes the decay part of g instead (alpha (g + wd w) +
    (1 - alpha) Delta), whose fixed point is plain SGD with decay wd.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.direction: Tensors = {}  #: Delta, the server's momentum direction

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.direction = {k: v.to(self.device) for k, v in payload["momentum"].items()}

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        opt = super().make_optimizer(lr)
        if self.setting("decay-in-mix"):
            for group in opt.param_groups:  # applied in correct_gradient, inside the alpha-weighted g
                group["weight_decay"] = 0.0
        return opt

    def correct_gradient(self) -> None:
        super().correct_gradient()
        alpha = self.setting("alpha")
        decay = self.setting("weight-decay") if self.setting("decay-in-mix") else 0.0
        with torch.no_grad():
            for k, p in self.params.items():
                p.grad.add_(p, alpha=decay).mul_(alpha).add_(self.direction[k], alpha=1.0 - alpha)


#: the run-config keys fedcm's clients read (``fedcm.<key>``)
FEDCM = Settings("fedcm", keys=(ALPHA, DECAY_IN_MIX))

ALGORITHMS = {"fedcm": (FEDCM, FedCMClient)}
