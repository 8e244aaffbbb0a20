"""FedDyn client: proximal term 1/beta plus the client's linear dual term."""

from __future__ import annotations

import torch

from clients.base import saved_or_zeros
from clients.fedprox import FedProxClient
from clients.keys import BETA, Settings
from fedapp.core.records import Payload, Tensors


class FedDynClient(FedProxClient):
    """Acar et al., "Federated Learning Based on Dynamic Regularization" (ICLR 2021).

    In FedSMOO's notation (beta = 1/alpha of FedDyn): each step uses
    g - lambda_i + (w_i - w)/beta; after K steps lambda_i <- lambda_i - (w_i - w)/beta.
    lambda_i (zeros at first) persists in ``state["dual"]``. As in the authors' simulator, the
    w_i/beta part is the optimizer's weight decay, so ``grad-clip`` clips g - lambda_i - w/beta only.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.dual: Tensors = {}  #: lambda_i

    def prox_coefficient(self) -> float:
        return 1.0 / self.setting("beta")

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        opt = super().make_optimizer(lr)
        for group in opt.param_groups:
            group["weight_decay"] += self.prox_coefficient()
        return opt

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.dual = saved_or_zeros(self.state.get("dual"), self.anchor, self.device)

    def correct_gradient(self) -> None:  # replaces FedProx's mu (w_i - w): mu w_i is in the weight decay
        mu = self.prox_coefficient()
        for k, p in self.params.items():
            p.grad.sub_(self.dual[k]).sub_(self.anchor[k], alpha=mu)

    def after_train(self, payload: Payload, config: dict) -> None:
        super().after_train(payload, config)
        beta = self.setting("beta")
        w_i = self.param_tensors()
        self.state["dual"] = {k: (self.dual[k] - (w_i[k] - self.anchor[k]) / beta).cpu() for k in w_i}


#: the run-config keys feddyn's clients read (``feddyn.<key>``)
FEDDYN = Settings("feddyn", keys=(BETA,))

ALGORITHMS = {"feddyn": (FEDDYN, FedDynClient)}
