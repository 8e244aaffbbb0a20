"""Algorithm registry: a name maps to a server strategy class and its client class.

Each module in ``clients`` declares ``ALGORITHMS = {name: (Settings, Client)}``: the algorithm's
prefix, the run-config keys its clients read and its client class (``clients/keys.py``). Each
module in ``strategies`` declares ``ALGORITHMS = {name: Strategy}``, whose ``config_keys`` are all
the algorithm's keys: its clients' and the server's own, declared beside the strategy
(``strategies.settings.declare``). Both are discovered here, so adding an algorithm touches no
shared file. The whole run-config schema is built here from the declarations (``all_keys``):
``fedapp.core.config``'s common keys, the algorithm names as the choices of ``strategy``, and every
algorithm's keys under its prefix. A ClientApp parses its run config with ``side="client"``, from
the declarations in ``clients`` alone: it imports no strategy.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any, Literal

from clients.keys import Settings
from fedapp.core.config import COMMON_KEYS, Key, RunConfig, parse_common


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    strategy: type
    client: type

    @property
    def prefix(self) -> str:
        return self.strategy.config_prefix

    @property
    def keys(self) -> tuple[Key, ...]:
        return self.strategy.config_keys


def _modules(package: ModuleType) -> Iterator[ModuleType]:
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        yield importlib.import_module(f"{package.__name__}.{info.name}")


@cache
def declared() -> dict[str, tuple[Settings, type]]:
    """Every algorithm's prefix, the keys its clients read and its client class, as ``clients/``
    declares them: all a ClientApp needs, with no strategy imported."""
    import clients

    found: dict[str, tuple[Settings, type]] = {}
    for module in _modules(clients):
        for name, declaration in getattr(module, "ALGORITHMS", {}).items():
            if name in found:
                raise RuntimeError(f"algorithm {name!r} declared twice")
            found[name] = declaration
    _check_prefixes((settings.prefix, settings.keys) for settings, _ in found.values())
    return found


@cache
def algorithms() -> dict[str, AlgorithmSpec]:
    import strategies

    found: dict[str, AlgorithmSpec] = {}
    for module in _modules(strategies):
        for name, strategy in getattr(module, "ALGORITHMS", {}).items():
            if name in found:
                raise RuntimeError(f"algorithm {name!r} registered twice")
            settings, client = declared().get(name, (Settings(""), None))
            read = tuple(k.name for k in settings.keys)
            if (strategy.config_prefix, strategy.client_keys) != (settings.prefix, read) or not all(
                    k in strategy.config_keys for k in settings.keys):
                raise RuntimeError(f"strategy {name!r} must take its config_prefix and client_keys from its "
                                   "declaration in clients/ (ALGORITHMS there), its clients' keys among its "
                                   "config_keys (strategies.settings.declare)")
            found[name] = AlgorithmSpec(name, strategy, client)
    if missing := sorted(set(declared()) - set(found)):
        raise RuntimeError(f"algorithms declared in clients/ without a strategy: {missing}")
    _check_prefixes((spec.prefix, spec.keys) for spec in found.values())
    return found


def _check_prefixes(declarations: Iterable[tuple[str, tuple[Key, ...]]]) -> None:
    """Algorithms sharing a prefix must agree on each shared key's definition."""
    seen: dict[str, Key] = {}
    for prefix, keys in declarations:
        for key in keys:
            full = f"{prefix}.{key.name}"
            if full in seen and seen[full] != key:
                raise RuntimeError(f"run config key {full!r} declared differently by two algorithms")
            seen[full] = key


def get(name: str) -> AlgorithmSpec:
    return algorithms()[name]


def of(strategy: type) -> AlgorithmSpec:
    """The registered algorithm whose strategy is the class ``strategy`` (or the nearest registered
    class it derives from: a user's subclass of a fedapp strategy)."""
    by_class = {spec.strategy: spec for spec in algorithms().values()}
    for cls in strategy.__mro__:
        if cls in by_class:
            return by_class[cls]
    raise KeyError(f"{strategy.__name__} is no registered strategy and derives from none")


def client(name: str) -> type:
    """The client class of algorithm ``name``, from its declaration (no strategy imported)."""
    return declared()[name][1]


def all_keys() -> dict[str, Key]:
    """The whole run-config schema, the server's: common keys (``strategy`` with the declared names as
    its choices) plus every algorithm's prefixed keys, its clients' and its strategy's."""
    return _schema((get(name).prefix, get(name).keys) for name in declared())


def client_side_keys() -> dict[str, Key]:
    """The keys a ClientApp checks: common keys plus the keys every algorithm's clients read, as
    ``clients/`` declares them (no strategy imported)."""
    return _schema((settings.prefix, settings.keys) for settings, _ in declared().values())


def prefixes() -> set[str]:
    """Every algorithm's prefix: a key under none of them (nor under one resembling one) is the
    user's app's own (``fedapp.core.config.own_keys``)."""
    return {settings.prefix for settings, _ in declared().values()}


def _schema(declarations: Iterable[tuple[str, tuple[Key, ...]]]) -> dict[str, Key]:
    keys = {k.name: k for k in COMMON_KEYS}
    keys["strategy"] = dataclasses.replace(keys["strategy"], choices=tuple(declared()))
    for prefix, algorithm_keys in declarations:
        keys.update({f"{prefix}.{k.name}": k for k in algorithm_keys})
    return keys


def defaults() -> dict[str, Any]:
    return {name: key.default for name, key in all_keys().items()}


def parse_run_config(run_config: Mapping[str, Any], side: Literal["server", "client"] = "server") -> RunConfig:
    """Validate a whole run config (missing keys take defaults) into a RunConfig whose algorithm keys
    are its strategy's (``cfg.algo("rho")``).

    The server side checks every key and adds the strategy's cross-key checks (``check_config``).
    The client side (``side="client"``, a ClientApp) imports no strategy, so it knows only the keys
    the clients read (``client_side_keys``): those and the common keys it checks as the server does, with
    the same values, defaults and errors; a key under an algorithm's prefix that no client reads (a
    server setting such as ``pefll.server-lr``) it takes as given, unchecked and without a default:
    the server validated this same run config before it sent anything. Unknown keys and misspelt
    prefixes are refused on both sides.

    Raises ConfigError for an unknown key, a bad value or an inconsistent pair.
    """
    if side == "client":
        return _parse_client_side(run_config)
    common = parse_common(run_config, all_keys(), prefixes())
    cfg = RunConfig(common.as_dict(), get(common.strategy).prefix)
    get(common.strategy).strategy.check_config(cfg)
    return cfg


def _parse_client_side(run_config: Mapping[str, Any]) -> RunConfig:
    keys, known = client_side_keys(), prefixes()
    unchecked = {k: v for k, v in run_config.items() if k not in keys and k.partition(".")[0] in known}
    common = parse_common({k: v for k, v in run_config.items() if k not in unchecked}, keys, known)
    return RunConfig({**common.as_dict(), **unchecked}, declared()[common.strategy][0].prefix)
