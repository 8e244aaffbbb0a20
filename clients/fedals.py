"""FedALS clients: a private body between body averages; the SCAFFOLD variant splits c likewise."""

from __future__ import annotations

import torch

from clients.base import FedClient
from clients.keys import Settings
from clients.scaffold import ControlVariates, option_two
from fedapp.core.config import Key
from fedapp.core.layer_split import split_model
from fedapp.core.records import Payload, Tensors


class FedALSClient(FedClient):
    """FedALS client (Gholami and Seferoglu, Algorithm 1): tau SGD steps on [phi_i, h].

    The body phi_i and the SGD momentum persist in client state; a received body (sent only
    right after a body average) replaces phi_i, the head is received every round. The reply
    holds the head, and the body on body-averaging rounds (``config["sync-body"]``).
    """

    keep_optimizer_state = True

    @property
    def body_keys(self) -> list[str]:
        """The body's state keys, as the message's ``body-layers`` and ``layer-groups`` split the model."""
        return split_model(self.model, self.setting("body-layers"), self.setting("layer-groups"))[0]

    @property
    def head_keys(self) -> list[str]:
        return split_model(self.model, self.setting("body-layers"), self.setting("layer-groups"))[1]

    def make_optimizer(self, lr):
        """SGD with momentum; Nesterov's variant with ``nesterov`` (the paper's Table 4; the authors'
        code uses plain heavy-ball momentum)."""
        opt = super().make_optimizer(lr)
        for group in opt.param_groups:
            group["nesterov"] = self.setting("nesterov")
        return opt

    def part(self, tensors: Tensors, keys: list[str]) -> Tensors:
        return {k: tensors[k] for k in keys}

    def copy_part(self, keys: list[str]) -> Tensors:
        """Detached CPU copies of the model's state entries ``keys`` (one part, not the whole model)."""
        sd = self.model.state_dict()
        return {k: sd[k].detach().cpu().clone() for k in keys}

    def load_model(self, payload: Payload) -> None:
        """A full model as is; else the received body (a fresh average) or this client's own,
        and the received head."""
        if "arrays" in payload:
            self.load_tensors(payload["arrays"])
            return
        self.load_tensors(payload.get("body") or self.state.get("body") or {})
        self.load_tensors(payload.get("head", {}))

    def receive(self, payload: Payload, config: dict) -> None:
        super().receive(payload, config)
        self.state.pop("body", None)  # the model holds it now (one copy during training); after_train keeps the new one

    def after_train(self, payload: Payload, config: dict) -> None:
        self.state["body"] = self.copy_part(self.body_keys)

    def reply(self, payload: Payload, config: dict) -> Payload:
        """The head, and on body rounds the body: the copy ``after_train`` kept (neither changes after)."""
        out = {"head": self.copy_part(self.head_keys)}
        if config.get("sync-body"):
            out["body"] = self.state["body"]
        return out

    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = config
        if config.get("collect-body"):  # the server averages all bodies to evaluate the mean model
            self.load_model({})
            return ({"body": self.copy_part(self.body_keys)},
                    {"num-examples": len(self.data.train_y)})
        return super().evaluate(payload, config)


class FedALSScaffoldClient(FedALSClient):
    """FedALS + SCAFFOLD client (Appendix, Algorithm 4).

    Local steps use g - c_i + c (SCAFFOLD's correction, from the ``ControlVariates`` it holds).
    After each round c_{h,i} is refreshed by option II over the round's tau steps from the
    received head; on body-averaging rounds c_{phi,i} too, over the steps since the last received
    body (alpha tau with full participation). With SGD momentum beta, eta in option II is the
    effective step eta / (1 - beta) (see ``control_lr``). State: c_i (``control``), c_phi
    (``control-body``), that body and the step count since (``body-anchor``, ``body-steps``).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.scaffold = ControlVariates()
        self.body_params: list[str] = []  #: trainable keys of the body (control variates live on these)
        self.head_params: list[str] = []  #: and of the head

    def receive(self, payload: Payload, config: dict) -> None:
        self.load_model(payload)
        self.state.pop("body", None)
        params = set(self.params)
        self.body_params = [k for k in self.body_keys if k in params]
        self.head_params = [k for k in self.head_keys if k in params]
        if "body" in payload:  # a fresh body average: c_phi and the anchor of c_{phi,i} restart here
            self.state["control-body"] = self.part(payload["control"], self.body_params)
            self.state["body-anchor"] = self.part(self.param_tensors(), self.body_params)
            self.state["body-steps"] = {"n": torch.tensor(0)}
        control = {**self.state["control-body"], **payload["control"]}
        self.scaffold.receive(control, self.state.get("control"), self.param_tensors(), self.device)

    def control_lr(self, lr: float) -> float:
        """Step size that turns a displacement into a gradient in option II: with heavy-ball
        momentum beta each step moves about lr / (1 - beta) times the gradient, so the paper's
        1 / (eta tau) would make c about 1 / (1 - beta) times too large (diverged at beta = 0.9)."""
        return lr / (1.0 - self.setting("momentum"))

    # ---- the authors' code (fedals.scaffold-variant = "authors" / "authors-copy") ----------
    # Each local step is the plain (momentum) SGD step followed by a separate momentum-free step
    # x <- x - lr c_i + lr c; when a part is averaged, c_{part,i} <- c_i - c + (x_pre - x) / (lr tau)
    # for both parts (their coefficient uses the head's period), x_pre being the model right after
    # the client's previous synchronisation. Their x_pre = copy.copy(node.x) shares node.x's tensors,
    # so x_pre - x = 0 after a client's first synchronisation ("authors"); "authors-copy" is the same
    # rule with x_pre a real copy.
    def correct_gradient(self) -> None:
        if self.setting("scaffold-variant") == "algorithm4":
            self.scaffold.correct(self.params)

    def make_optimizer(self, lr):
        opt = super().make_optimizer(lr)
        if self.setting("scaffold-variant") != "algorithm4":
            def control_step(optimizer, args, kwargs):
                with torch.no_grad():
                    for name, p in self.params.items():
                        p.add_(self.scaffold.correction[name], alpha=lr)
            opt.register_step_post_hook(control_step)
        return opt

    def after_train(self, payload: Payload, config: dict) -> None:
        variant, s = self.setting("scaffold-variant"), self.scaffold
        super().after_train(payload, config)
        synced = (self.body_params if config.get("sync-body") else []) + self.head_params
        if variant != "algorithm4":
            c_i, c = (self.part(t, synced) for t in (s.c_i, s.c))
            if variant == "authors-copy" or not self.state.get("control"):  # a real x_pre, or the first sync
                new = option_two(c_i, c, self.part(s.anchor, synced), self.part(self.param_tensors(), synced),
                                 self.steps, float(config["lr"]))
            else:
                new = {k: c_i[k] - c[k] for k in synced}
            self.state["control"] = s.refresh(new)
            return
        lr = self.control_lr(float(config["lr"]))
        y = self.param_tensors()
        new = {}  # the parts averaged this round, in the order of the reply (body, head)
        body_steps = int(self.state["body-steps"]["n"]) + self.steps
        if config.get("sync-body"):
            new.update(option_two(*(self.part(t, self.body_params) for t in (s.c_i, s.c, self.state["body-anchor"], y)),
                                  body_steps, lr))
        new.update(option_two(*(self.part(t, self.head_params) for t in (s.c_i, s.c, s.anchor, y)), self.steps, lr))
        self.state["control"] = s.refresh(new)
        self.state["body-steps"] = {"n": torch.tensor(body_steps)}

    def reply(self, payload: Payload, config: dict) -> Payload:
        return {**super().reply(payload, config), "control-delta": self.scaffold.delta}


BODY_LAYERS = Key("body-layers", int, 0, "L: leading layers in the body phi; 0 = the conv layers (all but the last "
                  "layer for a model without convs).", low=0)
LAYER_GROUPS = Key("layer-groups", str, "layers", "What body-layers counts: layers (every Conv/Linear) or authors "
                   "(their ResNet-20 grouping: a shortcut conv joins its block's second conv; 20 layers).",
                   ("layers", "authors"))
NESTEROV = Key("nesterov", bool, False,
               "Nesterov momentum (the paper's Table 4) instead of heavy-ball (the authors' code).")
SCAFFOLD_VARIANT = Key("scaffold-variant", str, "algorithm4",
                       "fedals-scaffold only: algorithm4 (the paper's Algorithm 4), authors (their code as it runs: "
                       "separate momentum-free control step, x_pre shares the model so the control variates freeze "
                       "after a client's first sync) or authors-copy (the same with a real copy).",
                       ("algorithm4", "authors", "authors-copy"))
#: the run-config keys fedals's clients read (``fedals.<key>``); fedals-scaffold's also read the scaffold variant
FEDALS = Settings("fedals", keys=(BODY_LAYERS, LAYER_GROUPS, NESTEROV))
FEDALS_SCAFFOLD = Settings("fedals", keys=(*FEDALS.keys, SCAFFOLD_VARIANT))

ALGORITHMS = {"fedals": (FEDALS, FedALSClient), "fedals-scaffold": (FEDALS_SCAFFOLD, FedALSScaffoldClient)}
