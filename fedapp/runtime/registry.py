"""Algorithm registry: a name maps to a server strategy class and its client class.

Each module in the ``strategies`` package declares ``ALGORITHMS = {name: (Strategy, Client)}``;
they are discovered here, so adding an algorithm touches no shared file. The whole run-config
schema is built here: ``fedapp.core.config``'s common keys, the strategy names as the choices of
``strategy``, and every algorithm's keys under its prefix (``parse_run_config``).
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

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


@cache
def algorithms() -> dict[str, AlgorithmSpec]:
    import strategies

    found: dict[str, AlgorithmSpec] = {}
    for info in sorted(pkgutil.iter_modules(strategies.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"strategies.{info.name}")
        for name, (strategy, client) in getattr(module, "ALGORITHMS", {}).items():
            if name in found:
                raise RuntimeError(f"algorithm {name!r} registered twice")
            found[name] = AlgorithmSpec(name, strategy, client)
    _check_prefixes(found.values())
    return found


def _check_prefixes(specs) -> None:
    """Algorithms sharing a prefix must agree on each shared key's definition."""
    seen: dict[str, Key] = {}
    for spec in specs:
        for key in spec.keys:
            full = f"{spec.prefix}.{key.name}"
            if full in seen and seen[full] != key:
                raise RuntimeError(f"run config key {full!r} declared differently by two strategies")
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



def all_keys() -> dict[str, Key]:
    """Common keys (``strategy`` with the registered names as its choices) plus every registered
    algorithm's prefixed keys."""
    keys = {k.name: k for k in COMMON_KEYS}
    keys["strategy"] = dataclasses.replace(keys["strategy"], choices=tuple(algorithms()))
    for spec in algorithms().values():
        keys.update({f"{spec.prefix}.{k.name}": k for k in spec.keys})
    return keys


def defaults() -> dict[str, Any]:
    return {name: key.default for name, key in all_keys().items()}


def parse_run_config(run_config: Mapping[str, Any]) -> RunConfig:
    """Validate a whole run config (missing keys take defaults) into a RunConfig whose algorithm keys
    are its strategy's (``cfg.algo("rho")``).

    Raises ConfigError for an unknown key, a bad value or an inconsistent pair.
    """
    common = parse_common(run_config, all_keys())
    spec = get(common.strategy)
    cfg = RunConfig(common.as_dict(), spec.prefix)
    spec.strategy.check_config(cfg)
    return cfg
