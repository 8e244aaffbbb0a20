"""FedAvg client: the shared SGD loop with no algorithm terms."""

from clients.base import FedClient
from clients.keys import LR_DECAY, Settings
from fedapp.core.config import Key


class FedAvgClient(FedClient):
    """K local SGD steps from the received global model; replies with the local model."""


#: fedadam's run-config keys (``fedadam.<key>``)
FEDADAM = Settings(
    "fedadam",
    keys=(
        Key("eta", float, 0.01, "Server learning rate eta.", low=0.0, low_open=True),
        Key("beta-1", float, 0.9, "First-moment decay beta_1.", low=0.0, high=1.0),
        Key("beta-2", float, 0.99, "Second-moment decay beta_2.", low=0.0, high=1.0),
        Key("tau", float, 1e-3, "Adaptivity tau.", low=0.0, low_open=True),
        LR_DECAY,
    ),
)
#: fedavg's run-config keys (``fedavg.<key>``)
FEDAVG = Settings("fedavg", keys=(LR_DECAY,))

ALGORITHMS = {"fedadam": (FEDADAM, FedAvgClient), "fedavg": (FEDAVG, FedAvgClient)}
