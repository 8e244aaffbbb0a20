"""FedAvg client: the shared SGD loop with no algorithm terms."""

from clients.base import FedClient


class FedAvgClient(FedClient):
    """K local SGD steps from the received global model; replies with the local model."""
