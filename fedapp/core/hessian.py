"""The curvature of a model's loss at its weights, from Hessian-vector products (double backward): the top
eigenvalue by power iteration and the trace by Hutchinson's estimator with Rademacher probes, the two
flatness measures of FedSMOO's Table 2 (as PyHessian, Yao et al. 2020, measures them).

For a loss L(w) on data split into batches B_j (|B_j| examples of N), the Hessian-vector product is

    H v = sum_j (|B_j| / N) d/dw (grad L_j(w) . v)

so the batches add up to the Hessian of the mean loss over all N examples; no Hessian is formed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from fedapp.core.training import task_loss

Batches = Sequence[tuple[torch.Tensor, torch.Tensor]]
Loss = Callable[[torch.nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]


def hvp(model: torch.nn.Module, batches: Batches, v: list[torch.Tensor], loss: Loss = task_loss) -> list[torch.Tensor]:
    """H v, H the Hessian of the mean of ``loss`` over the examples of ``batches``, w.r.t. the model's
    trainable parameters (``v``: one tensor per parameter, in ``model.parameters()`` order)."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = sum(len(y) for _, y in batches)
    out = [torch.zeros_like(p) for p in params]
    for x, y in batches:
        grads = torch.autograd.grad(loss(model, x, y) * (len(y) / total), params, create_graph=True)
        for o, h in zip(out, torch.autograd.grad(grads, params, grad_outputs=v), strict=True):
            o += h
    return out


def _dot(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return float(sum((x.double() * y.double()).sum() for x, y in zip(a, b, strict=True)))


def top_eigenvalue(model: torch.nn.Module, batches: Batches, *, iters: int = 20, tol: float = 1e-3, seed: int = 0,
                   loss: Loss = task_loss) -> float:
    """The Hessian's eigenvalue of largest magnitude by power iteration from a Gaussian start (seeded):
    the Rayleigh quotient v.Hv, stopped when it changes by less than ``tol`` (relative) or after ``iters``."""
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    v = [torch.randn(p.shape, generator=gen).to(p) for p in params]
    eig = None
    for _ in range(iters):
        norm = _dot(v, v) ** 0.5
        v = [x / norm for x in v]
        hv = hvp(model, batches, v, loss)
        new = _dot(v, hv)
        if eig is not None and abs(new - eig) <= tol * (abs(eig) + 1e-12):
            return new
        eig, v = new, hv
    return eig


def trace(model: torch.nn.Module, batches: Batches, *, probes: int = 20, seed: int = 0,
          loss: Loss = task_loss) -> float:
    """Hutchinson's estimate of the Hessian's trace: the mean of z.Hz over ``probes`` Rademacher vectors z
    (entries +-1, seeded); unbiased, E[z.Hz] = tr H."""
    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    total = 0.0
    for _ in range(probes):
        z = [(torch.randint(0, 2, p.shape, generator=gen) * 2 - 1).to(p) for p in params]
        total += _dot(z, hvp(model, batches, z, loss))
    return total / probes
