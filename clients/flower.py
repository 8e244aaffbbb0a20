"""Flower's own strategies (``strategy = "flwr:<Name>"``, ``strategies/flower.py``) with the fedapp
client each drives (FedAvg's, FedProx's). Their run-config keys, under the prefix ``flwr-<name>``,
are the server's: ``strategies/flower.py`` reads them from each constructor.
"""

from __future__ import annotations

from clients.fedavg import FedAvgClient
from clients.fedprox import FedProxClient
from clients.keys import Settings

#: Flower's strategies fedapp's clients can take part in, with the fedapp client each needs
FLOWER_STRATEGIES = {"FedAvg": FedAvgClient, "FedProx": FedProxClient, "FedAdam": FedAvgClient,
                     "FedYogi": FedAvgClient, "FedAdagrad": FedAvgClient, "FedAvgM": FedAvgClient,
                     "QFedAvg": FedAvgClient, "FedMedian": FedAvgClient, "FedTrimmedAvg": FedAvgClient,
                     "Krum": FedAvgClient, "MultiKrum": FedAvgClient, "Bulyan": FedAvgClient}

#: each flwr:<Name>'s prefix, ``flwr-<name>``: the clients read no key of their own (the constructor
#: arguments' keys are the server's, in strategies/flower.py)
ALGORITHMS = {f"flwr:{name}": (Settings(f"flwr-{name.lower()}"), client) for name, client in FLOWER_STRATEGIES.items()}
