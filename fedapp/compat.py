"""Every use of a Flower module or behaviour that is not Flower's public API, in one place.

fedapp builds on Flower's public API (``flwr.app``, ``flwr.serverapp``, ``flwr.clientapp``). What
it needs beyond that is reached through the functions here, each with its own test
(``tests/test_library_compat.py``), so a Flower release that changes one of them fails that test
and nothing else needs reading. The ``flwr`` pin in ``pyproject.toml`` covers the releases these
tests passed on.
"""

from __future__ import annotations

from flwr.app import Error

#: what Flower's ClientApp raises for a message whose type it registers no function for
#: (``flwr.clientapp.ClientApp.__call__``): "No query function registered with name 'default'"
_NO_HANDLER = "No {} function registered"


def flower_grids() -> tuple[type, type]:
    """Flower's HTTP grid (deployments) and in-memory grid (simulations), from ``flwr.superlink.grid``.
    Imported when a server needs them: ``flwr.superlink`` brings the SuperLink's state machinery
    (about 0.9 s of CPU), which every ClientApp process would otherwise load, as parsing a run
    config imports the round driver."""
    from flwr.superlink.grid import HttpGrid, InMemoryGrid

    return HttpGrid, InMemoryGrid


def lacks_handler(error: Error, message_type: str) -> bool:
    """Whether an error reply says the node's ClientApp registers no function for ``message_type``
    (``query``: a plain Flower ClientApp with only ``@app.train()`` and ``@app.evaluate()``), as
    Flower reports it: the ClientApp's ValueError, wrapped by the SuperNode or the simulation."""
    return _NO_HANDLER.format(message_type) in (error.reason or "")
