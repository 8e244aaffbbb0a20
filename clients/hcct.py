"""HCCT clients: plain local SGD from the group's model; HCCT-P keeps its classifier local."""

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.config import Key
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

    def after_train(self, payload: Payload, config: dict) -> None:
        _, head = body_head_keys(self.model)
        tensors = self.model_tensors()
        self.state["head"] = {k: tensors[k] for k in head}


#: hcct's, hcct-e's and hcct-p's prefix; hcct-p's clients read the head start (the server's keys are in
#: strategies/hcct.py)
HCCT = Settings("hcct")
HCCT_P = Settings(
    "hcct",
    keys=(
        Key("head-start", str, "own", "HCCT-P local training starts from the client's own head ('own') or "
            "from the group's average of its members' heads ('group', the authors' code).", ("own", "group")),
    ),
)
#: independent's prefix: no key of its own
INDEPENDENT = Settings("independent")

ALGORITHMS = {
    "hcct": (HCCT, HCCTClient),
    "hcct-e": (HCCT, HCCTClient),
    "hcct-p": (HCCT_P, HCCTPClient),
    "independent": (INDEPENDENT, HCCTClient),
}
