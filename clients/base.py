"""Shared client machinery: a NumPyClient-like class with a hookable SGD loop.

A client is built for one message from the run config (its data and model), its data and its
persisted state; ``answer_train`` and ``evaluate`` take a payload (``{record: {name: tensor}}``) and the
message's config dict, so algorithms are testable without Flower. Every setting of local training
and evaluation (batch size, momentum, the algorithm's own such as FedProx's ``proximal-mu``) is
read from that config (``setting``), never from the run config. Algorithms override the
small hooks (``load_model``, ``receive``, ``compute_gradient``, ``correct_gradient``, ``reply``,
``reply_metrics``, ``after_train``) and keep what must outlive the message in ``self.state``, which the
ClientApp commits only after ``answer_train`` returned.
"""

from __future__ import annotations

import torch

from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.data import BatchLoader
from fedapp.core.experiment import ClientData
from fedapp.core.records import Payload, Tensors
from fedapp.core.training import CHANNELS_LAST, evaluate, make_optimizer, step_lr, task_loss


def saved_or_zeros(saved: Tensors | None, like: Tensors, device: torch.device) -> Tensors:
    """Client state kept from an earlier round (``saved``: a dual, control variates) on ``device``,
    or, in the client's first round, zeros shaped as ``like``."""
    if saved:
        return {k: v.to(device) for k, v in saved.items()}
    return {k: torch.zeros_like(v) for k, v in like.items()}


class FedClient:
    """Base client: loads the received model, runs SGD steps, returns the model.

    With the default hooks this is the FedAvg client (McMahan et al., 2017): K local
    SGD steps from the global model, reply with the local model and its example count.
    """

    #: keep SGD momentum buffers in client state across rounds (FedALS does)
    keep_optimizer_state = False

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, data: ClientData,
                 state: Payload | None = None, device: torch.device | str = "cpu"):
        self.cfg = cfg
        self.device = torch.device(device)
        self.model = model.to(self.device)
        self.data = data
        self.state: Payload = {k: dict(v) for k, v in (state or {}).items()}
        self.generator = torch.Generator(device=self.device)
        #: the config of the message being answered, which carries every setting the client reads
        self.config: dict = {}
        self.steps = 0  #: this round's local steps (SCAFFOLD's option II divides by them)

    # ---- helpers -----------------------------------------------------------------
    @property
    def params(self) -> dict[str, torch.nn.Parameter]:
        return dict(self.model.named_parameters())

    def param_tensors(self) -> Tensors:
        """Detached copies of the trainable parameters (duals and control variates live on these)."""
        return {k: v.detach().clone() for k, v in self.params.items()}

    def model_tensors(self) -> Tensors:
        return {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()}

    def load_tensors(self, tensors: Tensors) -> None:
        """Load a full or partial state dict into the model."""
        sd = self.model.state_dict()
        for k, v in tensors.items():
            sd[k].copy_(v)

    def setting(self, key: str):
        """A setting from the message's config (the server's strategy sends every setting its clients
        read); a missing one is an error naming it, never a fallback to the run config."""
        try:
            return self.config[key]
        except KeyError:
            raise ConfigError(f"message config lacks '{key}', which {type(self).__name__} reads: the server's "
                              "strategy sends it (client_settings)") from None

    def loader(self, seed: int) -> BatchLoader:
        self.generator.manual_seed(seed)
        d = self.data
        return BatchLoader(d.train_x, d.train_y, self.setting("batch-size"), device=self.device, mean=d.mean, std=d.std,
                           augment=d.augment, generator=self.generator, recipe=self.setting("augment-recipe"),
                           channels_last=self.cfg.channels_last and self.device.type in CHANNELS_LAST)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return task_loss(self.model, x, y)

    # ---- hooks -------------------------------------------------------------------
    def load_model(self, payload: Payload) -> None:
        """Set the model a payload stands for (training and evaluation): the global model."""
        self.load_tensors(payload["arrays"])

    def receive(self, payload: Payload, config: dict) -> None:
        """Take the round's training payload: the model, plus algorithm state in subclasses."""
        self.load_model(payload)

    def compute_gradient(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Fill ``.grad`` for one minibatch and return the loss (SAM overrides)."""
        loss = self.loss(x, y)
        loss.backward()
        return loss

    def correct_gradient(self) -> None:
        """Add algorithm terms to ``.grad`` before the optimizer step (SCAFFOLD, FedDyn, ...)."""

    def reply(self, payload: Payload, config: dict) -> Payload:
        """What is sent back: by default the full local model."""
        return {"arrays": self.model_tensors()}

    def after_train(self, payload: Payload, config: dict) -> None:
        """Update ``self.state`` after local training (duals, control variates, ...)."""

    def reply_metrics(self) -> dict[str, float]:
        """Metrics of the training reply besides the training loss and the example and step counts
        (FedFA: the received model's training accuracy; IFCA: the models chosen; MaxFL: whether the
        client joined)."""
        return {}

    # ---- training ----------------------------------------------------------------
    def keeps_optimizer(self) -> bool:
        """SGD momentum persists where the algorithm keeps it; AdamW's moments always do (the FedALS
        authors' clients keep one AdamW throughout)."""
        return self.keep_optimizer_state or self.setting("optimizer") != "sgd"

    def make_optimizer(self, lr: float) -> torch.optim.Optimizer:
        """The configured optimizer; where its state persists, the saved buffers become its state as
        they are (no copy: the client owns the state it was given, and the optimizer updates them in
        place), moved only when they sit on another device (AdamW's step counts stay on the CPU)."""
        opt = make_optimizer(self.model.parameters(), self.config, lr)
        if self.keeps_optimizer():  # saved as state["momentum"] or state["adamw.<buffer>"], by parameter
            for key, saved in self.state.items():
                if key == "momentum" or key.startswith("adamw."):
                    buffer = "momentum_buffer" if key == "momentum" else key[len("adamw."):]
                    for name, p in self.model.named_parameters():
                        if name in saved:
                            opt.state[p][buffer] = saved[name].to(self.device if saved[name].dim() else "cpu")
        return opt

    def save_optimizer(self, opt: torch.optim.Optimizer) -> None:
        """Keep the optimizer's buffers in ``self.state`` by reference (the optimizer is dropped after
        the round, so they are not copied; a device's buffers come to the CPU): the ClientApp serialises
        them when it commits the state."""
        if self.keeps_optimizer():
            params = dict(self.model.named_parameters())
            buffers = {b for p in params.values() for b in opt.state.get(p, {})}
            for buffer in buffers:
                self.state["momentum" if buffer == "momentum_buffer" else f"adamw.{buffer}"] = {
                    name: torch.as_tensor(opt.state[p][buffer]).detach().cpu()
                    for name, p in params.items() if buffer in opt.state.get(p, {})}

    def local_sgd(self, steps: int, lr: float, seed: int) -> dict[str, float]:
        """``steps`` SGD steps; returns the mean training loss."""
        self.model.train()
        loader = self.loader(seed)
        opt = self.make_optimizer(lr)
        clip = self.setting("grad-clip")
        schedule = self.setting("lr-schedule")
        done = int(self.state.get("schedule", {}).get("t", 0))  # this client's earlier local iterations
        total = torch.zeros((), device=self.device)
        for k in range(steps):
            for group in opt.param_groups:
                group["lr"] = step_lr(schedule, lr, done + k)
            x, y = loader.next_batch()
            opt.zero_grad(set_to_none=False)
            total += self.compute_gradient(x, y).detach()
            self.correct_gradient()
            if clip:  # the optimizer's weight decay comes after, unclipped (as the simulator)
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
            opt.step()
        self.save_optimizer(opt)
        if schedule != "constant":
            self.state["schedule"] = {"t": torch.tensor(done + steps)}
        return {"train-loss": total.item() / max(steps, 1)}

    def round_seed(self, server_round: int) -> int:
        """The seed of this client's draws in round ``server_round`` (its batches, PeFLL's descriptor
        batch, a new FedRep client's head): distinct per run seed, round and partition id."""
        return (self.cfg.seed * 1_000_003 + server_round) * 10_007 + self.data.pid

    def epoch_steps(self, epochs: int) -> int:
        """``epochs`` full passes over the training split in batches (the last one partial)."""
        return epochs * max(1, -(-len(self.data.train_y) // self.setting("batch-size")))

    def local_steps(self) -> int:
        """local-steps, or local-epochs worth of full batches (at least one)."""
        return int(self.setting("local-steps")) or self.epoch_steps(self.setting("local-epochs"))

    def answer_train(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        """One round of local training. ``config`` carries ``server-round``, ``lr`` and the settings."""
        self.config = config
        self.receive(payload, config)
        steps = self.local_steps()
        seed = self.round_seed(int(config["server-round"]))
        self.steps = steps
        metrics = self.local_sgd(steps, float(config["lr"]), seed)
        self.after_train(payload, config)
        metrics["num-examples"] = len(self.data.train_y)
        metrics["local-steps"] = steps
        return self.reply(payload, config), {**metrics, **self.reply_metrics()}

    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        """Evaluate the received model on the local test split: ``(payload, metrics)``, the payload
        empty unless the evaluation reply carries arrays (FedALS's bodies, PeFLL's descriptors)."""
        self.config = config
        self.load_model(payload)
        return {}, self.evaluate_local()

    # ---- evaluation on the local test split (every client's evaluate ends here) ----------
    def eval_classes(self) -> torch.Tensor | None:
        """The labels predictions are restricted to at evaluation: with ``eval-label-mask`` on,
        the classes present in this client's training split (what the client knows; its test
        split is drawn from the same distribution); otherwise None, no masking."""
        if self.setting("eval-label-mask") == "off":
            return None
        return torch.unique(self.data.train_y)

    def evaluate_local(self) -> dict[str, float]:
        """Loss and accuracy of ``self.model`` on the local test split, label-masked when configured;
        with masking on, also the unmasked ones (``unmasked-*``, from the same model), and with a
        validation split (partition ``pfedhn``) the same metrics on it (``val-*``)."""
        d = self.data
        classes = self.eval_classes()

        def run(x, y, unmasked=False):
            return evaluate(self.model, x, y, mean=d.mean, std=d.std, device=self.device, classes=classes,
                            mask=self.setting("eval-label-mask"), unmasked=unmasked)

        out = run(d.test_x, d.test_y, unmasked=True)
        if d.val_y is not None and len(d.val_y):
            out.update({f"val-{k}": v for k, v in run(d.val_x, d.val_y).items()})
        return out
