"""Local: every client trains alone (PeFLL's Table 1 baseline)."""

from clients.local import LOCAL
from strategies.base import FedStrategy
from strategies.settings import declare


class Local(FedStrategy):
    """Local learning: w_i^{t+1} = w_i^{t,K}, K local SGD steps on client i's own data; no
    model is exchanged. Nothing is shared, so a new client is no different from a seen one:
    every client, new ones included, is in the training pool and trains alone when sampled.
    """

    config_prefix, config_keys, client_keys = declare(LOCAL)
    global_model = False
    robust_refusal = "every model stays on its client, so the server combines no updates"

    def train_pool(self) -> list[int]:
        """Every client trains, new ones included (``fedapp.server.hooks.OwnHooks``)."""
        return sorted(self.clients)

    def broadcast_payload(self, phase, server_round):
        return {}  # nothing is shared, nor evaluated but on the client's own model

    def reply_spec(self, pid, server_round):
        return {}

    def aggregate(self, server_round, replies) -> None:
        """Nothing to aggregate: each model stays on its client."""

    def central_state(self) -> None:
        return None


ALGORITHMS = {"local": Local}
