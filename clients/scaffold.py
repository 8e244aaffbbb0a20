"""SCAFFOLD client: local steps corrected by control variates, option II update of c_i."""

from __future__ import annotations

import torch

from clients.base import FedClient
from fedapp.records import Payload, Tensors


def option_two(c_i: Tensors, c: Tensors, x: Tensors, y: Tensors, steps: int, lr: float) -> Tensors:
    """SCAFFOLD option II: c_i+ = c_i - c + (x - y_i) / (K * lr), key by key."""
    return {k: c_i[k] - c[k] + (x[k] - y[k]) / (steps * lr) for k in c}


class ScaffoldClient(FedClient):
    """Karimireddy et al., "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning" (ICML 2020).

    Each local step uses g(y_i) - c_i + c; afterwards c_i is refreshed by option II and
    the client replies with y_i and the change Delta c_i = c_i+ - c_i. ``c_i`` (zeros
    at first) persists in ``state["control"]``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.anchor: Tensors = {}  #: x, the received model
        self.control: Tensors = {}  #: c
        self.client_control: Tensors = {}  #: c_i
        self.correction: Tensors = {}  #: c - c_i, added to every step's gradient
        self.control_delta: Tensors = {}  #: Delta c_i, sent back

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.anchor = self.param_tensors()
        self.control = {k: v.to(self.device) for k, v in payload["control"].items()}
        saved = self.state.get("control")
        self.client_control = ({k: v.to(self.device) for k, v in saved.items()} if saved
                               else {k: torch.zeros_like(v) for k, v in self.control.items()})
        self.correction = {k: self.control[k] - self.client_control[k] for k in self.control}

    def correct_gradient(self) -> None:
        for name, p in self.params.items():
            p.grad.add_(self.correction[name])

    def update_control(self, lr: float) -> Tensors:
        """New c_i from this round's local training (option II); returns it."""
        return option_two(self.client_control, self.control, self.anchor, self.param_tensors(), self.steps, lr)

    def end_fit(self, payload: Payload, config: dict) -> None:
        new = self.update_control(float(config["lr"]))
        self.control_delta = {k: (new[k] - self.client_control[k]).cpu() for k in new}
        self.state["control"] = {k: v.cpu() for k, v in new.items()}

    def reply(self, payload: Payload, config: dict) -> Payload:
        return {"arrays": self.model_tensors(), "control-delta": self.control_delta}
