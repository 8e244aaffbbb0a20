"""FedAvg client: the shared SGD loop with no algorithm terms."""

from clients.base import FedClient
from clients.keys import Settings


class FedAvgClient(FedClient):
    """K local SGD steps from the received global model; replies with the local model."""


#: fedadam's and fedavg's prefixes: their clients read no key of their own (the server's are in strategies/)
FEDADAM = Settings("fedadam")
FEDAVG = Settings("fedavg")

ALGORITHMS = {"fedadam": (FEDADAM, FedAvgClient), "fedavg": (FEDAVG, FedAvgClient)}
