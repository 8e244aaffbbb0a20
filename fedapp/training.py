"""Evaluation shared by clients (local test split) and the server (global test set)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedapp.data import prepare


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, mean=(), std=(),
             device: torch.device | str = "cpu", batch_size: int = 1024) -> dict[str, float]:
    """Summed-then-averaged loss and accuracy of ``model`` on (x, y)."""
    model.eval()
    n = len(y)
    if n == 0:
        return {"loss": 0.0, "accuracy": 0.0, "num-examples": 0}
    loss = correct = 0.0
    for i in range(0, n, batch_size):
        xb = prepare(x[i:i + batch_size].to(device), mean, std)
        yb = y[i:i + batch_size].to(device)
        out = model(xb)
        loss += F.cross_entropy(out, yb, reduction="sum").item()
        correct += (out.argmax(1) == yb).sum().item()
    return {"loss": loss / n, "accuracy": correct / n, "num-examples": n}
