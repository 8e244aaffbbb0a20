"""The sharpness-aware perturbation (Foret et al., ICLR 2021): a step of length rho along a
direction. SAM clients perturb their weights with it; FedSMOO's server forms its global perturbation."""

from __future__ import annotations

import torch

from fedapp.core.records import Tensors

EPS = 1e-12


def global_norm(tensors: Tensors) -> torch.Tensor:
    """l2 norm over all tensors together, as if flattened into one vector."""
    return torch.sqrt(sum((t.double() ** 2).sum() for t in tensors.values())).to(next(iter(tensors.values())).dtype)


def perturbation(direction: Tensors, rho: float) -> Tensors:
    """rho * d / (||d|| + eps): the step of length rho along d (zero when rho = 0)."""
    scale = rho / (global_norm(direction) + EPS)
    return {k: d * scale for k, d in direction.items()}
