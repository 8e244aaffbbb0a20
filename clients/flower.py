"""The run-config keys of Flower's own strategies (``strategy = "flwr:<Name>"``, ``strategies/flower.py``).

A Flower strategy's constructor arguments that shape its update are run-config keys under the
prefix ``flwr-<name>`` (``flwr-fedyogi.eta``, ``flwr-krum.num-malicious-nodes``), read from its
signature and docstring; fedapp's own clients take part (FedAvg's, FedProx's). ``import flwr``
already loads ``flwr.serverapp.strategy``, so a ClientApp reads these keys at no import cost.
"""

from __future__ import annotations

import inspect
import re

from flwr.serverapp import strategy as flower_strategies

from clients.fedavg import FedAvgClient
from clients.fedprox import FedProxClient
from clients.keys import LR_DECAY, Settings
from fedapp.core.config import Key

#: Flower's strategies fedapp's clients can take part in, with the fedapp client each needs
FLOWER_STRATEGIES = {"FedAvg": FedAvgClient, "FedProx": FedProxClient, "FedAdam": FedAvgClient,
                     "FedYogi": FedAvgClient, "FedAdagrad": FedAvgClient, "FedAvgM": FedAvgClient,
                     "QFedAvg": FedAvgClient, "FedMedian": FedAvgClient, "FedTrimmedAvg": FedAvgClient,
                     "Krum": FedAvgClient, "MultiKrum": FedAvgClient, "Bulyan": FedAvgClient}

#: constructor arguments fedapp sets itself: sampling and reply counts are fedapp's (its driver samples
#: with the run's seed), the record names are fedapp's clients', QFedAvg reads fedapp's training loss
FEDAPP_ARGS = {"fraction_train": 1.0, "fraction_evaluate": 1.0, "min_train_nodes": 1, "min_evaluate_nodes": 1,
               "min_available_nodes": 1, "weighted_by_key": "num-examples", "arrayrecord_key": "arrays",
               "configrecord_key": "config", "train_loss_key": "train-loss"}
#: constructor arguments that are fedapp run-config keys: QFedAvg's clients' learning rate is ``lr``
FROM_RUN_CONFIG = {"client_learning_rate": "lr"}


def _param_docs(cls: type) -> dict[str, str]:
    """Each constructor parameter's first sentence in the NumPy-style docstring of ``cls``."""
    docs, name = {}, None
    for line in (cls.__doc__ or "").splitlines():
        if m := re.match(r"^    (\w+) : ", line):
            name = m.group(1)
            docs[name] = ""
        elif name and line.startswith("        "):
            docs[name] = (docs[name] + " " + line.strip()).strip()
        else:
            name = None
    return {k: v.split(". ")[0].rstrip(".") + "." for k, v in docs.items()}


def flower_keys(cls: type) -> tuple[Key, ...]:
    """The run-config keys of a Flower strategy's own numeric constructor arguments."""
    docs, keys = _param_docs(cls), []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in {*FEDAPP_ARGS, *FROM_RUN_CONFIG} or type(p.default) not in (int, float):
            continue
        keys.append(Key(p.name.replace("_", "-"), type(p.default), p.default,
                        f"Flower's {cls.__name__}({p.name}): {docs.get(p.name, '')}".rstrip(": "), low=0.0))
    return tuple(keys)


ALGORITHMS = {f"flwr:{name}": (Settings(f"flwr-{name.lower()}", (*flower_keys(getattr(flower_strategies, name)), LR_DECAY)),
                               client)
              for name, client in FLOWER_STRATEGIES.items()}
