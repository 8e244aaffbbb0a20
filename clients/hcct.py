"""HCCT clients: plain local SGD from the group's model; HCCT-P keeps its classifier local."""

from clients.base import FedClient
from fedapp.core.models import body_head_keys
from fedapp.core.records import Payload


class HCCTClient(FedClient):
    """K local SGD steps from the received group model; replies with the local model."""


class HCCTPClient(FedClient):
    """Receives and returns the body only; its own head lives in ``self.state["head"]``."""

    def load_model(self, payload: Payload) -> None:
        self.load_tensors(payload["arrays"])
        # before the first round the head is the seeded initial one; with head-start "group" the
        # server sends the head to use (the group's to train, the client's own to evaluate)
        if "head" in self.state and self.setting("head-start") == "own":
            self.load_tensors(self.state["head"])

    def reply(self, payload: Payload, config: dict) -> Payload:
        if self.setting("head-start") == "group":
            return {"arrays": self.model_tensors()}
        body, _ = body_head_keys(self.model)
        tensors = self.model_tensors()
        return {"arrays": {k: tensors[k] for k in body}}

    def end_fit(self, payload: Payload, config: dict) -> None:
        _, head = body_head_keys(self.model)
        tensors = self.model_tensors()
        self.state["head"] = {k: tensors[k] for k in head}
