"""One exchange of a round: the messages' contents and configs, and the replies as they arrive.

:class:`Exchange` builds each client's message (``contents``, ``messages``: the round's payloads,
fedapp's protocol keys and a fresh ``reply-nonce``), sends them and takes the replies within the
round's time-out, counting bytes both ways; a reply's arrays are bounded as they arrive and go to
disk (``fedapp.server.spill``) where the exchange's replies would not fit ``reply-memory-mb``. It
keeps what the replies are checked against until the round reads them (``sent``, ``nonces``,
``spilled``, ``oversized``) and the round's drops by reason.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable, Mapping
from logging import WARNING
from typing import Any

from flwr.app import ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.records import (Payload, RecordStore, content_bytes, declared_bytes, make_content, oversize,
                                 spec_bytes, to_record)
from fedapp.server.discovery import Federation
from fedapp.server.hooks import RoundHooks
from fedapp.server.replies import REPLY_ARRAYS_MARGIN, Spec
from fedapp.server.spill import SpilledContent, spill
from fedapp.server.transport import send_and_receive

#: config keys every message carries for fedapp's protocol (``Exchange.contents``, ``Exchange.messages``)
MESSAGE_KEYS = ("server-round", "partition-id", "run-key", "reply-nonce", "state-round", "state-keep")


def message_config(phase: str, given: Mapping, own: Mapping) -> dict[str, Any]:
    """A message's config: ``start``'s config of ``phase`` (``given``; its settings already taken into
    the run config, ``strategies.settings.honour``) with the strategy's ``own`` keys. A key of both with two
    values, or one of fedapp's ``MESSAGE_KEYS``, is refused in one line naming both."""
    for key, value in given.items():
        if key in MESSAGE_KEYS or (key in own and own[key] != value):
            theirs = f"'{key}' = {own[key]!r}" if key in own else f"'{key}' (the message's {key})"
            raise ConfigError(f"{phase}_config['{key}'] = {value!r} clashes with fedapp's {theirs} in the same "
                              "config: leave it out or name it otherwise")
    return {**dict(given), **dict(own)}


class Exchange:
    """The messages to ``nodes``' clients of ``strategy`` (``RoundHooks``) and their replies."""

    def __init__(self, strategy: RoundHooks, nodes: Federation):
        self.strategy, self.nodes = strategy, nodes
        self.traffic: Counter = Counter()  # this round's bytes and parameters, each way
        self.dropped: Counter = Counter()  # this round's dropped replies by reason
        self.sent: dict[int, Payload] = {}  # partition id -> the arrays sent to it in the current exchange
        #: partition id -> the ``reply-nonce`` of the message it was sent in the current exchange
        self.nonces: dict[int, int] = {}
        #: id of a message of the last exchange -> its reply's arrays on disk (``reply-memory-mb``),
        #: until the round reads them
        self.spilled: dict[str, SpilledContent] = {}
        #: id of a message of the last exchange -> why its reply's arrays were too large to keep
        self.oversized: dict[str, str] = {}

    @property
    def cfg(self) -> RunConfig:
        return self.strategy.cfg

    def messages(self, contents: Mapping[int, RecordDict], message_type: str) -> list[Message]:
        """One message per partition id; each config names the run and the client state version to
        start from and to keep (``state-round``, ``state-keep``: fedapp.runtime.client_app), and carries a
        fresh random ``reply-nonce`` that the reply must echo (``fedapp.server.replies.check_nonce``)."""
        strategy = self.strategy
        self.nonces = {pid: secrets.randbits(52) for pid in contents}  # exact as a float metric too
        for pid, c in contents.items():
            if "config" not in c.config_records:
                c["config"] = ConfigRecord({})
            c["config"]["run-key"] = strategy.run_key
            c["config"]["reply-nonce"] = self.nonces[pid]
            c["config"]["state-round"] = strategy.state_rounds.get(pid, 0)
            c["config"]["state-keep"] = strategy.kept_state_rounds.get(pid, 0)
        return [Message(c, dst_node_id=self.nodes.clients[pid].node_id, message_type=message_type)
                for pid, c in contents.items()]

    def contents(self, server_round: int, payloads: Mapping[int, Mapping], config: Mapping | Callable[[int], Mapping],
                 broadcast: Mapping | None = None, shared: Mapping | None = None) -> dict[int, RecordDict]:
        """One message content per partition id: the ``broadcast`` records (converted once, the same for
        every client), then its own payload's records, and ``config`` (or ``config(pid)``) with
        ``server-round`` and ``partition-id``. ``shared``: the exchange's named arrays, which payload
        entries name with ``Shared(name)``; each is converted once, whoever names it. What each client
        is sent is noted in ``sent``: the robust screen measures updates against it."""
        store = RecordStore(shared)
        broadcast = dict(broadcast or {})
        common = {name: to_record(tensors) for name, tensors in broadcast.items()}
        per_client = config if callable(config) else lambda pid: config
        self.sent = {pid: {**broadcast, **{name: store.tensors(e) for name, e in payload.items()}}
                     for pid, payload in payloads.items()}
        return {pid: make_content({**common, **{name: store.record(e) for name, e in payload.items()}},
                                  {**dict(per_client(pid)), "server-round": server_round, "partition-id": pid})
                for pid, payload in payloads.items()}

    def bounds(self, msgs: list[Message], traffic: str, expected: Mapping[int, Spec | None] | None) -> dict[int, int]:
        """Node id -> most array bytes its reply may declare (``exchange``); the messages' bytes and
        parameters counted as sent."""
        bound: dict[int, int] = {}
        for msg in msgs:
            nbytes, params = content_bytes(msg.content)
            self.traffic[f"{traffic}-bytes-down"] += nbytes
            self.traffic[f"{traffic}-params-down"] += params
            bound[msg.metadata.dst_node_id] = int(REPLY_ARRAYS_MARGIN * sum(
                declared_bytes(a) for r in msg.content.array_records.values() for a in r.values()))
        for pid, spec in (expected or {}).items():
            if spec is not None and pid in self.nodes.clients:
                bound[self.nodes.clients[pid].node_id] = int(REPLY_ARRAYS_MARGIN * spec_bytes(spec))
        return bound

    def exchange(self, grid: Grid, msgs: list[Message], traffic: str = "train",
                 expected: Mapping[int, Spec | None] | None = None) -> list[Message]:
        """Send the messages and return the replies, counting bytes both ways. A reply's arrays are
        bounded as it arrives, from their metadata and byte lengths, before anything is decoded,
        spilled or kept: by ``REPLY_ARRAYS_MARGIN`` times the bytes of the arrays ``expected`` asks
        of its partition, or where that asks none (evaluation) of the arrays it was sent. A reply over
        its bound keeps only its other records and is dropped as ``oversized`` by ``parse_replies``."""
        bound = self.bounds(msgs, traffic, expected)
        budget, self.spilled, self.oversized = self.cfg.reply_memory_mb * 2**20, {}, {}

        def arrived(msg: Message) -> Message:
            if msg.has_content():
                nbytes, params = content_bytes(msg.content)
                self.traffic[f"{traffic}-bytes-up"] += nbytes
                self.traffic[f"{traffic}-params-up"] += params
                why = oversize(msg.content, bound.get(msg.metadata.src_node_id, 0))
                if why is not None:  # let go of its arrays now
                    self.oversized[msg.metadata.reply_to_message_id] = why
                    msg.content = RecordDict({k: r for k, r in msg.content.items() if not isinstance(r, ArrayRecord)})
                elif nbytes * len(msgs) > budget:  # all of them together would not fit: to disk now
                    msg.content, spilled = spill(msg.content, self.cfg.state_spill_dir or None)
                    self.spilled[msg.metadata.reply_to_message_id] = spilled
            return msg

        replies = send_and_receive(grid, msgs, self.cfg.round_timeout, arrived) if msgs else []
        missing = len(msgs) - len(replies)
        if missing:
            self.drop("timeout", missing)
        return replies

    def drop(self, reason: str, count: int = 1, pid: int | None = None, detail: str = "") -> None:
        """Count ``count`` dropped replies under ``reason`` (the row's dropped-reasons key)."""
        self.dropped[reason] += count
        log(WARNING, "dropped %d repl%s%s: %s", count, "y" if count == 1 else "ies",
            "" if pid is None else f" from partition {pid}", detail or reason)
