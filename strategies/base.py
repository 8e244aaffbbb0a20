"""The base of every fedapp strategy: the algorithm hooks and Flower's Strategy API.

:class:`FedStrategy` is Flower's message-based ``Strategy``: ``configure_train`` /
``aggregate_train`` / ``configure_evaluate`` / ``aggregate_evaluate`` as Flower documents them,
and ``start()`` taking Flower's arguments and returning Flower's ``Result``; each delegates to the
server layer's round (``fedapp.server.rounds.Driver``, held as ``self.driver``: discovery, sampling,
messages, exchange, reply checks; the loop of rounds is ``fedapp.server.loop``). An algorithm
subclass overrides only the hooks that carry its update rule: ``broadcast_payload`` /
``shared_payloads`` / ``client_payload`` / ``client_config`` (each for the "train" or "evaluate"
phase), ``begin``, ``reply_spec``, ``aggregate`` and ``central_state``; a hook one algorithm needs is
its own method (``fedapp.server.hooks.OwnHooks``). An algorithm whose round is several round trips
defines its own ``train_round`` (``OwnHooks``), built from ``driver.round_trip``.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from logging import INFO
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedapp.core.aggregation import coordinate_wise, krum_select, weighted_mean
from fedapp.core.compat import trim_mean
from fedapp.core.config import RunConfig
from fedapp.core.data import Dataset
from fedapp.core.experiment import round_lr, unseen_clients
from fedapp.core.models import module_of
from fedapp.core.records import Payload, RecordStore, Tensors, from_record, to_record
from fedapp.runtime import registry
from fedapp.server import loop
from fedapp.server.discovery import ClientInfo
from fedapp.server.hooks import own_hook
from fedapp.server.replies import Reply, Spec, spec_of
from fedapp.server.rounds import Driver
from strategies import settings as _settings
from strategies.privacy import private_round
from strategies.settings import CLIENT_SETTINGS, Settings


class FedStrategy(Strategy, metaclass=Settings):
    """FedAvg-shaped base: every hook defaults to Federated Averaging.

    McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017). Each round a seeded sample S_t of the
    training clients receives the global model w_t, runs local SGD, and returns
    w_i; then w_{t+1} = sum_{i in S_t} n_i w_i / sum_{i in S_t} n_i.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _settings.document(cls)

    #: run-config prefix and keys of the algorithm's own settings (``prefix.key``); a registered strategy
    #: takes them and its ``client_keys`` from its declaration in clients/ (``Settings``), as the ClientApp does
    config_prefix: ClassVar[str] = "fedavg"
    config_keys: ClassVar[tuple[Key, ...]] = ()
    #: names of the ``config_keys`` the algorithm's clients read: sent in every message's config
    #: (``client_settings``)
    client_keys: ClassVar[tuple[str, ...]] = ()
    #: attributes written to checkpoints besides the base ones
    checkpoint_attrs: ClassVar[tuple[str, ...]] = ()
    #: average replies by example count (False: unweighted means, as FedDyn-style methods use)
    weighted: ClassVar[bool] = True
    #: the server's state is one global model (``global_state``): Flower's ``arrays`` (``start``'s
    #: ``initial_arrays``, ``configure_*``'s input, ``aggregate_train``'s output) stand for it. False
    #: for strategies with several models, personal models or parts of one (IFCA, HCCT, PeFLL, FedRep, ...)
    global_model: ClassVar[bool] = True
    #: why a robust ``aggregation`` cannot act on this strategy ('': it can): the preflight refuses
    #: any other than ``mean`` with this reason
    robust_refusal: ClassVar[str] = ""

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, dataset: Dataset | None = None):
        self.cfg = cfg
        self.model = model
        self.dataset = dataset
        self.global_state: Tensors = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.unseen = unseen_clients(cfg)
        #: this round's valid evaluation replies (pid, unseen, metrics): the results' clients.csv
        self.client_evals: list[tuple[int, bool, dict[str, float]]] = []
        self.results_path: Path | None = None  #: this run's results folder, once running with a writer
        # names this run's client state at the sites (every message carries it); a checkpoint keeps
        # it, so only a run resumed from this one's checkpoint finds that state
        self.run_key = f"{cfg.run_name or cfg.strategy}-{uuid.uuid4().hex[:12]}"
        #: partition id -> the version (round) of that client's state the server's state builds on:
        #: the round of its last accepted training reply. Every message names it, so a run resumed
        #: from a checkpoint restores each client's state of the checkpointed round (fedapp.runtime.client_app)
        self.state_rounds: dict[int, int] = {}
        #: ``state_rounds`` of the last checkpoint written: the versions a resume may ask for, which
        #: the clients keep
        self.kept_state_rounds: dict[int, int] = {}
        #: ``start``'s ``train_config`` / ``evaluate_config``: the base of every message's config
        self.base_config: dict[str, dict[str, Any]] = {"train": {}, "evaluate": {}}
        # the partition ids addressed by the last configure_train / configure_evaluate, with the
        # arrays their replies must carry: aggregate_train / aggregate_evaluate check replies against them
        self.expected: dict[str, dict[int, Spec | None]] = {"train": {}, "evaluate": {}}
        self.driver = Driver(self, private_round)

    # ---- the run state, the driver's (it writes it; checkpoints carry history and totals) ----
    @property
    def clients(self) -> dict[int, ClientInfo]:
        """The discovered clients by partition id."""
        return self.driver.nodes.clients

    @clients.setter
    def clients(self, clients: dict[int, ClientInfo]) -> None:  # a test's or benchmark's made-up federation
        self.driver.nodes.clients = clients

    @property
    def history(self) -> list[dict[str, Any]]:
        """One row per round run, round 0 first."""
        return self.driver.history

    @property
    def totals(self) -> Counter:
        """Traffic since round 1."""
        return self.driver.totals

    @property
    def param_keys(self) -> list[str]:
        """Names of the trainable parameters (server duals and control variates live on these)."""
        return [k for k, _ in self.model.named_parameters()]

    def zeros_like_params(self) -> Tensors:
        return {k: torch.zeros_like(self.global_state[k]) for k in self.param_keys}

    @classmethod
    def run_config(cls, cfg: RunConfig | None = None, **settings: Any) -> RunConfig:
        """This strategy's run config with keyword settings over it (``strategies.settings.run_config``)."""
        return _settings.run_config(cls, cfg, **settings)

    @classmethod
    def client_class(cls) -> type:
        """fedapp's client of this strategy (``clients/``), as the registry pairs them."""
        return registry.of(cls).client

    @classmethod
    def plain_clients(cls) -> bool:
        """Whether a plain Flower ClientApp (Flower's quickstart: train the received ``arrays``, reply
        ``arrays`` and ``num-examples``) can be one of this strategy's clients: its own client adds no
        step to that (fedapp's FedAvg client) and the server keeps one global model."""
        from clients.fedavg import FedAvgClient

        return cls.global_model and cls.client_class() is FedAvgClient

    @classmethod
    def client_need(cls) -> str:
        """What a client of this strategy does beyond training the received model, for error lines."""
        client = cls.client_class()
        return f"{cls.__name__}'s client update ({client.__module__}.{client.__name__})"

    @classmethod
    def check_config(cls, cfg: RunConfig) -> None:
        """Cross-key checks of the algorithm's settings; raise ConfigError."""

    @classmethod
    def check_model(cls, cfg: RunConfig, model: torch.nn.Module) -> None:
        """What the algorithm needs of the model (a declared head, a size it can generate); raise
        ConfigError naming the key. The preflight calls it with the built model."""

    def summary(self) -> None:
        """Flower API: log the strategy's settings."""
        keys = {f"{self.config_prefix}.{k.name}": self.cfg.algo(k.name) for k in self.config_keys}
        log(INFO, "%s: %s", type(self).__name__, keys or "no algorithm settings")

    # ---- robust aggregation ------------------------------------------------------------
    def reference(self, pid: int, name: str) -> Tensors | None:
        """What reply record ``name`` of client ``pid`` is an update of: the record of that name
        sent to it in this exchange; None when the reply is an update itself (a delta)."""
        return self.driver.wire.sent.get(pid, {}).get(name)

    def combine(self, states: list[Tensors], weights: Iterable[float]) -> Tensors:
        """The replies' states combined as ``aggregation`` says: the weighted mean (each algorithm's
        own rule), the coordinate-wise median, the trimmed mean (Flower's ``trim_mean``), or the
        weighted mean of the states (Multi-)Krum selects. Aggregations over replies call this."""
        how, weights = self.cfg.aggregation, list(weights)
        if how == "mean" or len(states) == 1:
            return weighted_mean(states, weights)
        if how == "median":
            return coordinate_wise(states, lambda a: np.median(a, axis=0))
        if how == "trimmed-mean":
            return coordinate_wise(states, lambda a: trim_mean(a, self.cfg.trim_fraction))
        chosen = krum_select(states, self.cfg.krum_byzantine, self.cfg.krum_select)
        return weighted_mean([states[i] for i in chosen], [weights[i] for i in chosen])

    # ---- algorithm hooks (FedAvg defaults) ---------------------------------------------
    def begin(self, phase: str, server_round: int, grid: Grid) -> None:
        """Work before the round's ``phase`` ("train" or "evaluate") messages are built (HCCT groups
        the clients before training, FedALS collects the bodies before evaluation); may exchange
        with the clients through ``round_trip``."""

    def broadcast_payload(self, phase: str, server_round: int) -> Payload:
        """Arrays every client of the round's ``phase`` ("train" or "evaluate") receives (converted to
        records once): what it trains from, or evaluates."""
        return {"arrays": self.global_state}

    def shared_payloads(self, phase: str, server_round: int) -> Payload:
        """Arrays several (not all) clients of ``phase`` receive, by name: a client's payload names one
        with ``Shared(name)``, and it is converted to a record once per exchange."""
        return {}

    def client_payload(self, phase: str, pid: int, server_round: int) -> Payload:
        """Arrays client ``pid`` receives in ``phase`` besides the broadcast ones (an entry may name one
        of ``shared_payloads``)."""
        return {}

    def train_payload(self, pid: int, server_round: int) -> Payload:
        """Everything client ``pid`` receives for training: the broadcast and its own arrays."""
        store = RecordStore(self.shared_payloads("train", server_round))
        return {**self.broadcast_payload("train", server_round),
                **{name: store.tensors(entry) for name, entry in self.client_payload("train", pid, server_round).items()}}

    @classmethod
    def client_settings(cls, cfg: RunConfig) -> dict[str, Any]:
        """The settings the clients read, as the messages carry them: the common ``CLIENT_SETTINGS``
        and the algorithm's ``client_keys``, without the prefix (``fedprox.proximal-mu`` travels as
        ``proximal-mu``, as Flower's FedProx sends it)."""
        return {**{k: cfg[k] for k in CLIENT_SETTINGS}, **{k: cfg.algo(k) for k in cls.client_keys}}

    def client_config(self, phase: str, pid: int, server_round: int) -> dict[str, Any]:
        """Config of client ``pid``'s ``phase`` message: the client settings, and in training the
        round's lr."""
        settings = self.client_settings(self.cfg)
        return {**settings, "lr": round_lr(self.cfg, server_round)} if phase == "train" else settings

    def reply_spec(self, pid: int, server_round: int) -> Spec:
        """Arrays a training reply must carry: by default the full model."""
        return spec_of({"arrays": self.global_state})

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        """Update the server state from the valid replies (at least min-train-nodes)."""
        # under dp a uniform mean: one client moves it by at most C / n, what the noise is calibrated to
        weights = [r.num_examples if self.weighted and self.cfg.dp == "none" else 1.0 for r in replies]
        self.global_state = self.combine([r.payload["arrays"] for r in replies], weights)

    def central_state(self) -> Tensors | None:
        """The model evaluated on the global test set; None when there is no single model."""
        return self.global_state

    def model_state(self) -> Mapping[str, Any] | None:
        """What the run's ``model.pt`` holds: the single model (``central_state``), a state dict the
        run's module loads; a strategy without one gives what its server holds of the models (PeFLL:
        its two networks, IFCA: its cluster models), or None where that is nothing (Local)."""
        return self.central_state()

    # ---- the global model as Flower's ArrayRecord ------------------------------------------
    def global_arrays(self) -> ArrayRecord | None:
        """The global model as Flower carries it between rounds; None without one (``global_model``)."""
        return to_record(self.global_state) if self.global_model else None

    @property
    def built(self) -> bool:
        """Whether the strategy holds its model: False from keyword arguments without ``model=``
        until the initial arrays arrive."""
        return "driver" in vars(self)

    def set_global_arrays(self, arrays: ArrayRecord, what: str = "arrays") -> None:
        """Take ``arrays`` as the global model: the same keys, shapes and dtypes as the strategy's. A
        strategy built without a model is built here, on a module of the arrays' structure."""
        name = type(self).__name__
        if not self.built:
            state = from_record(arrays)
            type(self).__init__(self, self.cfg, module_of(state, self.cfg.head_modules))
            self.global_state = state  # in the arrays' order, which the clients' replies keep
            return
        if not self.global_model:
            raise ValueError(f"{name} keeps no single global model, so it cannot take {what}: pass none (or an "
                             "empty ArrayRecord)")
        new = from_record(arrays)
        if list(new) != list(self.global_state):
            raise ValueError(f"{name}: {what} keys {list(new)} differ from the model's {list(self.global_state)}")
        for k, v in new.items():
            ref = self.global_state[k]
            if v.shape != ref.shape or v.dtype != ref.dtype:
                raise ValueError(f"{name}: {what} '{k}' is {v.dtype} {tuple(v.shape)}, the model's is "
                                 f"{ref.dtype} {tuple(ref.shape)}")
        self.global_state = new

    # ---- Flower Strategy API: the round's steps, run by fedapp.server.rounds -------------------
    def configure_train(self, server_round: int, arrays: ArrayRecord | None, config: ConfigRecord | Mapping,
                        grid: Grid) -> list[Message]:
        """Flower API: the training messages for this round's sample (``Driver.configure``). ``arrays``
        (when given and not empty) is taken as the global model first: Flower's loop carries the model
        there, possibly changed by a wrapper (differential privacy)."""
        self.flower_loop("train_round", arrays, grid)
        return self.driver.configure("train", server_round, config, grid)

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower API: the valid replies to the last ``configure_train`` aggregated by the algorithm's
        ``aggregate`` (``Driver.aggregate_train``); the new global model and the round's metrics."""
        return self.driver.aggregate_train(server_round, replies)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord | None, config: ConfigRecord | Mapping,
                           grid: Grid) -> list[Message]:
        """Flower API: the evaluation messages (``arrays`` taken as in ``configure_train``)."""
        self.flower_loop("evaluate_round", arrays, grid)
        return self.driver.configure("evaluate", server_round, config, grid)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower API: pooled accuracy/loss over the clients of the last ``configure_evaluate``,
        per-client spread, and seen/unseen splits (``Driver.aggregate_evaluate``)."""
        return self.driver.aggregate_evaluate(replies)

    def flower_loop(self, own: str, arrays: ArrayRecord | None, grid: Grid) -> None:
        """Before a step of Flower's own loop (``Strategy.start`` or a wrapper's): a strategy that runs
        its round itself (``fedapp.server.hooks.OwnHooks``: several round trips, or work around the
        exchange) cannot be driven so, and says so instead of running a wrong round; ``arrays`` (when
        given and not empty) is taken as the global model; the clients are discovered, which Flower's
        loop does not do."""
        if own_hook(self, own) is not None:
            raise RuntimeError(f"{type(self).__name__} has its own {own} (more than one configure/aggregate "
                               "pair per round), which Flower's Strategy.start cannot drive: run its own start()")
        if arrays is not None and len(arrays):
            self.set_global_arrays(arrays)
        if not self.clients:
            self.driver.nodes.discover(grid, wait=self.cfg.node_wait_timeout)

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None, evaluate_fn=None, writer=None,
              start_round: int = 1) -> Result:
        """Flower's ``Strategy.start``: run all rounds and return Flower's ``Result`` (the final global
        model, when there is one, and the rounds' metrics: aggregate_train's, the federated
        evaluation's ``fed-*``, and the server side's ``central-*`` and ``evaluate_fn``'s).
        ``num_rounds`` / ``timeout`` default to the run config's ``num-server-rounds`` /
        ``round-timeout``. fedapp's additions: each round's full row (traffic, drops, timings) goes
        to ``writer`` as soon as it is complete and to ``self.history`` (the driver's); ``start_round`` continues a
        run restored from a checkpoint (its ``Result`` holds the rounds this call ran)."""
        _settings.honour(self, initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)
        return loop.run(self.driver, grid, evaluate_fn, writer, start_round)
