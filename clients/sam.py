"""Sharpness-aware minimisation (Foret et al., ICLR 2021): the gradient step a client holds.

One :class:`SAM` serves FedSAM, MoFedSAM, FedSpeed and FedSMOO, each client holding one and
calling it from ``compute_gradient``: they differ only in the direction that is normalised into
the perturbation (``direction``) and in what they do with the perturbation afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from fedapp.core.perturbation import perturbation
from fedapp.core.records import Tensors


class SAM:
    """Each minibatch: g at w, s_hat = rho * d(g)/||d(g)||, then the gradient at w + s_hat.

    The last step's s_hat stays in ``s_hat``. d comes with each call, never stored: a client's own
    method kept here would make client and SAM a reference cycle, and then everything the client
    holds (model, state, received arrays) would wait for Python's cycle collector after each message.
    """

    def __init__(self):
        self.s_hat: Tensors = {}

    def gradient(self, model: torch.nn.Module, loss: Callable[[], torch.Tensor], rho: float,
                 direction: Callable[[Tensors], Tensors] | None = None) -> torch.Tensor:
        """Fill the parameters' ``.grad`` with g(w + s_hat), ``loss()`` being the minibatch loss at
        the current parameters and ``direction`` d (None: plain SAM, g itself); returns the loss at w."""
        params = dict(model.named_parameters())
        at_w = loss()
        at_w.backward()
        grad = {k: p.grad.detach().clone() for k, p in params.items()}
        self.s_hat = perturbation(grad if direction is None else direction(grad), rho)
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
    at radius ``rho`` (from the message). The component is ``self.sam``; a client may override
    ``sam_direction`` with its own direction (FedSMOO's corrected S)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sam = SAM()

    def sam_direction(self, grad: Tensors) -> Tensors:
        """d, the direction SAM normalises into s_hat: g itself."""
        return grad

    def compute_gradient(self, x, y):
        return self.sam.gradient(self.model, lambda: self.loss(x, y), self.setting("rho"), self.sam_direction)
