"""Algorithm registry: a name maps to a server strategy class and its client class.

Each module in ``clients`` declares ``ALGORITHMS = {name: (Settings, Client)}``: the prefix and
keys of the algorithm's own run-config settings and its client class (``clients/keys.py``). Each
module in ``strategies`` declares ``ALGORITHMS = {name: Strategy}``, whose ``config_prefix``,
``config_keys`` and ``client_keys`` are that declaration. Both are discovered here, so adding an
algorithm touches no shared file. The whole run-config schema is built here from the declarations:
``fedapp.core.config``'s common keys, the algorithm names as the choices of ``strategy``, and every
algorithm's keys under its prefix (``parse_run_config``). A ClientApp parses its run config with
``side="client"``, which imports no strategy.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterator, Mapping
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
    """Every algorithm's run-config settings and client class, as ``clients/`` declares them: all a
    ClientApp needs, with no strategy imported."""
    import clients

    found: dict[str, tuple[Settings, type]] = {}
    for module in _modules(clients):
        for name, declaration in getattr(module, "ALGORITHMS", {}).items():
            if name in found:
                raise RuntimeError(f"algorithm {name!r} declared twice")
            found[name] = declaration
    _check_prefixes(settings for settings, _ in found.values())
    return found


@cache
def algorithms() -> dict[str, AlgorithmSpec]:
    import strategies

    found: dict[str, AlgorithmSpec] = {}
    for module in _modules(strategies):
        for name, strategy in getattr(module, "ALGORITHMS", {}).items():
            if name in found:
                raise RuntimeError(f"algorithm {name!r} registered twice")
            settings, client = declared().get(name, (None, None))
            if (strategy.config_prefix, strategy.config_keys, strategy.client_keys) != settings:
                raise RuntimeError(f"strategy {name!r} must take its config_prefix, config_keys and client_keys "
                                   "from its declaration in clients/ (ALGORITHMS there)")
            found[name] = AlgorithmSpec(name, strategy, client)
    if missing := sorted(set(declared()) - set(found)):
        raise RuntimeError(f"algorithms declared in clients/ without a strategy: {missing}")
    return found


def _check_prefixes(declarations) -> None:
    """Algorithms sharing a prefix must agree on each shared key's definition."""
    seen: dict[str, Key] = {}
    for settings in declarations:
        for key in settings.keys:
            full = f"{settings.prefix}.{key.name}"
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
    """Common keys (``strategy`` with the declared names as its choices) plus every declared
    algorithm's prefixed keys."""
    keys = {k.name: k for k in COMMON_KEYS}
    keys["strategy"] = dataclasses.replace(keys["strategy"], choices=tuple(declared()))
    for settings, _ in declared().values():
        keys.update({f"{settings.prefix}.{k.name}": k for k in settings.keys})
    return keys


def defaults() -> dict[str, Any]:
    return {name: key.default for name, key in all_keys().items()}


def parse_run_config(run_config: Mapping[str, Any], side: Literal["server", "client"] = "server") -> RunConfig:
    """Validate a whole run config (missing keys take defaults) into a RunConfig whose algorithm keys
    are its strategy's (``cfg.algo("rho")``).

    Every key, value and error is the same on both sides. The server side adds the strategy's
    cross-key checks (``check_config``); the client side (``side="client"``, a ClientApp) leaves them
    to the server, which ran them before it sent anything, and imports no strategy.

    Raises ConfigError for an unknown key, a bad value or an inconsistent pair.
    """
    common = parse_common(run_config, all_keys())
    settings, _ = declared()[common.strategy]
    cfg = RunConfig(common.as_dict(), settings.prefix)
    if side == "server":
        get(common.strategy).strategy.check_config(cfg)
    return cfg
