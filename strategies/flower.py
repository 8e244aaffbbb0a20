"""Flower's own strategies by name: ``strategy = "flwr:<Name>"`` drives fedapp's clients.

Each round fedapp does what is the same for every strategy (discovery, seeded sampling, the
clients' settings in every message, the exchange and its checks, results files, checkpoints,
metrics) and Flower's strategy does the rest, as Flower 1.42 ships it: its ``configure_train``
adds its own config entries (FedProx's ``proximal-mu``) and remembers the round's model (the
FedOpt family, FedAvgM, QFedAvg), and its ``aggregate_train`` computes the new global model from
the replies. No arithmetic of theirs is repeated here.

A Flower strategy's constructor arguments that shape its update are run-config keys under the
prefix ``flwr-<name>`` (``flwr-fedyogi.eta``, ``flwr-krum.num-malicious-nodes``: declared in
``constructor_keys``); sampling and reply counts are fedapp's common keys (``fraction-train``,
``min-train-nodes``).
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Iterable
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType
from flwr.serverapp import Grid
from flwr.serverapp import strategy as flower_strategies

from clients.flower import ALGORITHMS as DECLARED  # the prefix of each flwr:<Name>
from clients.flower import FLOWER_STRATEGIES
from fedapp.core.config import Key
from fedapp.core.records import Tensors, from_record, make_content, to_record
from fedapp.server.replies import Reply
from strategies.base import FedStrategy
from strategies.settings import LR_DECAY, declare

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


def constructor_keys(cls: type) -> tuple[Key, ...]:
    """The run-config keys of a Flower strategy's own numeric constructor arguments."""
    docs, keys = _param_docs(cls), []
    for p in inspect.signature(cls.__init__).parameters.values():
        if p.name in {*FEDAPP_ARGS, *FROM_RUN_CONFIG} or type(p.default) not in (int, float):
            continue
        keys.append(Key(p.name.replace("_", "-"), type(p.default), p.default,
                        f"Flower's {cls.__name__}({p.name}): {docs.get(p.name, '')}".rstrip(": "), low=0.0))
    return tuple(keys)


def flower_replies(replies: list[Reply], node_ids: dict[int, int]) -> list[Message]:
    """Valid replies as Flower's ``aggregate_train`` takes them: each one's ``arrays`` and its
    metrics (``num-examples``, and ``train-loss`` where the client reported one)."""
    return [Message(make_content({"arrays": r.payload["arrays"]},
                                 metrics={k: v for k, v in r.metrics.items() if k in ("num-examples", "train-loss")}),
                    dst_node_id=node_ids[r.pid], message_type=MessageType.TRAIN)
            for r in replies]


def as_tensors(arrays: ArrayRecord, like: Tensors) -> Tensors:
    """A Flower ``ArrayRecord`` as tensors of the dtypes of ``like`` (Flower computes in NumPy)."""
    return {k: v.to(like[k].dtype) for k, v in from_record(arrays).items()}


class _Sampled(Grid):
    """The nodes fedapp sampled, as the Grid a Flower strategy's ``configure_train`` samples from.
    It only lists them: the messages Flower builds are read for their config, never sent."""

    def __init__(self, node_ids: list[int]):
        self.node_ids = node_ids

    def get_node_ids(self) -> Iterable[int]:
        return list(self.node_ids)

    def _unused(self, *args, **kwargs):
        raise RuntimeError("a Flower strategy driven by fedapp sends nothing itself")

    run = set_run = create_message = push_messages = pull_messages = send_and_receive = _unused


class FlowerStrategy(FedStrategy):
    """Base of the ``flwr:<Name>`` strategies: ``flower_class`` built from the run config."""

    #: Flower's strategy class this one drives
    flower_class: type = flower_strategies.FedAvg
    checkpoint_attrs = ("flower_state",)
    robust_refusal = ("a Flower strategy aggregates as Flower does it; flwr:FedMedian, flwr:FedTrimmedAvg, flwr:Krum, "
                      "flwr:MultiKrum and flwr:Bulyan are Flower's robust ones")

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        own = {k.name.replace("-", "_"): cfg.algo(k.name) for k in self.config_keys if k is not LR_DECAY}
        params = inspect.signature(self.flower_class.__init__).parameters
        self.flower = self.flower_class(**own, **{k: v for k, v in FEDAPP_ARGS.items() if k in params},
                                        **{k: cfg[key] for k, key in FROM_RUN_CONFIG.items() if k in params})
        self.flower_config: dict[str, Any] = {}  # what Flower's configure_train adds to this round's config

    @property
    def flower_state(self) -> dict[str, Any]:
        """What Flower's strategy keeps between rounds (the round's model, FedOpt's moments,
        FedAvgM's momentum): every attribute but its constructor's arguments. Checkpoints carry it."""
        arguments = inspect.signature(self.flower_class.__init__).parameters
        return {k: v for k, v in vars(self.flower).items() if k not in arguments}

    @flower_state.setter
    def flower_state(self, state: dict[str, Any]) -> None:
        vars(self.flower).update(state)

    def begin(self, phase, server_round, grid):
        """Before training: Flower's ``configure_train`` on the global model, for its config and what it
        remembers (its log of sampling the one node it is shown is left out: fedapp samples)."""
        if phase != "train":
            return
        logger = logging.getLogger("flwr")
        level = logger.level
        logger.setLevel(logging.WARNING)
        try:
            msgs = list(self.flower.configure_train(server_round, to_record(self.global_state), ConfigRecord(),
                                                    _Sampled([c.node_id for c in self.clients.values()][:1])))
        finally:
            logger.setLevel(level)
        self.flower_config = {k: v for k, v in msgs[0].content["config"].items() if k != "server-round"}

    def client_config(self, phase, pid, server_round):
        config = super().client_config(phase, pid, server_round)
        return {**config, **self.flower_config} if phase == "train" else config

    def aggregate(self, server_round, replies):
        node_ids = {pid: c.node_id for pid, c in self.clients.items()}
        arrays, _ = self.flower.aggregate_train(server_round, flower_replies(replies, node_ids))
        if arrays is not None:
            self.global_state = as_tensors(arrays, self.global_state)


def _strategy(name: str, client: type) -> type[FlowerStrategy]:
    flower_class = getattr(flower_strategies, name)
    config_prefix, config_keys, client_keys = declare(DECLARED[f"flwr:{name}"][0], *constructor_keys(flower_class),
                                                      LR_DECAY)
    doc = (f"Flower's own {name} (``flwr.serverapp.strategy.{name}``) driving fedapp's {client.__name__}.\n\n"
           f"    {(flower_class.__doc__ or '').strip().splitlines()[0]}\n")
    return type(f"Flwr{name}", (FlowerStrategy,), {
        "__doc__": doc, "__module__": __name__, "__qualname__": f"Flwr{name}", "flower_class": flower_class,
        "config_prefix": config_prefix, "config_keys": config_keys, "client_keys": client_keys})


ALGORITHMS = {}
for _name, _client in FLOWER_STRATEGIES.items():
    globals()[f"Flwr{_name}"] = _cls = _strategy(_name, _client)  # module attributes: checkpoints pickle by name
    ALGORITHMS[f"flwr:{_name}"] = _cls
