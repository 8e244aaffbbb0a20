"""FedRep: a shared body averaged on the server, a private head on every client."""

from typing import Any

from clients.fedrep import FEDREP
from fedapp.core.config import Key
from fedapp.core.experiment import round_lr
from fedapp.core.layer_split import check_head
from fedapp.core.models import body_head_keys
from fedapp.server.replies import spec_of
from strategies.base import FedStrategy
from strategies.settings import declare


class FedRep(FedStrategy):
    """FedRep (Collins, Hassani, Mokhtari, Shakkottai, "Exploiting Shared Representations for
    Personalized Federated Learning", ICML 2021).

    Client i: h_i <- ``head-steps`` SGD steps on the head with the body phi_t frozen, then
    phi_i <- K steps on the body with h_i frozen; server: phi_{t+1} = sum_i n_i phi_i / sum_i n_i.
    The head is the last layer. A new client fits a fresh head on the frozen body before it is evaluated.
    """

    config_prefix, config_keys, client_keys = declare(
        FEDREP,
        Key("head-steps", int, 50, "SGD steps on the private head (body frozen) per round.", low=1),
        Key("head-epochs", int, 0, "Epochs on the private head per round instead of head-steps (PeFLL's runs: 5); "
            "0: head-steps.", low=0),
        Key("new-head-epochs", int, 0, "Epochs a client without a head trains a fresh one before evaluation "
            "(PeFLL's runs: 20); 0: as head-epochs / head-steps.", low=0),
    )
    global_model = False  # a shared body; every head stays on its client

    @classmethod
    def check_model(cls, cfg, model):
        check_head(cfg, model)

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.body_keys, _ = body_head_keys(model)

    def body_state(self):
        return {k: self.global_state[k] for k in self.body_keys}

    def broadcast_payload(self, phase, server_round):
        return {"body": self.body_state()}  # training and evaluation: each client has its own head

    def head_config(self, new: bool = False) -> dict[str, int]:
        epochs = self.cfg.algo("new-head-epochs") if new else 0
        return {"head-steps": self.cfg.algo("head-steps"), "head-epochs": epochs or self.cfg.algo("head-epochs")}

    def client_config(self, phase, pid, server_round) -> dict[str, Any]:
        if phase == "train":
            return {**super().client_config(phase, pid, server_round), **self.head_config()}
        # a new client fits its head at evaluation with the run's lr and head-steps
        return {**super().client_config(phase, pid, server_round), "lr": round_lr(self.cfg, server_round),
                **self.head_config(new=True)}

    def reply_spec(self, pid, server_round):
        return spec_of({"body": self.body_state()})

    def aggregate(self, server_round, replies) -> None:
        body = self.combine([r.payload["body"] for r in replies], [r.num_examples for r in replies])
        self.global_state = {**self.global_state, **body}

    def central_state(self) -> None:
        return None  # the body alone is no classifier

    def model_state(self):
        """The shared body (load it with ``strict=False``: every head stays on its client)."""
        return self.body_state()


ALGORITHMS = {"fedrep": FedRep}
