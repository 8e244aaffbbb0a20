"""FedRep client: a private head on top of the shared body."""

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.models import body_head_keys
from fedapp.core.records import Payload


class FedRepClient(FedClient):
    """Trains its head with the body frozen, then the body with the head frozen; replies with the body.

    The head lives in ``self.state["head"]``. A client without one (a new client, or one not yet
    sampled) fits a fresh head on the frozen body before it is evaluated.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.body_keys, self.head_keys = body_head_keys(self.model)

    def load_model(self, payload: Payload) -> None:
        self.load_tensors(payload["body"])
        if "head" in self.state:
            self.load_tensors(self.state["head"])

    def trainable(self, keys) -> None:
        for name, p in self.model.named_parameters():
            p.requires_grad_(name in keys)

    def train_part(self, keys: list[str], steps: int, lr: float, seed: int) -> dict[str, float]:
        """``steps`` SGD steps on the parameters ``keys``, the others frozen."""
        self.trainable(keys)
        metrics = super().local_sgd(steps, lr, seed)
        self.trainable(self.body_keys + self.head_keys)
        return metrics

    def local_sgd(self, steps: int, lr: float, seed: int) -> dict[str, float]:
        self.train_part(self.head_keys, self.head_steps(), lr, seed)
        return self.train_part(self.body_keys, steps, lr, seed + 1)

    def head_steps(self) -> int:
        """head-epochs full passes over the training split (batches rounded up), else head-steps."""
        epochs = int(self.setting("head-epochs"))
        if epochs:
            return self.epoch_steps(epochs)
        return int(self.setting("head-steps"))

    def after_train(self, payload: Payload, config: dict) -> None:
        self.state["head"] = {k: v for k, v in self.model_tensors().items() if k in self.head_keys}

    def reply(self, payload: Payload, config: dict) -> Payload:
        return {"body": {k: v for k, v in self.model_tensors().items() if k in self.body_keys}}

    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = config
        self.load_model(payload)
        if "head" not in self.state:  # a new client: fit a fresh head on the frozen body
            seed = self.round_seed(int(config["server-round"]))
            self.train_part(self.head_keys, self.head_steps(), float(config["lr"]), seed)
        return {}, self.evaluate_local()


#: fedrep's prefix: its clients read no key of their own (the server sends the head's steps; strategies/fedrep.py)
FEDREP = Settings("fedrep")

ALGORITHMS = {"fedrep": (FEDREP, FedRepClient)}
