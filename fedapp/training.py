"""Evaluation shared by clients (local test split) and the server (global test set)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedapp.data import prepare

# Evaluation batch per device type. On CPU a batch of 1024 images spills the caches: ResNet-20,
# LeNet and HCCT's CNN evaluate 2.2x, 2.0x and 1.9x faster (CPU seconds, one thread) at 128.
EVAL_BATCH = {"cpu": 128}
EVAL_BATCH_DEFAULT = 1024
# Device types whose image batches are evaluated channels-last (NHWC). On CPU the convolutions run
# faster on them (one thread, evaluation: LeNet 2.5x, HCCT's CNN 1.7x, ResNet-20 1.35x, ResNet-18-GN
# 1.0-1.2x; docs/performance.md, change 28); the logits differ from NCHW's in float rounding (about 1e-8).
CHANNELS_LAST = {"cpu"}


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, mean=(), std=(),
             device: torch.device | str = "cpu", batch_size: int | None = None,
             classes: torch.Tensor | None = None, mask: str = "exclude",
             unmasked: bool = False) -> dict[str, float]:
    """Summed-then-averaged loss and accuracy of ``model`` on (x, y).

    ``classes`` masks labels (run config ``eval-label-mask``; PeFLL, Table 6). ``mask =
    "exclude"``: the logits of every class not in ``classes`` are set to -inf before the argmax
    and the loss, so the model predicts only these classes and an example's loss is the
    cross-entropy of the softmax over them; an example whose label is not in ``classes`` is always
    counted wrong (the masked argmax cannot reach it) and its loss is the ordinary, unmasked
    cross-entropy (the masked one would be infinite). ``mask = "zero"``: the logits are multiplied
    by the 0/1 presence vector (the PeFLL authors' code), and argmax and loss use those.
    ``None`` or an empty ``classes``: no masking. ``unmasked`` with ``classes`` given: also the unmasked
    ``unmasked-loss``, ``unmasked-accuracy`` and ``unmasked-num-examples``, from the same forward passes.

    The sums stay on ``device`` until the end (one copy to the host, not one per batch); they are
    float64, added in the same order as Python floats would be, so the numbers are the same.
    """
    model.eval()
    n = len(y)
    batch_size = batch_size or EVAL_BATCH.get(torch.device(device).type, EVAL_BATCH_DEFAULT)
    unmasked = unmasked and classes is not None
    if n == 0:
        empty = {"loss": 0.0, "accuracy": 0.0, "num-examples": 0}
        return {**empty, **({f"unmasked-{k}": v for k, v in empty.items()} if unmasked else {})}
    mask_on = classes is not None and len(classes) > 0
    keep = None  # bool over the model's classes, built once the number of logits is known
    # loss, correct, unmasked loss, unmasked correct
    sums = torch.zeros(4, dtype=torch.float64, device=device)
    nhwc = x.dim() == 4 and torch.device(device).type in CHANNELS_LAST
    for i in range(0, n, batch_size):
        xb = x[i:i + batch_size].to(device)
        if nhwc:  # converted while still uint8; prepare keeps the layout
            xb = xb.contiguous(memory_format=torch.channels_last)
        xb = prepare(xb, mean, std)
        yb = y[i:i + batch_size].to(device).long()
        out = model(xb)
        ce = F.cross_entropy(out, yb, reduction="none")
        if unmasked:
            sums[2] += ce.sum().double()
            sums[3] += (out.argmax(1) == yb).sum().double()
        if mask_on:
            if keep is None:
                keep = torch.zeros(out.shape[1], dtype=torch.bool, device=out.device)
                keep[torch.as_tensor(classes, device=out.device).long()] = True
            if mask == "zero":
                out = out * keep
                ce = F.cross_entropy(out, yb, reduction="none")
            else:  # an absent label keeps the unmasked loss (the masked one is infinite)
                out = out.masked_fill(~keep, float("-inf"))
                ce = torch.where(keep[yb], F.cross_entropy(out, yb, reduction="none"), ce)
        sums[0] += ce.sum().double()
        sums[1] += (out.argmax(1) == yb).sum().double()
    loss, correct, raw_loss, raw_correct = sums.tolist()
    metrics = {"loss": loss / n, "accuracy": correct / n, "num-examples": n}
    if unmasked:
        metrics.update({"unmasked-loss": raw_loss / n, "unmasked-accuracy": raw_correct / n,
                        "unmasked-num-examples": n})
    return metrics
