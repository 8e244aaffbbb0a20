"""Sharpness-aware minimisation (Foret et al., ICLR 2021) as a client gradient hook.

One implementation serves FedSAM, MoFedSAM, FedSpeed and FedSMOO: they differ only in
the direction that is normalised into the perturbation (``sam_direction``) and in what
they do with the perturbation afterwards (``perturbed``).
"""

from __future__ import annotations

import torch

from clients.base import FedClient
from fedapp.perturbation import perturbation
from fedapp.records import Tensors


class SAMClient(FedClient):
    """Each minibatch: g at w, s_hat = rho * d(g)/||d(g)||, then the gradient at w + s_hat.

    ``rho`` comes in the message's config (the algorithm's ``<prefix>.rho`` at the server). The returned loss is the one at w.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.s_hat: Tensors = {}  #: the last step's perturbation

    def sam_direction(self, grad: Tensors) -> Tensors:
        """What the perturbation normalises: the gradient itself for plain SAM."""
        return grad

    def perturbed(self, s_hat: Tensors) -> None:
        """Called with each step's perturbation (FedSMOO updates its dual here)."""

    def compute_gradient(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        params = self.params
        loss = self.loss(x, y)
        loss.backward()
        grad = {k: p.grad.detach().clone() for k, p in params.items()}
        self.s_hat = perturbation(self.sam_direction(grad), self.setting("rho"))
        self.perturbed(self.s_hat)
        saved = self.param_tensors()
        with torch.no_grad():
            for k, p in params.items():
                p.add_(self.s_hat[k])
                p.grad.zero_()
        self.loss(x, y).backward()
        with torch.no_grad():  # back to w exactly; the optimizer steps from there with g(w + s_hat)
            for k, p in params.items():
                p.copy_(saved[k])
        return loss
