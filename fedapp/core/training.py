"""Evaluation shared by clients (local test split) and the server (global test set), and the local
optimisers and learning-rate schedules every client trains with."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from fedapp.core.data import prepare

# Evaluation batch per device type. On CPU a batch of 1024 images spills the caches: ResNet-20,
# LeNet and HCCT's CNN evaluate 2.2x, 2.0x and 1.9x faster (CPU seconds, one thread) at 128.
EVAL_BATCH = {"cpu": 128}
EVAL_BATCH_DEFAULT = 1024
# Device types whose image batches are evaluated channels-last (NHWC). On CPU the convolutions run
# faster on them (one thread, evaluation: LeNet 2.5x, HCCT's CNN 1.7x, ResNet-20 1.35x, ResNet-18-GN
# 1.0-1.2x; docs/performance.md, change 28); the logits differ from NCHW's in float rounding (about 1e-8).
CHANNELS_LAST = {"cpu"}


def step_lr(schedule: str, lr: float, t: int) -> float:
    """The learning rate of a client's local iteration ``t`` (0-based, counted over all its rounds):
    ``constant`` the round's ``lr``; ``fedals-inverse`` lr / (t / 100 + 10) (FedALS, Appendix E.2:
    eta / (t/100 + 10); the authors' ``learning_rate`` with cte = [100, 10])."""
    return lr if schedule == "constant" else lr / (t / 100 + 10)


class AuthorsAdamW(torch.optim.Optimizer):
    """AdamW as ``transformers.AdamW`` (removed in transformers 5) computes it, which the FedALS
    authors' code trains OPT with: eps is added to sqrt(v) before the bias correction, and the
    decoupled weight decay is applied after the step, from the updated weights:

        p <- p - lr sqrt(1 - beta2^k) / (1 - beta1^k) m / (sqrt(v) + eps);   p <- p - lr wd p

    ``torch.optim.AdamW`` (``optimizer='adamw'``) divides by sqrt(v / (1 - beta2^k)) + eps and decays
    first; the two agree when eps is small against sqrt(v)."""

    def __init__(self, params, lr, betas, eps, weight_decay):
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            (beta1, beta2), lr = group["betas"], group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=torch.zeros(()), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                k = float(state["step"])
                state["exp_avg"].mul_(beta1).add_(p.grad, alpha=1.0 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(p.grad, p.grad, value=1.0 - beta2)
                denom = state["exp_avg_sq"].sqrt().add_(group["eps"])
                p.addcdiv_(state["exp_avg"], denom, value=-lr * (1.0 - beta2 ** k) ** 0.5 / (1.0 - beta1 ** k))
                if group["weight_decay"] > 0.0:
                    p.add_(p, alpha=-lr * group["weight_decay"])


def make_optimizer(params, settings: dict, lr: float) -> torch.optim.Optimizer:
    """The local optimiser the run config names (``optimizer``), with its settings from the message
    config: SGD with ``momentum`` and ``weight-decay``; AdamW (torch's, or the authors' variant) with
    betas (``adam-beta1``, ``adam-beta2``), ``adam-eps`` and decoupled ``weight-decay``."""
    name = settings["optimizer"]
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=settings["momentum"], weight_decay=settings["weight-decay"])
    kind = torch.optim.AdamW if name == "adamw" else AuthorsAdamW
    return kind(params, lr=lr, betas=(settings["adam-beta1"], settings["adam-beta2"]), eps=settings["adam-eps"],
                weight_decay=settings["weight-decay"])


def task_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The training loss of one batch: cross-entropy of the logits against the labels, or a causal
    language model's own next-token loss (``causal_lm``, fedapp/core/llm.py)."""
    if getattr(model, "causal_lm", False):
        return model.lm_loss(x)
    return F.cross_entropy(model(x), y)


@torch.no_grad()
def evaluate_lm(model: torch.nn.Module, x: torch.Tensor, device: torch.device | str) -> dict[str, float]:
    """A causal language model on token ids, as the FedALS authors measure its test loss: the mean over
    batches of 32 (``fedapp.core.llm.EVAL_BATCH``) of each batch's mean next-token loss; ``accuracy`` is the
    share of next tokens predicted right (top-1), over all of them."""
    from fedapp.core.llm import EVAL_BATCH

    model.eval()
    losses, correct, tokens = [], 0, 0
    for i in range(0, len(x), EVAL_BATCH):
        loss, right, count = model.lm_scores(x[i:i + EVAL_BATCH].to(device))
        losses.append(loss.item())
        correct, tokens = correct + int(right), tokens + count
    return {"loss": sum(losses) / max(len(losses), 1), "accuracy": correct / max(tokens, 1), "num-examples": len(x)}


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
    if getattr(model, "causal_lm", False):
        return evaluate_lm(model, x, device)
    model.eval()
    n = len(y)
    batch_size = batch_size or EVAL_BATCH.get(torch.device(device).type, EVAL_BATCH_DEFAULT)
    unmasked = unmasked and classes is not None
    if n == 0:
        empty = {"loss": 0.0, "accuracy": 0.0, "num-examples": 0}
        return {**empty, **({f"unmasked-{k}": v for k, v in empty.items()} if unmasked else {})}
    sums = batch_sums(model, x, y, mean, std, device, batch_size, classes, mask, unmasked)
    loss, correct, raw_loss, raw_correct = sums.tolist()
    metrics = {"loss": loss / n, "accuracy": correct / n, "num-examples": n}
    if unmasked:
        metrics.update({"unmasked-loss": raw_loss / n, "unmasked-accuracy": raw_correct / n,
                        "unmasked-num-examples": n})
    return metrics


def batch_sums(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, mean, std, device, batch_size: int,
               classes: torch.Tensor | None, mask: str, unmasked: bool) -> torch.Tensor:
    """``evaluate``'s sums over the batches, on ``device``: loss, correct, unmasked loss, unmasked correct."""
    mask_on = classes is not None and len(classes) > 0
    keep = None  # bool over the model's classes, built once the number of logits is known
    sums = torch.zeros(4, dtype=torch.float64, device=device)
    nhwc = x.dim() == 4 and torch.device(device).type in CHANNELS_LAST
    for i in range(0, len(y), batch_size):
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
            out, ce, keep = masked(out, yb, ce, classes, keep, mask)
        sums[0] += ce.sum().double()
        sums[1] += (out.argmax(1) == yb).sum().double()
    return sums


def masked(out: torch.Tensor, yb: torch.Tensor, ce: torch.Tensor, classes: torch.Tensor,
           keep: torch.Tensor | None, mask: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch's logits and losses under the label mask (``evaluate``'s ``mask``), and ``keep``, the
    mask over the model's classes (built at the first batch)."""
    if keep is None:
        keep = torch.zeros(out.shape[1], dtype=torch.bool, device=out.device)
        keep[torch.as_tensor(classes, device=out.device).long()] = True
    if mask == "zero":
        out = out * keep
        ce = F.cross_entropy(out, yb, reduction="none")
    else:  # an absent label keeps the unmasked loss (the masked one is infinite)
        out = out.masked_fill(~keep, float("-inf"))
        ce = torch.where(keep[yb], F.cross_entropy(out, yb, reduction="none"), ce)
    return out, ce, keep
