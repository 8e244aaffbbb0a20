"""The base of every fedapp strategy: the algorithm hooks and Flower's Strategy API.

:class:`FedStrategy` is Flower's message-based ``Strategy``: ``configure_train`` /
``aggregate_train`` / ``configure_evaluate`` / ``aggregate_evaluate`` as Flower documents them,
and ``start()`` taking Flower's arguments and returning Flower's ``Result``. The round driver
(``strategies.driver``: discovery, sampling, messages, exchange, reply checks, the loop, results)
is held as ``self.driver``. An algorithm subclass overrides only the hooks that carry its update
rule: ``broadcast_payload`` / ``shared_payloads`` / ``client_payload`` / ``client_config`` (each for
the "train" or "evaluate" phase), ``begin``, ``reply_spec``, ``aggregate`` and ``central_state``;
a hook one algorithm needs is its own method (``strategies.driver.OwnHooks``). The driver runs each
round (``Driver.train_round`` / ``Driver.evaluate_round``: configure, exchange, aggregate); an
algorithm whose round is several round trips defines its own (``strategies.driver.OwnHooks``,
built from ``driver.round_trip``).
"""

from __future__ import annotations

import difflib
import inspect
import keyword
import uuid
from abc import ABCMeta
from collections import Counter
from collections.abc import Iterable, Mapping
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from fedapp.core.aggregation import coordinate_wise, krum_select, weighted_mean
from fedapp.core.compat import trim_mean
from fedapp.runtime import registry
from fedapp.core.config import COMMON_KEYS, ConfigError, Key, RunConfig
from fedapp.runtime.registry import parse_run_config
from fedapp.core.data import Dataset
from fedapp.core.experiment import round_lr, unseen_clients
from fedapp.core.models import module_of
from fedapp.core.records import Payload, RecordStore, Tensors, from_record, to_record
from fedapp.core.training import evaluate
from strategies.driver import ClientInfo, Driver, Reply, Spec, message_config, own_hook, spec_of
from strategies.privacy import private_round

#: common run-config settings that clients read in local training and evaluation: every training and
#: evaluation message's config carries them (``client_settings``), so a client never reads them from
#: its own run config
CLIENT_SETTINGS = ("batch-size", "local-steps", "local-epochs", "momentum", "weight-decay", "grad-clip",
                   "augment-recipe", "eval-label-mask", "optimizer", "adam-beta1", "adam-beta2", "adam-eps",
                   "lr-schedule")


class Settings(ABCMeta):
    """How every fedapp strategy is built: as Flower's strategies are, from keyword arguments named
    after its settings, ``FedSMOO(rho=0.1, beta=100.0, fraction_train=0.1)``, the initial model
    coming with ``start(grid, initial_arrays)``; or, as fedapp's ServerApp builds it, from a run
    config and the module, ``FedSMOO(cfg, model, dataset)`` (``FedStrategy.run_config`` turns
    keyword arguments into the same run config). The class's own ``__init__(cfg, model, dataset)``
    builds it either way, so a strategy declares its settings once, as ``config_keys``: without a
    model it runs when the initial arrays arrive (``FedStrategy.set_global_arrays``), on a module of
    their structure (``fedapp.core.models.module_of``)."""

    def __call__(cls, cfg: RunConfig | None = None, model: torch.nn.Module | None = None,
                 dataset: Dataset | None = None, **settings: Any):
        cfg = cls.run_config(cfg, **settings)
        if model is not None:
            return super().__call__(cfg, model, dataset)
        if dataset is not None:
            raise TypeError(f"{cls.__name__}(dataset=...) is the test set the server evaluates the model on: "
                            "pass model= with it")
        strategy = cls.__new__(cls)
        strategy.cfg = cfg
        return strategy


def keyword_of(key: str) -> str:
    """A run-config key as a keyword argument: '-' spelt '_', a Python keyword with '_' after it
    (``pfedme.lambda``: ``lambda_``)."""
    name = key.replace("-", "_")
    return name + "_" if keyword.iskeyword(name) else name


#: the settings of Flower's strategies' constructors that fedapp's run config has, first in every
#: strategy's signature
FLOWER_KEYS = ("fraction-train", "fraction-evaluate", "min-train-nodes")


def flower_keys(cls: type) -> list[Key]:
    """The common keys of ``FLOWER_KEYS`` that ``cls``'s own settings do not name."""
    own, common = {k.name for k in cls.config_keys}, {k.name: k for k in COMMON_KEYS}
    return [common[name] for name in FLOWER_KEYS if name not in own]


def _parameters_doc(cls: type) -> str:
    """The NumPy-style Parameters section of a strategy's docstring, from its ``config_keys``."""
    lines = ["Parameters", "----------"]
    for key in flower_keys(cls):
        lines += [f"{keyword_of(key.name)} : {key.type.__name__} (default: {key.default!r})",
                  f"    Run config ``{key.name}``. {key.doc}"]
    for key in cls.config_keys:
        lines += [f"{keyword_of(key.name)} : {key.type.__name__} (default: {key.default!r})",
                  f"    Run config ``{cls.config_prefix}.{key.name}``. {key.doc}"]
    lines += ["model : torch.nn.Module | None (default: None)",
              "    The module whose state is the initial global model; None: start()'s initial_arrays are, and give "
              "the structure (every floating-point array a parameter but norm layers' running statistics).",
              "dataset : fedapp.core.data.Dataset | None (default: None)",
              "    With model: the global test set the server evaluates the global model on (central-eval).",
              "cfg : fedapp.core.config.RunConfig | None (default: None)",
              "    A run config to start from (the keyword arguments go over it).",
              "**settings", "    Every other common run-config key as a keyword argument, '-' spelt '_' (``lr``, "
              "``seed``, ``aggregation``, ...; ``python -m fedapp list`` shows them all)."]
    return "\n\n" + "\n".join(lines) + "\n"


class FedStrategy(Strategy, metaclass=Settings):
    """FedAvg-shaped base: every hook defaults to Federated Averaging.

    McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017). Each round a seeded sample S_t of the
    training clients receives the global model w_t, runs local SGD, and returns
    w_i; then w_{t+1} = sum_{i in S_t} n_i w_i / sum_{i in S_t} n_i.
    """

    def __init_subclass__(cls, **kwargs):
        """Each strategy's docstring gets its Parameters section and its signature the keyword
        arguments of its settings, as Flower's strategies have them."""
        super().__init_subclass__(**kwargs)
        cls.__doc__ = inspect.cleandoc(cls.__doc__ or cls.__name__) + _parameters_doc(cls)
        p = inspect.Parameter
        cls.__signature__ = inspect.Signature(
            [*(p(keyword_of(k.name), p.KEYWORD_ONLY, default=k.default, annotation=k.type)
               for k in (*flower_keys(cls), *cls.config_keys)),
             p("model", p.KEYWORD_ONLY, default=None, annotation=torch.nn.Module | None),
             p("dataset", p.KEYWORD_ONLY, default=None, annotation=Dataset | None),
             p("cfg", p.KEYWORD_ONLY, default=None, annotation=RunConfig | None),
             p("settings", p.VAR_KEYWORD)])

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
        return self.driver.clients

    @clients.setter
    def clients(self, clients: dict[int, ClientInfo]) -> None:  # a test's or benchmark's made-up federation
        self.driver.clients = clients

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
        """This strategy's run config: ``cfg`` (default: every default; one naming another strategy is
        read as naming this one) with ``settings`` over it, each the keyword spelling of a key: the
        algorithm's own (``rho`` for ``fedsmoo.rho``), else a common one (``fraction_train`` for
        ``fraction-train``); checked as a run config is, so a bad value is the same one-line error."""
        name = registry.of(cls).name
        if cfg is not None and not settings and cfg.strategy == name:
            return cfg
        values = {} if cfg is None else cfg.as_dict()
        own, common = {k.name for k in cls.config_keys}, {k.name for k in COMMON_KEYS} - {"strategy"}
        for arg, value in settings.items():
            key = arg.removesuffix("_").replace("_", "-")
            if key not in own | common:
                close = difflib.get_close_matches(key, own | common, n=2, cutoff=0.6)
                raise ConfigError(f"{cls.__name__}({arg}=...): no such setting" + (
                    f"; did you mean {', '.join(keyword_of(c) for c in close)}?" if close else
                    f"; its own are {', '.join(keyword_of(k) for k in sorted(own)) or 'none'}, "
                    "the common ones python -m fedapp list shows"))
            values[f"{cls.config_prefix}.{key}" if key in own else key] = value
        return parse_run_config({**values, "strategy": name})

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
        keys = {f"{self.config_prefix}.{k.name}": self.cfg.algo(k.name) for k in self.config_keys}
        log(INFO, "%s: %s", type(self).__name__, keys or "no algorithm settings")

    # ---- robust aggregation ------------------------------------------------------------
    def reference(self, pid: int, name: str) -> Tensors | None:
        """What reply record ``name`` of client ``pid`` is an update of: the record of that name
        sent to it in this exchange; None when the reply is an update itself (a delta)."""
        return self.driver.sent.get(pid, {}).get(name)

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

    # ---- message contents ------------------------------------------------------------
    def contents(self, phase: str, server_round: int, pids: list[int], config: Mapping | None = None
                 ) -> dict[int, RecordDict]:
        """One ``phase`` message content per partition id in ``pids``, its config over ``config``
        (default: ``start``'s config of that phase)."""
        base = self.base_config[phase] if config is None else config
        return self.driver.contents(server_round, {pid: self.client_payload(phase, pid, server_round) for pid in pids},
                                    lambda pid: message_config(phase, base, self.client_config(phase, pid, server_round)),
                                    self.broadcast_payload(phase, server_round), self.shared_payloads(phase, server_round))

    def train_contents(self, server_round: int, config: Mapping | None = None) -> dict[int, RecordDict]:
        """One training message content per sampled partition id."""
        return self.contents("train", server_round, self.driver.round_sample("train", server_round), config)

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

    # ---- Flower Strategy API (single round trip; the driver's loop uses the same methods) ----
    def configure_train(self, server_round: int, arrays: ArrayRecord | None, config: ConfigRecord | Mapping,
                        grid: Grid) -> list[Message]:
        """Flower API: the training messages for this round's sample. ``arrays`` (when given and not
        empty) is taken as the global model first: Flower's loop carries the model there, possibly
        changed by a wrapper (differential privacy); fedapp's own loop passes None."""
        self.check_flower_loop("train_round")
        if arrays is not None and len(arrays):
            self.set_global_arrays(arrays)
        if not self.clients:  # Flower's loop does no discovery
            self.driver.discover(grid, wait=self.cfg.node_wait_timeout)
        self.begin("train", server_round, grid)
        contents = self.train_contents(server_round, config)
        self.expected["train"] = {pid: self.reply_spec(pid, server_round) for pid in contents}
        return self.driver.messages(contents, MessageType.TRAIN)

    def check_flower_loop(self, own: str) -> None:
        """A strategy that runs its round itself (``strategies.driver.OwnHooks``: several round trips,
        or work around the exchange) cannot be driven by Flower's ``Strategy.start`` or a wrapper's:
        say so instead of running a wrong round. The driver runs such a round instead of calling
        configure/aggregate."""
        if own_hook(self, own) is not None:
            raise RuntimeError(f"{type(self).__name__} has its own {own} (more than one configure/aggregate "
                               "pair per round), which Flower's Strategy.start cannot drive: run its own start()")

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower API: the valid replies to the last ``configure_train`` aggregated by the algorithm's
        ``aggregate``; returns the new global model (None without one or when the round is skipped)
        and the round's metrics."""
        valid = self.driver.parse_replies(replies, self.expected["train"])
        metrics = {"replies": len(valid)}
        if len(valid) < self.cfg.min_train_nodes:
            log(WARNING, "round %d: %d valid replies < min-train-nodes %d: state unchanged",
                server_round, len(valid), self.cfg.min_train_nodes)
            metrics["skipped"] = 1
            return None, MetricRecord(metrics)
        self.aggregate(server_round, valid)
        self.driver.named["train"] = self.driver.named_metrics(valid)
        n = sum(r.num_examples for r in valid) or 1
        for key in ("train-loss",):
            if all(key in r.metrics for r in valid):
                metrics[key] = sum(r.metrics[key] * r.num_examples for r in valid) / n
        return self.global_arrays(), MetricRecord(metrics)

    def evaluate_contents(self, server_round: int, config: Mapping | None = None) -> dict[int, RecordDict]:
        """One evaluation message content per partition id sampled (fraction-evaluate of all clients)."""
        if not self.cfg.fraction_evaluate:
            return {}
        return self.contents("evaluate", server_round, self.driver.round_sample("evaluate", server_round), config)

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord | None, config: ConfigRecord | Mapping,
                           grid: Grid) -> list[Message]:
        """Flower API: the evaluation messages (``arrays``, when given and not empty, taken as the
        global model first, as in ``configure_train``)."""
        self.check_flower_loop("evaluate_round")
        if arrays is not None and len(arrays):
            self.set_global_arrays(arrays)
        if not self.clients:
            self.driver.discover(grid, wait=self.cfg.node_wait_timeout)
        self.begin("evaluate", server_round, grid)
        contents = self.evaluate_contents(server_round, config)
        self.expected["evaluate"] = dict.fromkeys(contents)
        return self.driver.messages(contents, MessageType.EVALUATE)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower API: pooled accuracy/loss over the clients of the last ``configure_evaluate``,
        per-client spread, and seen/unseen splits."""
        return self.evaluation_metrics(self.driver.parse_replies(replies, self.expected["evaluate"]))

    def evaluation_metrics(self, valid: list[Reply]) -> MetricRecord | None:
        """Pooled metrics of valid evaluation replies (``fed-*``); their clients in ``client_evals``."""
        self.client_evals = [(r.pid, r.pid in self.unseen, r.metrics) for r in valid]
        if not valid:
            return None
        self.driver.named["evaluate"] = self.driver.named_metrics(valid)
        out: dict[str, float] = {}
        groups = {"fed": valid}
        if self.unseen:
            groups["fed-seen"] = [r for r in valid if r.pid not in self.unseen]
            groups["fed-unseen"] = [r for r in valid if r.pid in self.unseen]
        for prefix, rs in groups.items():
            rs = [r for r in rs if r.num_examples > 0]
            if not rs:
                continue
            n = sum(r.num_examples for r in rs)
            accs = np.array([r.metrics["accuracy"] for r in rs])
            out[f"{prefix}-accuracy"] = sum(r.metrics["accuracy"] * r.num_examples for r in rs) / n
            out[f"{prefix}-loss"] = sum(r.metrics["loss"] * r.num_examples for r in rs) / n
            out[f"{prefix}-acc-client-mean"] = float(accs.mean())
            out[f"{prefix}-acc-client-std"] = float(accs.std())
            out[f"{prefix}-acc-client-min"] = float(accs.min())
            out[f"{prefix}-acc-client-max"] = float(accs.max())
            for extra in ("unmasked", "val"):  # pooled like the above where every client reports them
                if all(f"{extra}-accuracy" in r.metrics for r in rs):
                    w = np.array([r.metrics[f"{extra}-num-examples"] for r in rs])
                    if w.sum() > 0:
                        for m in ("accuracy", "loss"):
                            vals = np.array([r.metrics[f"{extra}-{m}"] for r in rs])
                            out[f"{prefix}-{extra}-{m}"] = float((vals * w).sum() / w.sum())
        return MetricRecord(out)

    def evaluate_central(self) -> dict[str, float]:
        state = self.central_state() if self.cfg.central_eval and self.dataset is not None else None
        if state is None:
            return {}
        self.model.load_state_dict(state)
        ds = self.dataset
        m = evaluate(self.model, ds.test_x, ds.test_y, mean=ds.mean, std=ds.std)
        return {"central-accuracy": m["accuracy"], "central-loss": m["loss"]}

    def honour(self, initial_arrays: ArrayRecord | None, num_rounds: int | None, timeout: float | None,
               train_config: Mapping | None, evaluate_config: Mapping | None, evaluate_fn) -> None:
        """Take ``start``'s Flower arguments: ``initial_arrays`` replaces the initial global model (and
        builds a strategy constructed without a model), a run length and timeout replace the run
        config's (``num-server-rounds``, ``round-timeout``), the configs are the base of every
        message's config. A config key that names a setting the messages carry (``lr``,
        ``batch-size``, ``local-steps``, the algorithm's own such as ``proximal-mu``) sets it, so the
        user's value wins over fedapp's and the server computes with it too; any other key travels
        as given. What a strategy cannot honour (arrays or ``evaluate_fn`` without a single global
        model, one setting given two values) fails here, in one line."""
        name = type(self).__name__
        if initial_arrays is not None and len(initial_arrays):
            self.set_global_arrays(initial_arrays, "initial_arrays")
        elif not self.built:
            raise ValueError(f"{name} was built without a model, so start() needs initial_arrays: the initial "
                             "global model, ArrayRecord(net.state_dict())")
        if num_rounds is not None:
            self.cfg = self.cfg.replace(num_server_rounds=int(num_rounds))
        if timeout is not None:
            self.cfg = self.cfg.replace(round_timeout=float(timeout))
        configs = {"train": dict(train_config or {}), "evaluate": dict(evaluate_config or {})}
        carried = {*CLIENT_SETTINGS, "lr", *self.client_keys}
        settings = {k: v for k, v in configs["evaluate"].items() if k in carried}
        for key, value in configs["train"].items():
            if key in settings and settings[key] != value:
                raise ConfigError(f"train_config['{key}'] = {value!r} and evaluate_config['{key}'] = "
                                  f"{settings[key]!r}: {name} runs one '{key}'; give it once")
            if key in carried:
                settings[key] = value
        if settings:
            self.cfg = type(self).run_config(self.cfg, **{keyword_of(k): v for k, v in settings.items()})
        self.base_config = {phase: {k: v for k, v in c.items() if k not in carried} for phase, c in configs.items()}
        if evaluate_fn is not None and not self.global_model:
            raise ValueError(f"{name} keeps no single global model, so start() cannot call "
                             "evaluate_fn: leave it out (central-eval evaluates what it can)")

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
        self.honour(initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)
        return self.driver.run(grid, evaluate_fn, writer, start_round)
