"""Flower's simulation engine hands the ServerApp's messages to the clients on a timer: one thread
scans every node's queue, then waits 0.1 s (``add_messages_to_queue`` in
``flwr.server.superlink.fleet.vce.vce_api``, not configurable). Each exchange waits up to 0.1 s
before its first client starts, 50 ms on average; where the clients' work is short the next push
comes soon after a scan and waits most of it: a training exchange of two clients doing one step each
took 94 ms, 34 ms with this module (docs/performance.md, change 29). PeFLL makes three exchanges a step.

``wake`` ends that wait as soon as the ServerApp has pushed an exchange: the scanner thread's
stop event gets a ``wait`` that returns when the ServerApp pushes (or after the same 0.1 s). The
scanner and the ServerApp share the simulation process of ``flwr run``; elsewhere (a deployment,
the in-process engine, a Flower whose engine has no such thread) there is nothing to wake and
``wake`` returns False.
"""

from __future__ import annotations

import threading
from logging import INFO

from flwr.common import log

from fedapp.core.compat import engine_pickup

#: set by ``wake`` after a push, cleared by the scanner before it scans
_PUSHED = threading.Event()
#: the scanner thread whose wait is hooked, and its stop event
_HOOKED: tuple[threading.Thread, threading.Event] | None = None


def _scanner() -> tuple[threading.Thread, threading.Event] | None:
    """Flower's message pick-up thread of this process and its stop event, if one runs."""
    target = engine_pickup()
    for thread in threading.enumerate():
        if getattr(thread, "_target", None) is target:
            stop = next((a for a in getattr(thread, "_args", ()) if isinstance(a, threading.Event)), None)
            if stop is not None:
                return thread, stop
    return None


def _hook(stop: threading.Event) -> None:
    blocking_wait = stop.wait

    def wait(timeout: float | None = None) -> bool:
        if timeout is None:  # a wait for the stop itself is left as it was
            return blocking_wait()
        _PUSHED.wait(timeout)
        _PUSHED.clear()  # before the scan that follows, so a push during that scan wakes the next wait
        return stop.is_set()

    stop.wait = wait


def wake() -> bool:
    """Let Flower's pick-up take the messages just pushed now rather than at its next tick."""
    global _HOOKED
    if _HOOKED is None or not _HOOKED[0].is_alive():  # a new run's engine: hook its scanner
        _HOOKED = _scanner()
        if _HOOKED is None:
            return False
        _hook(_HOOKED[1])
        log(INFO, "Flower's simulation engine takes each exchange's messages as they are pushed (fedapp.server.pickup)")
    _PUSHED.set()
    return True
