"""Sharpness-aware minimisation (Foret et al., ICLR 2021): the gradient step a client holds.

One :class:`SAM` serves FedSAM, MoFedSAM, FedSpeed and FedSMOO, each client holding one and
calling it from ``compute_gradient``: they differ only in the direction that is normalised into
the perturbation (``direction``) and in what they do with the perturbation afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedapp.perturbation import perturbation
from fedapp.records import Tensors


class SAM:
    """Each minibatch: g at w, s_hat = rho * d(g)/||d(g)||, then the gradient at w + s_hat.

    ``direction`` is d (plain SAM: g itself); the last step's s_hat stays in ``s_hat``.
    """

    def __init__(self, direction: Callable[[Tensors], Tensors] | None = None):
        self.direction = direction or (lambda grad: grad)
        self.s_hat: Tensors = {}

    def gradient(self, model: torch.nn.Module, loss: Callable[[], torch.Tensor], rho: float) -> torch.Tensor:
        """Fill the parameters' ``.grad`` with g(w + s_hat), ``loss()`` being the minibatch loss at
        the current parameters; returns the loss at w."""
        params = dict(model.named_parameters())
        at_w = loss()
        at_w.backward()
        grad = {k: p.grad.detach().clone() for k, p in params.items()}
        self.s_hat = perturbation(self.direction(grad), rho)
        saved = {k: p.detach().clone() for k, p in params.items()}
        with torch.no_grad():
            for k, p in params.items():
                p.add_(self.s_hat[k])
                p.grad.zero_()
        loss().backward()
        with torch.no_grad():  # back to w exactly; the optimizer steps from there with g(w + s_hat)
            for k, p in params.items():
                p.copy_(saved[k])
        return at_w


class SAMSteps:
    """Client mixin, listed before the client base: each minibatch's gradient is the one SAM takes
    at radius ``rho`` (from the message). The component is ``self.sam``; a client may replace it with
    one of its own direction (FedSMOO's corrected S)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sam = SAM()

    def compute_gradient(self, x, y):
        return self.sam.gradient(self.model, lambda: self.loss(x, y), self.setting("rho"))
