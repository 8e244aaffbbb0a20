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


#: hcct's run-config keys (``hcct.<key>``)
HCCT = Settings(
    "hcct",
    keys=(
        Key("alpha", float, 1000.0, "Weight of the data-size term -alpha / D_G of the client utility.", low=0.0),
        Key("alpha-per-client", bool, False, "alpha_i = D_i, the client's own data size (the authors' public code's "
            "alpha = -1): U_i = -D_i / D_G + cos, a data term in [-1, 0) that needs no tuning; 'alpha' is then unused."),
        Key("groups", str, "", "Fixed collaboration pattern by partition id, e.g. '0,1;2' ('' learns it)."),
        Key("first-round", str, "singletons", "Groups of round 1, before any update exists: 'singletons' "
            "(Algorithm 1, line 4) or 'global', all clients in one group (the authors' code).",
            ("singletons", "global")),
        Key("initial-clients", int, 0, "Clients (partition ids 0..n-1) that train from round 1; 0: all.", low=0),
        Key("new-clients", int, 0, "New clients (the next partition ids) that arrive every 'arrival-every' "
            "rounds (Section 7.3, Fig. 3); they train alone from the initial model first.", low=0),
        Key("arrival-every", int, 10, "Rounds between arrivals of 'new-clients'.", low=1),
        Key("newcomer", str, "next-round", "A client without an update: trains alone from the initial model "
            "and is placed the round after ('next-round'), or, as the authors' code does, first trains once "
            "from the initial model at the initial lr and is placed by that update in the same round "
            "('same-round').", ("next-round", "same-round")),
    ),
)
#: hcct-e's run-config keys: HCCT's and the layer score (``hcct.<key>``)
HCCT_E = HCCT._replace(
    keys=HCCT.keys + (
        Key("layer-score", str, "dispersion", "HCCT-E layer choice: dispersion (authors' code: "
            "Var/mean of the pooled pseudo-gradients per tensor, summed over the layer) or scale-free "
            "(sum_j Var_i / sum_j mean_i^2).", ("dispersion", "scale-free")),
    ),
)
#: hcct-p's run-config keys: HCCT's and the head start (``hcct.<key>``)
HCCT_P = HCCT._replace(
    keys=HCCT.keys + (
        Key("head-start", str, "own", "HCCT-P local training starts from the client's own head ('own') or "
            "from the group's average of its members' heads ('group', the authors' code).", ("own", "group")),
    ),
    client_keys=("head-start",),
)
#: independent's run-config keys (``independent.<key>``)
INDEPENDENT = Settings("independent")

ALGORITHMS = {
    "hcct": (HCCT, HCCTClient),
    "hcct-e": (HCCT_E, HCCTClient),
    "hcct-p": (HCCT_P, HCCTPClient),
    "independent": (INDEPENDENT, HCCTClient),
}
