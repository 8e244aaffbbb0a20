"""Local client: trains its own model, which never leaves it."""

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.records import Payload


class LocalClient(FedClient):
    """Keeps its model in ``self.state["model"]``; sends nothing back but its metrics."""

    def load_model(self, payload: Payload) -> None:
        if "model" in self.state:  # else: the seeded initial model, as every method starts from
            self.load_tensors(self.state["model"])

    def after_train(self, payload: Payload, config: dict) -> None:
        self.state["model"] = self.model_tensors()

    def reply(self, payload: Payload, config: dict) -> Payload:
        return {}


#: local's prefix: no key of its own
LOCAL = Settings("local")

ALGORITHMS = {"local": (LOCAL, LocalClient)}
