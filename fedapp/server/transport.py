"""One push of messages and pull of their replies over a Flower ``Grid``, without Flower's long sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable

from flwr.app import Message
from flwr.serverapp import Grid

from fedapp.core.compat import flower_grids
from fedapp.server import pickup

#: longest wait between two pulls of replies: a simulation's in-memory grid answers a pull from this
#: process's memory, a deployment's HTTP grid with a request to the SuperLink
PULL_WAIT = {"memory": 0.02, "http": 0.1}


def send_and_receive(grid: Grid, msgs: list[Message], timeout: float | None,
                     arrived: Callable[[Message], Message] | None = None) -> list[Message]:
    """``grid.send_and_receive`` with a short poll: Flower's grids sleep between pulls (3 s for
    the HTTP grid of a deployment, 0.1 s for a simulation's in-memory grid), which rounds every
    exchange up to a multiple of that. The wait doubles from 10 ms to ``PULL_WAIT`` (20 ms in a
    simulation, where PeFLL's three exchanges a step would each wait up to 0.1 s more; 0.1 s
    over HTTP), so a reply is seen at most that late; in a simulation Flower's engine is woken to
    take the messages at once (``fedapp.server.pickup``). Each reply goes through ``arrived`` as it
    arrives (fedapp.runtime.inprocess's grid calls it as it computes the reply)."""
    arrived = arrived or (lambda msg: msg)
    http, memory = flower_grids()
    if not isinstance(grid, (http, memory)):  # InProcessGrid answers without sleeping
        if hasattr(grid, "on_reply"):
            grid.on_reply = arrived
            try:
                return list(grid.send_and_receive(msgs, timeout=timeout))
            finally:
                grid.on_reply = None
        return [arrived(msg) for msg in grid.send_and_receive(msgs, timeout=timeout)]
    longest = PULL_WAIT["memory" if isinstance(grid, memory) else "http"]
    pending = set(grid.push_messages(msgs))
    if isinstance(grid, memory):  # Flower's engine would take them up to 0.1 s later
        pickup.wake()
    end = None if timeout is None else time.time() + timeout
    replies: list[Message] = []
    wait = 0.01
    while True:
        got = list(grid.pull_messages(pending))
        replies += [arrived(msg) for msg in got]
        pending -= {m.metadata.reply_to_message_id for m in got}
        if not pending or (end is not None and time.time() >= end):
            return replies
        time.sleep(wait)
        wait = min(2 * wait, longest)
