"""A round of any fedapp strategy, top to bottom: the one place the server's machinery meets an algorithm.

:class:`Driver` (a strategy's ``driver``) runs a training round as ``configure`` (the strategy's
``begin`` hook, the seeded sample, each client's message from the payload and config hooks), the
exchange (``fedapp.server.exchange``), ``parse_replies`` (``fedapp.server.replies``' checks and the
robust screen of ``fedapp.server.screens``) and ``aggregate_train`` (the strategy's ``aggregate``
hook); an evaluation likewise. Flower's verbs on the strategy delegate here. An algorithm whose
round is several exchanges builds it from the narrow surface offered to it: ``round_trip``,
``round_sample``, ``train_pool`` and ``clients``. The loop over rounds and the rows are
``fedapp.server.loop``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from logging import WARNING
from typing import Any

import numpy as np
from flwr.app import ArrayRecord, Message, MessageType, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid

from fedapp.core.config import RunConfig
from fedapp.core.records import payload_of
from fedapp.core.training import evaluate
from fedapp.server import screens
from fedapp.server.discovery import ClientInfo, Federation
from fedapp.server.exchange import Exchange, message_config
from fedapp.server.hooks import RoundHooks, own_hook
from fedapp.server.replies import FLOWER_METRICS, Reply, Spec, check_nonce, check_reply


class Driver:
    """Runs one strategy's rounds; ``strategy`` supplies the hooks (``RoundHooks``); ``private_round``
    is a training round through Flower's DP wrapper (``strategies.privacy.private_round``), run under
    the run config's ``dp``."""

    def __init__(self, strategy: RoundHooks,
                 private_round: Callable[[RoundHooks, int, Grid], dict[str, Any]] | None = None):
        self.strategy, self.private_round = strategy, private_round
        self.nodes = Federation(strategy, lambda: bool(self.history))  # the clients, by partition id
        self.wire = Exchange(strategy, self.nodes)  # this exchange's messages, replies and drops
        #: this round's reply metrics by phase, under their clients' names (``named_metrics``), for Flower's Result
        self.named: dict[str, dict[str, float]] = {}
        self.clipped = 0  # this round's replies scaled down to the norm bound (robust)
        self.state_holders: set[int] = set()  # partition ids that reported committing client state
        self.state_lost: set[int] = set()  # partition ids that did not hold the state version asked for
        # the run state (checkpoints carry history and totals: fedapp.runtime.checkpoint)
        self.history: list[dict[str, Any]] = []  #: the rows of the rounds run, round 0 first
        self.totals: Counter = Counter()  #: traffic since round 1
        self.reported_lost: set[int] = set()  # partition ids whose lost state a row has reported

    @property
    def cfg(self) -> RunConfig:
        return self.strategy.cfg  # start() may replace it (num_rounds, timeout)

    @property
    def clients(self) -> dict[int, ClientInfo]:
        """The discovered clients by partition id (``Federation.clients``)."""
        return self.nodes.clients

    # ---- what an algorithm's own round calls ---------------------------------------------
    def train_pool(self) -> list[int]:
        return self.nodes.train_pool()

    def round_sample(self, phase: str, server_round: int) -> list[int]:
        return self.nodes.round_sample(phase, server_round)

    def round_trip(self, grid: Grid, server_round: int, payloads: Mapping[int, Mapping],
                   config: Mapping | Callable[[int], Mapping], spec: Callable[[int], Spec | None] | None,
                   message_type: str = MessageType.TRAIN, traffic: str = "train",
                   broadcast: Mapping | None = None, shared: Mapping | None = None) -> list[Reply]:
        """One exchange with each client in ``payloads``: the messages (``start``'s train or evaluate
        config below ``config``; ``broadcast``: arrays every one gets; ``shared``: named arrays the
        payloads name), bytes and drops counted, and the valid replies, each checked against
        ``spec(pid)`` (None: no arrays checked, as for evaluation replies). Every exchange of a round
        beyond Flower's configure/aggregate pair goes through here (PeFLL's phases, pFedHN, FedALS's
        body collection, HCCT's newcomers)."""
        phase = "train" if message_type == MessageType.TRAIN else "evaluate"
        base = self.strategy.base_config[phase]
        per_client = config if callable(config) else lambda pid: config
        contents = self.wire.contents(server_round, payloads, lambda pid: message_config(phase, base, per_client(pid)),
                                      broadcast, shared)
        expected = {pid: None if spec is None else spec(pid) for pid in contents}
        return self.parse_replies(self.wire.exchange(grid, self.wire.messages(contents, message_type), traffic,
                                                     expected), expected)

    # ---- one round: configure, exchange, aggregate ----------------------------------------
    def train_round(self, server_round: int, grid: Grid) -> dict[str, Any]:
        """One round of training: ``configure`` (the strategy's ``begin("train")`` work, then the
        messages), the exchange, ``aggregate_train`` (under ``dp``, those of Flower's DP wrapper
        around the strategy: strategies.privacy); the row's entries, with the strategy's own
        ``round_row`` where it has one. A strategy with its own round (``OwnHooks.train_round``) runs that."""
        strategy = self.strategy
        if own := own_hook(strategy, "train_round"):
            return own(server_round, grid)
        if self.cfg.dp != "none":
            metrics = self.private_round(strategy, server_round, grid)
        else:
            msgs = self.configure("train", server_round, strategy.base_config["train"], grid)
            replies = self.wire.exchange(grid, msgs, expected=strategy.expected["train"])
            metrics = dict(self.aggregate_train(server_round, replies)[1] or {})
        row = own_hook(strategy, "round_row")
        return {**metrics, **(row(server_round) if row else {})}

    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, Any]:
        """One evaluation: ``configure`` (the strategy's ``begin("evaluate")`` work, then the
        messages), the exchange, ``aggregate_evaluate`` (pooled ``fed-*`` metrics), each client's
        accuracy by partition id, and the central evaluation (``central-*``). A strategy with its own
        evaluation (``OwnHooks.evaluate_round``) runs that."""
        strategy, out = self.strategy, {}
        if own := own_hook(strategy, "evaluate_round"):
            return own(server_round, grid)
        strategy.client_evals = []
        msgs = self.configure("evaluate", server_round, strategy.base_config["evaluate"], grid)
        if msgs:
            replies = self.wire.exchange(grid, msgs, traffic="eval", expected=strategy.expected["evaluate"])
            out.update(self.aggregate_evaluate(replies) or {})
            accuracy = {pid: m["accuracy"] for pid, _, m in strategy.client_evals if m["num-examples"] > 0}
            if accuracy:  # per partition id
                out["fed-client-accuracy"] = accuracy
        out.update(self.evaluate_central())
        return out

    def evaluate_central(self) -> dict[str, float]:
        """The strategy's ``central_state`` on the global test set (``central-*``; central-eval)."""
        s = self.strategy
        state = s.central_state() if self.cfg.central_eval and s.dataset is not None else None
        if state is None:
            return {}
        s.model.load_state_dict(state)
        ds = s.dataset
        m = evaluate(s.model, ds.test_x, ds.test_y, mean=ds.mean, std=ds.std)
        return {"central-accuracy": m["accuracy"], "central-loss": m["loss"]}

    def configure(self, phase: str, server_round: int, config: Mapping | None, grid: Grid) -> list[Message]:
        """The round's ``phase`` messages: the strategy's ``begin`` work, then one message per sampled
        client (none for evaluation at fraction-evaluate 0); what each reply must carry noted in the
        strategy's ``expected``."""
        strategy = self.strategy
        strategy.begin(phase, server_round, grid)
        contents = self.sampled_contents(phase, server_round, config)
        strategy.expected[phase] = ({pid: strategy.reply_spec(pid, server_round) for pid in contents}
                                    if phase == "train" else dict.fromkeys(contents))
        return self.wire.messages(contents, MessageType.TRAIN if phase == "train" else MessageType.EVALUATE)

    def sampled_contents(self, phase: str, server_round: int, config: Mapping | None = None) -> dict:
        """One ``phase`` message content per client of the round's sample (``round_sample``; none for
        evaluation at fraction-evaluate 0)."""
        if phase == "evaluate" and not self.cfg.fraction_evaluate:
            return {}
        return self.contents(phase, server_round, self.round_sample(phase, server_round), config)

    def contents(self, phase: str, server_round: int, pids: list[int], config: Mapping | None = None) -> dict:
        """One ``phase`` message content per partition id in ``pids`` from the strategy's payload hooks
        (``broadcast_payload``, ``shared_payloads``, ``client_payload``), its config the strategy's
        ``client_config`` over ``config`` (default: ``start``'s config of that phase)."""
        s = self.strategy
        base = s.base_config[phase] if config is None else config
        return self.wire.contents(server_round, {pid: s.client_payload(phase, pid, server_round) for pid in pids},
                                  lambda pid: message_config(phase, base, s.client_config(phase, pid, server_round)),
                                  s.broadcast_payload(phase, server_round), s.shared_payloads(phase, server_round))

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """The valid replies to the last training messages aggregated by the strategy's ``aggregate``;
        the new global model (None without one or when the round is skipped) and the round's metrics."""
        valid = self.parse_replies(replies, self.strategy.expected["train"])
        metrics = {"replies": len(valid)}
        if len(valid) < self.cfg.min_train_nodes:
            log(WARNING, "round %d: %d valid replies < min-train-nodes %d: state unchanged",
                server_round, len(valid), self.cfg.min_train_nodes)
            metrics["skipped"] = 1
            return None, MetricRecord(metrics)
        self.strategy.aggregate(server_round, valid)
        self.named["train"] = self.named_metrics(valid)
        n = sum(r.num_examples for r in valid) or 1
        for key in ("train-loss",):
            if all(key in r.metrics for r in valid):
                metrics[key] = sum(r.metrics[key] * r.num_examples for r in valid) / n
        return self.strategy.global_arrays(), MetricRecord(metrics)

    def aggregate_evaluate(self, replies: Iterable[Message]) -> MetricRecord | None:
        """Pooled metrics of the valid replies to the last evaluation messages (``evaluation_metrics``)."""
        return self.evaluation_metrics(self.parse_replies(replies, self.strategy.expected["evaluate"]))

    def evaluation_metrics(self, valid: list[Reply]) -> MetricRecord | None:
        """Pooled metrics of valid evaluation replies (``fed-*``); their clients in the strategy's
        ``client_evals``."""
        unseen = self.strategy.unseen
        self.strategy.client_evals = [(r.pid, r.pid in unseen, r.metrics) for r in valid]
        if not valid:
            return None
        self.named["evaluate"] = self.named_metrics(valid)
        return MetricRecord(pooled_metrics(valid, unseen))

    def named_metrics(self, replies: list[Reply]) -> dict[str, float]:
        """The replies' metrics under the names their clients gave them (a plain Flower ClientApp's
        ``eval_acc`` as ``eval_acc``), each that every reply carries averaged weighted by
        ``num-examples``, as Flower's ``aggregate_metricrecords`` does: Flower's ``Result`` holds
        them beside fedapp's pooled ``fed-*`` metrics."""
        theirs = {ours: name for name, ours in FLOWER_METRICS.items()}
        named = [{theirs.get(k, k) if self.clients[r.pid].plain else k: v for k, v in r.metrics.items()}
                 for r in replies]
        weights = np.array([r.num_examples for r in replies], dtype=float)
        if not named or weights.sum() <= 0:
            return {}
        keys = [k for k in named[0] if k != "num-examples" and all(k in m for m in named)]
        return {k: float(np.dot([m[k] for m in named], weights) / weights.sum()) for k in keys}

    # ---- the replies -----------------------------------------------------------------------
    def parse_replies(self, replies: Iterable[Message], expected: Mapping[int, Spec | None]) -> list[Reply]:
        """Valid replies only: no error, a known partition id answering once, the expected
        arrays, finite values and scalar metrics (``fedapp.server.replies.check_reply``), and the
        ``reply-nonce`` of the message the partition was sent in this exchange (a reply made for
        another message, such as an earlier round's reply sent again, is dropped as ``replayed``).
        Every multi-phase ``train_round`` passes its replies through here, so no aggregation ever
        sees a bad one. A reply's ``num-examples`` is capped by the split size the client reported
        at discovery, and replies carrying arrays are screened and clipped (:meth:`robust`).

        ``expected`` maps each addressed partition id to the arrays its reply must carry
        (names, shapes, dtypes); ``None`` skips the array check (evaluation replies).
        """
        node_to_pid = {self.clients[pid].node_id: pid for pid in expected}
        valid: dict[int, Reply] = {}
        for msg in replies:
            pid = node_to_pid.get(msg.metadata.src_node_id)
            reply = self.read_reply(msg, pid, expected, pid in valid)
            if reply is not None:
                valid[pid] = reply
        out = [valid[pid] for pid in sorted(valid)]
        out = self.robust(out) if any(s is not None for s in expected.values()) else out
        for r in out:  # the state versions the server's state now builds on (fedapp.runtime.client_app)
            if "state-round" in r.metrics:
                self.strategy.state_rounds[r.pid] = int(r.metrics["state-round"])
                self.state_holders.add(r.pid)
            if r.metrics.get("state-missing"):
                self.state_lost.add(r.pid)
        return out

    def read_reply(self, msg: Message, pid: int | None, expected: Mapping[int, Spec | None], seen: bool
                   ) -> Reply | None:
        """The reply of ``msg`` (from partition ``pid``, which has answered already where ``seen``),
        or None, dropped with its reason, where it is not valid."""
        wire = self.wire
        if msg.has_error():
            # counted by the error's first line (same failure, same key); the log has more
            first = (msg.error.reason or "?").strip().splitlines()[0][:120]
            wire.drop(f"client-error: {first}", pid=pid, detail=msg.error.reason[:500])
            return None
        why = wire.oversized.pop(msg.metadata.reply_to_message_id, None)
        if why is not None:
            wire.drop("oversized", pid=pid, detail=f"oversized: {why}")
            return None
        spilled = wire.spilled.pop(msg.metadata.reply_to_message_id, None)
        content = msg.content if spilled is None else spilled.content(msg.content)  # one reply at a time
        info = self.clients[pid] if pid is not None else None
        try:
            plain = info is not None and info.plain  # a plain Flower ClientApp cannot echo the nonce
            reason = (check_reply(content, pid, expected.get(pid), plain)
                      or (None if plain else check_nonce(wire.nonces, content, pid)))
        except Exception as exc:  # a reply too odd to check (wrong record types, ...) is bad too
            reason = f"malformed: {type(exc).__name__}: {exc}"
        if reason is None and seen:
            reason = "duplicate"
        if reason:
            wire.drop(reason.split(":")[0], pid=pid, detail=reason)
            return None
        metrics = {FLOWER_METRICS.get(k, k) if info.plain else k: float(v)
                   for k, v in msg.content["metrics"].items() if k != "reply-nonce"}
        split = "num_train" if expected.get(pid) is not None else "num_test"
        if getattr(info, split) is None:  # a plain client's first reply of this kind
            setattr(info, split, int(metrics["num-examples"]))
        cap = getattr(info, split)
        if metrics["num-examples"] > cap:
            log(WARNING, "partition %d claims %d examples, %d at discovery: counted as %d", pid,
                metrics["num-examples"], cap, cap)
            metrics["num-examples"] = float(cap)
        return Reply(pid, payload_of(content) if spilled is None else spilled.payload(), metrics)

    def robust(self, replies: list[Reply]) -> list[Reply]:
        """The replies the run's defence keeps, their updates bounded (``fedapp.server.screens``:
        off by default); the scaled ones counted in the round's ``clipped-replies``."""
        kept, clipped = screens.screen(replies, self.reply_updates, self.cfg, self.wire.drop)
        self.clipped += clipped
        return kept

    def reply_updates(self, reply: Reply) -> screens.Pairs:
        """(record, key) -> (value, reference or None) for every float array of the reply, the
        reference the strategy's ``reference`` hook gives."""
        out = {}
        for name, tensors in reply.payload.items():
            ref = self.strategy.reference(reply.pid, name) or {}
            for k, v in tensors.items():
                if v.is_floating_point():
                    out[name, k] = (v, ref[k] if k in ref and ref[k].shape == v.shape else None)
        return out


def pooled_metrics(valid: list[Reply], unseen: frozenset[int]) -> dict[str, float]:
    """``fed-*`` metrics of evaluation replies: accuracy and loss pooled by example count, the
    clients' accuracy spread, and the same of the seen and the unseen clients."""
    out: dict[str, float] = {}
    groups = {"fed": valid}
    if unseen:
        groups["fed-seen"] = [r for r in valid if r.pid not in unseen]
        groups["fed-unseen"] = [r for r in valid if r.pid in unseen]
    for prefix, rs in groups.items():
        rs = [r for r in rs if r.num_examples > 0]
        if not rs:
            continue
        n = sum(r.num_examples for r in rs)
        accs = np.array([r.metrics["accuracy"] for r in rs])
        out[f"{prefix}-accuracy"] = sum(r.metrics["accuracy"] * r.num_examples for r in rs) / n
        out[f"{prefix}-loss"] = sum(r.metrics["loss"] * r.num_examples for r in rs) / n
        out[f"{prefix}-acc-client-mean"] = float(accs.mean())
        out[f"{prefix}-acc-client-std"] = float(accs.std())
        out[f"{prefix}-acc-client-min"] = float(accs.min())
        out[f"{prefix}-acc-client-max"] = float(accs.max())
        for extra in ("unmasked", "val"):  # pooled like the above where every client reports them
            out.update(pooled_extra(rs, prefix, extra))
    return out


def pooled_extra(rs: list[Reply], prefix: str, extra: str) -> dict[str, float]:
    """``<prefix>-<extra>-accuracy`` / ``-loss`` pooled by ``<extra>-num-examples`` where every reply
    reports them (``unmasked``: without the label mask; ``val``: the validation split)."""
    out = {}
    if all(f"{extra}-accuracy" in r.metrics for r in rs):
        w = np.array([r.metrics[f"{extra}-num-examples"] for r in rs])
        if w.sum() > 0:
            for m in ("accuracy", "loss"):
                vals = np.array([r.metrics[f"{extra}-{m}"] for r in rs])
                out[f"{prefix}-{extra}-{m}"] = float((vals * w).sum() / w.sum())
    return out
