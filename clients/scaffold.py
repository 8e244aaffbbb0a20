"""SCAFFOLD client: local steps corrected by control variates, option II update of c_i."""

from __future__ import annotations

import torch

from clients.base import FedClient, saved_or_zeros
from clients.keys import Settings
from fedapp.core.records import Payload, Tensors


def option_two(c_i: Tensors, c: Tensors, x: Tensors, y: Tensors, steps: int, lr: float) -> Tensors:
    """SCAFFOLD option II: c_i+ = c_i - c + (x - y_i) / (K * lr), key by key."""
    return {k: c_i[k] - c[k] + (x[k] - y[k]) / (steps * lr) for k in c}


class ControlVariates:
    """A client's SCAFFOLD control variates, held by the SCAFFOLD and FedALS + SCAFFOLD clients:
    c (received), c_i (the client's own, zeros at first), x (the model they start from) and each
    local step's gradient correction c - c_i; after training, the new c_i and Delta c_i."""

    def __init__(self):
        self.anchor: Tensors = {}  #: x
        self.c: Tensors = {}
        self.c_i: Tensors = {}
        self.correction: Tensors = {}  #: c - c_i
        self.delta: Tensors = {}  #: Delta c_i = c_i+ - c_i of the refreshed keys, sent back

    def receive(self, c: Tensors, saved: Tensors | None, anchor: Tensors, device: torch.device) -> None:
        """Take c, the client's saved c_i (None: zeros) and the model x local training starts from."""
        self.anchor = anchor
        self.c = {k: v.to(device) for k, v in c.items()}
        self.c_i = saved_or_zeros(saved, self.c, device)
        self.correction = {k: self.c[k] - self.c_i[k] for k in self.c}

    def correct(self, params: dict[str, torch.nn.Parameter]) -> None:
        """g <- g + c - c_i on every parameter's ``.grad``."""
        for name, p in params.items():
            p.grad.add_(self.correction[name])

    def refresh(self, new: Tensors) -> Tensors:
        """c_i+ for the keys of ``new`` (the others keep c_i): sets ``delta``; returns the whole new
        c_i, as the client state keeps it."""
        self.delta = {k: (v - self.c_i[k]).cpu() for k, v in new.items()}
        return {k: v.cpu() for k, v in {**self.c_i, **new}.items()}


class ScaffoldClient(FedClient):
    """Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning" (ICML 2020).

    Each local step uses g(y_i) - c_i + c; afterwards c_i is refreshed by option II and
    the client replies with y_i and the change Delta c_i = c_i+ - c_i. ``c_i`` (zeros
    at first) persists in ``state["control"]``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaffold = ControlVariates()

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.scaffold.receive(payload["control"], self.state.get("control"), self.param_tensors(), self.device)

    def correct_gradient(self) -> None:
        self.scaffold.correct(self.params)

    def after_train(self, payload: Payload, config: dict) -> None:
        s = self.scaffold
        self.state["control"] = s.refresh(option_two(s.c_i, s.c, s.anchor, self.param_tensors(), self.steps,
                                                     float(config["lr"])))

    def reply(self, payload: Payload, config: dict) -> Payload:
        return {"arrays": self.model_tensors(), "control-delta": self.scaffold.delta}


#: scaffold's prefix: its clients read no key of their own (the server's are in strategies/scaffold.py)
SCAFFOLD = Settings("scaffold")

ALGORITHMS = {"scaffold": (SCAFFOLD, ScaffoldClient)}
