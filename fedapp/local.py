"""In-process federation: a Grid that calls the ClientApp directly, one context per node.

Used by the tests and by fast CPU sweeps in ``simulations/``: the same ServerApp and
ClientApp code as ``flwr run``, without Ray or a SuperLink. Message contents are
serialised both ways so the clients see what a real transport delivers.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Iterable, Mapping
from typing import Any
from uuid import uuid4

from flwr.app import Context, Error, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fedapp.faults import Stalled, simulated_stalls


def _copy(content: RecordDict) -> RecordDict:
    """A deep copy through serialisation, as a transport would make it."""
    from flwr.common.serde import recorddict_from_proto, recorddict_to_proto

    return recorddict_from_proto(recorddict_to_proto(content))


class InProcessGrid(Grid):
    """Nodes ``101..100+n`` with node config ``partition-id = i``; replies computed on push.

    A client that stalls (``fedapp.faults``) is a reply that never arrives: exchanges return
    without it, as a real grid does after ``round-timeout``, but without waiting.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: Mapping[str, Any],
                 node_configs: list[dict] | None = None, run_id: int = 1):
        self.client_app = client_app
        self.run_config = dict(run_config)
        self.run_id = run_id
        configs = node_configs or [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
        self.contexts = {101 + i: Context(run_id, 101 + i, dict(c), RecordDict(), self.run_config)
                         for i, c in enumerate(configs)}
        # Messages take their run and source from the process's task identity, as in a ServerApp.
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, SUPERLINK_NODE_ID
        self._replies: dict[str, Message] = {}
        # node ids that answer discovery but no training or evaluation message: connected
        # nodes that drop out (the reference run for faulty clients)
        self.offline: set[int] = set()

    def set_run(self, run) -> None:
        self._run = run

    @property
    def run(self):
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None) -> Message:
        return Message(content, dst_node_id=dst_node_id, message_type=message_type, group_id=group_id, ttl=ttl)

    def get_node_ids(self) -> Iterable[int]:
        return list(self.contexts)

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            mid = uuid4().hex
            msg.metadata.__dict__.update(_message_id=mid, _created_at=time.time())
            ids.append(mid)
            node = msg.metadata.dst_node_id
            if node in self.offline and msg.metadata.message_type != MessageType.QUERY:
                continue
            incoming = Message(_copy(msg.content), dst_node_id=node, message_type=msg.metadata.message_type)
            incoming.metadata.__dict__.update(msg.metadata.__dict__)
            try:
                with simulated_stalls():
                    reply = self.client_app(incoming, self.contexts[node])
                reply = Message(_copy(reply.content), reply_to=msg)
            except Stalled:
                continue
            except Exception as exc:  # a failing client becomes an error reply, as in Flower
                reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"),
                                reply_to=msg)
            self._replies[mid] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self._replies.pop(m) for m in message_ids if m in self._replies]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def run_local(run_config: Mapping[str, Any], num_nodes: int | None = None, client_app: ClientApp | None = None,
              grid: InProcessGrid | None = None):
    """Run the ServerApp's main loop in this process over an InProcessGrid; returns the strategy."""
    from fedapp.client_app import app as default_client_app
    from fedapp.config import parse_run_config
    from fedapp.server_app import run

    cfg = parse_run_config(run_config)
    grid = grid or InProcessGrid(client_app or default_client_app, num_nodes or cfg.num_clients, run_config)
    return run(grid, run_config)
