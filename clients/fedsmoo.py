"""FedSpeed-style and FedSMOO clients: FedDyn's dual terms on SAM gradients."""

from __future__ import annotations

from clients.base import saved_or_zeros
from clients.feddyn import FedDynClient
from clients.keys import BETA, RHO, Settings
from clients.sam import SAMSteps
from fedapp.core.config import Key
from fedapp.core.records import Payload, Tensors


class FedSpeedClient(SAMSteps, FedDynClient):
    """The FedSMOO ablation "dynamic regulariser + SAM, no correction" (mu_i = s = 0):
    w_i <- w_i - eta (g(w_i + s_hat) - lambda_i + (w_i - w)/beta), s_hat = rho g/||g||."""


class FedSMOOClient(FedSpeedClient):
    """Sun et al., "Dynamic Regularized Sharpness Aware Minimization in Federated Learning" (ICML 2023).

    Receives w and the global perturbation s. Each step: S = g - mu_i - s,
    s_hat = r S/||S||, mu_i <- mu_i + s_hat - s, then FedDyn's step with g(w_i + s_hat).
    After K steps it sends w_i and s_tilde_i = mu_i - s_hat (or mu_i with
    ``simulator-perturbation``, the authors' public simulator). mu_i persists in
    ``state["perturbation-dual"]``, lambda_i in ``state["dual"]``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.global_perturbation: Tensors = {}  #: s
        self.mu: Tensors = {}  #: mu_i

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.global_perturbation = {k: v.to(self.device) for k, v in payload["perturbation"].items()}
        self.mu = saved_or_zeros(self.state.get("perturbation-dual"), self.global_perturbation, self.device)

    def sam_direction(self, grad: Tensors) -> Tensors:
        """S = g - mu_i - s: the direction SAM normalises."""
        return {k: g - self.mu[k] - self.global_perturbation[k] for k, g in grad.items()}

    def compute_gradient(self, x, y):
        loss = super().compute_gradient(x, y)
        for k, mu in self.mu.items():  # mu_i <- mu_i + s_hat - s
            mu.add_(self.sam.s_hat[k] - self.global_perturbation[k])
        return loss

    def after_train(self, payload: Payload, config: dict) -> None:
        super().after_train(payload, config)
        self.state["perturbation-dual"] = {k: v.cpu().clone() for k, v in self.mu.items()}

    def reply(self, payload: Payload, config: dict) -> Payload:
        if self.setting("simulator-perturbation"):
            local = self.mu
        else:
            local = {k: self.mu[k] - self.sam.s_hat[k] for k in self.mu}
        return {"arrays": self.model_tensors(), "perturbation": {k: v.cpu() for k, v in local.items()}}


#: the run-config keys fedspeed's clients read (``fedspeed.<key>``)
FEDSPEED = Settings("fedspeed", keys=(RHO, BETA))
#: the run-config keys fedsmoo's clients read (``fedsmoo.<key>``)
FEDSMOO = Settings(
    "fedsmoo",
    keys=(RHO, BETA, Key("simulator-perturbation", bool, False,
                         "Global perturbation from the mean of mu_i (public simulator) instead of mu_i - s_hat.")),
)

ALGORITHMS = {"fedspeed": (FEDSPEED, FedSpeedClient), "fedsmoo": (FEDSMOO, FedSMOOClient)}
