"""How a fedapp strategy takes its settings: as keyword arguments, as a run config, and from ``start()``.

``declare`` gives a strategy its run-config keys: its clients' declaration in ``clients/`` and the
server's own keys, declared in the strategy's module beside the code that reads them. ``Settings``
builds a strategy either way; ``document`` gives each strategy class the Parameters section and
signature of its ``config_keys``; ``run_config`` checks keyword arguments as a run config is checked;
``honour`` takes ``start()``'s Flower arguments into the run config and the messages' base configs.
"""

from __future__ import annotations

import difflib
import inspect
import keyword
from abc import ABCMeta
from collections.abc import Mapping
from typing import Any

import torch
from flwr.app import ArrayRecord

from clients.keys import Settings as ClientKeys
from fedapp.core.config import COMMON_KEYS, ConfigError, Key, RunConfig
from fedapp.core.data import Dataset
from fedapp.runtime import registry
from fedapp.runtime.registry import parse_run_config

#: common run-config settings that clients read in local training and evaluation: every training and
#: evaluation message's config carries them (``client_settings``), so a client never reads them from
#: its own run config
CLIENT_SETTINGS = ("batch-size", "local-steps", "local-epochs", "momentum", "weight-decay", "grad-clip",
                   "augment-recipe", "eval-label-mask", "optimizer", "adam-beta1", "adam-beta2", "adam-eps",
                   "lr-schedule")


#: a method's own lr decay (read by ``fedapp.core.experiment.round_lr``), so one run-config file can decay
#: FedDyn/FedSMOO by 0.9995 and the other methods by 0.998, as FedSMOO's Table 1 does
LR_DECAY = Key("lr-decay", float, 0.0, "This method's lr decay per round; 0: the common lr-decay.", low=0.0, high=1.0)


def declare(clients: ClientKeys, *keys: Key) -> tuple[str, tuple[Key, ...], tuple[str, ...]]:
    """A strategy's ``config_prefix, config_keys, client_keys``: ``clients`` is the algorithm's
    declaration in ``clients/`` (its prefix and the keys its clients read), ``keys`` every key of the
    algorithm in its documented order: the clients' and the server's own, declared beside the strategy
    (the registry checks that the clients' are among them)."""
    return clients.prefix, keys, tuple(k.name for k in clients.keys)


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


def parameters_doc(cls: type) -> str:
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


def document(cls: type) -> None:
    """Give strategy class ``cls`` its docstring's Parameters section and the keyword arguments of its
    settings as its signature, as Flower's strategies have them."""
    cls.__doc__ = inspect.cleandoc(cls.__doc__ or cls.__name__) + parameters_doc(cls)
    p = inspect.Parameter
    cls.__signature__ = inspect.Signature(
        [*(p(keyword_of(k.name), p.KEYWORD_ONLY, default=k.default, annotation=k.type)
           for k in (*flower_keys(cls), *cls.config_keys)),
         p("model", p.KEYWORD_ONLY, default=None, annotation=torch.nn.Module | None),
         p("dataset", p.KEYWORD_ONLY, default=None, annotation=Dataset | None),
         p("cfg", p.KEYWORD_ONLY, default=None, annotation=RunConfig | None),
         p("settings", p.VAR_KEYWORD)])


def run_config(cls: type, cfg: RunConfig | None = None, **settings: Any) -> RunConfig:
    """Strategy class ``cls``'s run config: ``cfg`` (default: every default; one naming another strategy is
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


def honour(strategy, initial_arrays: ArrayRecord | None, num_rounds: int | None, timeout: float | None,
           train_config: Mapping | None, evaluate_config: Mapping | None, evaluate_fn) -> None:
    """Take ``start``'s Flower arguments into ``strategy``: ``initial_arrays`` replaces the initial global model (and
    builds a strategy constructed without a model), a run length and timeout replace the run
    config's (``num-server-rounds``, ``round-timeout``), the configs are the base of every
    message's config. A config key that names a setting the messages carry (``lr``,
    ``batch-size``, ``local-steps``, the algorithm's own such as ``proximal-mu``) sets it, so the
    user's value wins over fedapp's and the server computes with it too; any other key travels
    as given. What a strategy cannot honour (arrays or ``evaluate_fn`` without a single global
    model, one setting given two values) fails here, in one line."""
    name = type(strategy).__name__
    if initial_arrays is not None and len(initial_arrays):
        strategy.set_global_arrays(initial_arrays, "initial_arrays")
    elif not strategy.built:
        raise ValueError(f"{name} was built without a model, so start() needs initial_arrays: the initial "
                         "global model, ArrayRecord(net.state_dict())")
    if num_rounds is not None:
        strategy.cfg = strategy.cfg.replace(num_server_rounds=int(num_rounds))
    if timeout is not None:
        strategy.cfg = strategy.cfg.replace(round_timeout=float(timeout))
    configs = {"train": dict(train_config or {}), "evaluate": dict(evaluate_config or {})}
    carried = {*CLIENT_SETTINGS, "lr", *strategy.client_keys}
    settings = {k: v for k, v in configs["evaluate"].items() if k in carried}
    for key, value in configs["train"].items():
        if key in settings and settings[key] != value:
            raise ConfigError(f"train_config['{key}'] = {value!r} and evaluate_config['{key}'] = "
                              f"{settings[key]!r}: {name} runs one '{key}'; give it once")
        if key in carried:
            settings[key] = value
    if settings:
        strategy.cfg = type(strategy).run_config(strategy.cfg, **{keyword_of(k): v for k, v in settings.items()})
    strategy.base_config = {phase: {k: v for k, v in c.items() if k not in carried} for phase, c in configs.items()}
    if evaluate_fn is not None and not strategy.global_model:
        raise ValueError(f"{name} keeps no single global model, so start() cannot call "
                         "evaluate_fn: leave it out (central-eval evaluates what it can)")
