"""FedProx client: SGD on the local loss plus a proximal term to the global model."""

from __future__ import annotations

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.config import Key
from fedapp.core.records import Payload, Tensors


class FedProxClient(FedClient):
    """Li et al., "Federated Optimization in Heterogeneous Networks" (MLSys 2020).

    Minimises F_i(w) + (mu/2)||w - w_t||^2: each step adds mu (w - w_t) to the gradient,
    mu = ``proximal-mu`` from the message's config (``fedprox.proximal-mu`` at the server).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.anchor: Tensors = {}  #: w_t, the received global model

    def prox_coefficient(self) -> float:
        return self.setting("proximal-mu")

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.anchor = self.param_tensors()

    def correct_gradient(self) -> None:
        super().correct_gradient()
        mu = self.prox_coefficient()
        for k, p in self.params.items():
            p.grad.add_(p.detach() - self.anchor[k], alpha=mu)


#: the run-config keys fedprox's clients read (``fedprox.<key>``)
FEDPROX = Settings("fedprox", keys=(Key("proximal-mu", float, 0.01, "Proximal coefficient mu.", low=0.0),))

ALGORITHMS = {"fedprox": (FEDPROX, FedProxClient)}
