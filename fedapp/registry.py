"""Algorithm registry: a name maps to a server strategy class and its client class.

Each module in the ``strategies`` package declares ``ALGORITHMS = {name: (Strategy, Client)}``;
they are discovered here, so adding an algorithm touches no shared file.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # config.py looks algorithms up here: no import back at run time
    from fedapp.config import Key


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

