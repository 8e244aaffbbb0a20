"""Server-side strategies: one module per algorithm, on the shared machinery in ``base``.

Every strategy is importable from here under its paper's name, as Flower's are from
``flwr.serverapp.strategy``: ``from strategies import SCAFFOLD, FedProx, FedSMOO, FedALS, PeFLL``
(``python -m fedapp list`` names them all).
"""

import importlib
import pkgutil

#: the papers' spellings that are not a class's name, and earlier class names
ALIASES = {"pFedHN": "PFedHN", "pFedMe": "PFedMe", "Scaffold": "SCAFFOLD"}


def __getattr__(name: str) -> type:
    """A strategy class by its name, from the module that registers it (looked up on first use:
    importing the package imports no algorithm)."""
    if name[:1].islower() and name not in ALIASES:  # a submodule, imported as such
        raise AttributeError(f"module 'strategies' has no attribute {name!r}")
    wanted = ALIASES.get(name, name)
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        if any(cls.__name__ == wanted for cls in getattr(module, "ALGORITHMS", {}).values()):
            return getattr(module, wanted)
    raise AttributeError(f"module 'strategies' has no attribute {name!r}")
