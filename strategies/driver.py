"""The round driver every fedapp strategy holds (``FedStrategy.driver``).

It runs a strategy's rounds over a Flower ``Grid``, once for all algorithms: node discovery keyed
by ``partition-id``, seeded sampling over partition ids, message contents (``contents``: broadcast,
shared and per-client payloads), one exchange with byte and drop accounting (``exchange``), reply
validation with the robust screen (``parse_replies``), ``round_trip`` for every exchange beyond
Flower's configure/aggregate pair, the loop of rounds and evaluations, and per-round results. It
calls the strategy's hooks and keeps only transport state; the strategy keeps its algorithm state,
the clients it knows (``clients``, filled here at discovery) and the rows (``history``).
"""

from __future__ import annotations

import importlib
import math
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from fedapp.core import pickup, sites
from fedapp.core.compat import answers, app_component, flower_grids, lacks_handler
from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.records import (Payload, RecordStore, Tensors, array_numpy, content_bytes, declared_bytes,
                                 make_content, oversize, payload_of, spec_bytes, to_record)
from fedapp.core.spill import SpilledContent, spill


Spec = dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]]


@dataclass
class Reply:
    """One valid client reply, keyed by the partition id the client reported."""

    pid: int
    payload: Payload
    metrics: dict[str, float]

    @property
    def num_examples(self) -> int:
        return int(self.metrics["num-examples"])


@dataclass
class ClientInfo:
    """A connected client. A plain Flower ClientApp (``plain``: it answers no discovery query) is
    keyed by its node id; its split sizes, which cap its replies' ``num-examples``, are the counts
    its first training and first evaluation reply give (None until then)."""

    node_id: int
    num_train: int | None
    num_test: int | None
    unseen: bool
    plain: bool = False


#: metric names of Flower's app templates (``flwr new``) -> fedapp's: a plain Flower ClientApp's
#: replies are read as fedapp's clients' are
FLOWER_METRICS = {"train_loss": "train-loss", "eval_loss": "loss", "eval_acc": "accuracy"}


#: config keys every message carries for fedapp's protocol (``Driver.contents``, ``Driver.messages``)
MESSAGE_KEYS = ("server-round", "partition-id", "run-key", "reply-nonce", "state-round", "state-keep")


def message_config(phase: str, given: Mapping, own: Mapping) -> dict[str, Any]:
    """A message's config: ``start``'s config of ``phase`` (``given``; its settings already taken into
    the run config, ``FedStrategy.honour``) with the strategy's ``own`` keys. A key of both with two
    values, or one of fedapp's ``MESSAGE_KEYS``, is refused in one line naming both."""
    for key, value in given.items():
        if key in MESSAGE_KEYS or (key in own and own[key] != value):
            theirs = f"'{key}' = {own[key]!r}" if key in own else f"'{key}' (the message's {key})"
            raise ConfigError(f"{phase}_config['{key}'] = {value!r} clashes with fedapp's {theirs} in the same "
                              "config: leave it out or name it otherwise")
    return {**dict(given), **dict(own)}


def app_is_plain() -> bool:
    """Whether the Flower app this ServerApp runs in has a plain Flower ClientApp (one with no query
    function), which every SuperNode of its runs loads from the app bundle, simulated or deployed.
    Known so, its nodes are taken without the discovery query: a simulation's engine reports such a
    query's failure as a ClientAppException, logging an ERROR with its traceback. fedapp's own
    ClientApp, or one that cannot be imported here, is asked as usual."""
    ref = app_component("clientapp")
    if ref is None or ref.startswith("fedapp."):
        return False
    module, _, attr = ref.partition(":")
    try:
        app = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return False
    return isinstance(app, ClientApp) and not answers(app, MessageType.QUERY)


def plain_strategies() -> list[str]:
    """The registered strategies that take plain Flower ClientApps (``FedStrategy.plain_clients``)."""
    from fedapp.runtime.registry import algorithms

    return [name for name, spec in algorithms().items() if spec.strategy.plain_clients()]


def scalars(metrics: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric entries of a row (a MetricRecord holds no dicts or strings)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def spec_of(payload: Mapping[str, Tensors]) -> Spec:
    return {name: {k: (tuple(v.shape), v.dtype) for k, v in t.items()} for name, t in payload.items()}


#: most keys in a reply's metrics (fedapp's clients send a few dozen at most)
REPLY_METRICS_MAX_KEYS = 256
#: most bytes of a reply's config and metric records together (Flower's ``count_bytes``)
REPLY_RECORDS_MAX_BYTES = 64 * 2**10

#: how many times the bytes of the arrays a reply should carry its arrays may declare before they are
#: dropped as they arrive (``oversized``); up to it, ``check_reply`` names what is wrong (a float64
#: model is ``wrong-dtype``)
REPLY_ARRAYS_MARGIN = 2.0

#: the direction screen drops a reply whose cosine with the other replies' median update is DIRECTION_Z
#: robust deviations below the round's median cosine and either below -chance (it points against the
#: others) or, where the round's median cosine is beyond chance, below DIRECTION_SHARE of it (it points
#: elsewhere); chance is DIRECTION_Z / sqrt(d) over the d coordinates compared (a random direction's
#: cosine with any fixed vector is ~ N(0, 1/d): 3 is its one-sided 99.87% point). Where that bound
#: exceeds DIRECTION_BOUND_MAX (under 100 coordinates) random and honest cosines overlap, and it is 0
DIRECTION_Z = 3.0
DIRECTION_BOUND_MAX = 0.3
#: in a round whose replies share a direction, an outlier carrying less than this share of the round's
#: median cosine points elsewhere (``against_median``)
DIRECTION_SHARE = 0.5
#: ``defence = "robust"``: each record's norm bound in lower medians of the round's norms of that record.
#: FLAME's 1 median clipped every honest reply above the median and cost an honest federation of 4
#: heterogeneous sites (PeFLL on the plants table) 65 points; at 3 medians the run is the plain mean's
ROBUST_FACTOR = 3.0

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
    take the messages at once (``fedapp.core.pickup``). Each reply goes through ``arrived`` as it
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


def sample_size(pool: int, fraction: float, min_nodes: int) -> int:
    """Clients a round samples from ``pool`` of them: ``fraction`` of it, at least ``min_nodes``."""
    return min(pool, max(min_nodes, int(round(fraction * pool))))


def updates_norm(updates: Mapping[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]) -> float:
    """L2 norm of (value, reference) pairs' differences (a reference None counts as zeros), in float64."""
    return math.sqrt(sum(float(((v.double() - (0.0 if r is None else r.double())) ** 2).sum())
                         for v, r in updates.values()))


def leave_one_out_medians(updates: list[dict[Any, torch.Tensor]]) -> list[dict[Any, torch.Tensor]]:
    """For each update, the coordinate-wise median of the others (as ``np.median`` of them), from one
    sort per key: of the n - 1 values left, the p-th smallest is the sorted p-th, or the (p+1)-th where
    the update left out ranks at or below p."""
    n, out = len(updates), [{} for _ in updates]
    for k in updates[0]:
        stacked = np.stack([u[k].numpy() for u in updates])
        order = np.argsort(stacked, axis=0)
        ranks, ordered = np.empty_like(order), np.take_along_axis(stacked, order, axis=0)
        np.put_along_axis(ranks, order, np.arange(n).reshape((n,) + (1,) * (stacked.ndim - 1)), axis=0)
        middle = [(n - 2) // 2, (n - 1) // 2]  # the middle positions of n - 1 values (one when odd)
        for j in range(n):
            r = ranks[j:j + 1]
            picked = [np.take_along_axis(ordered, p + (r <= p), axis=0)[0] for p in middle]
            out[j][k] = torch.from_numpy(picked[0] if middle[0] == middle[1] else (picked[0] + picked[1]) / 2)
    return out


def against_median(cosine: float, chance: float, low: float, mid: float) -> bool:
    """The direction screen's verdict on a reply (``Driver.median_cosines``' tuple): an outlier below
    the round's cosines (``low``: their median less DIRECTION_Z robust deviations) that points against
    the others' median update beyond chance, or, in a round whose median cosine ``mid`` is beyond
    chance, carries less than DIRECTION_SHARE of it (no more than chance at least). The first test
    holds whatever the round's median: attackers who pull it down (three -10x replies in a round of
    small honest cosines) cannot switch it off. The second catches attackers sharing one direction,
    whose partners in the others' median lift each one's cosine above chance."""
    return cosine < low and (cosine < -chance or (mid > chance and cosine <= max(chance, DIRECTION_SHARE * mid)))


def delta_pairs(pairs: list[dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]]
                ) -> list[dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor]]]:
    """The records that are updates themselves (no reference: control-variate deltas, PeFLL's
    hypernetwork and embedding deltas), each against one shared zero, so that ``median_cosines`` tests
    their direction as one more model; only keys every reply carries in one shape."""
    keys = [k for k, (v, ref) in pairs[0].items() if ref is None
            and all(k in p and p[k][1] is None and p[k][0].shape == v.shape for p in pairs)] if pairs else []
    zeros = {k: torch.zeros_like(pairs[0][k][0]) for k in keys}
    return [{k: (p[k][0], zeros[k]) for k in keys} for p in pairs]


def record_norms(pair: Mapping[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]) -> dict[str, float]:
    """Record name -> the L2 norm of the reply's update of that record (``updates_norm``)."""
    return {name: updates_norm({k: v for k, v in pair.items() if k[0] == name})
            for name in dict.fromkeys(name for name, _ in pair)}


def record_bounds(norms: list[dict[str, float]], factors: Iterable[float]) -> dict[str, float]:
    """Per record name, the norm bound ``min(factors) *`` the lower median of the replies' update
    norms of that record (``norms``: each reply's ``record_norms``); a record no reply moved has none.
    Every record a strategy combines (models, control variates, duals, deltas) is bounded by its own
    replies' norms, so an attacker cannot hide a long update in a record whose norm is small beside
    the model's."""
    factor = min(factors, default=0.0)
    by_record: dict[str, list[float]] = {}
    for reply in norms:
        for name, n in reply.items():
            by_record.setdefault(name, []).append(n)
    medians = {name: sorted(ns)[(len(ns) - 1) // 2] for name, ns in by_record.items()}
    return {name: factor * m for name, m in medians.items() if factor and m > 0}


class RoundHooks(Protocol):
    """What the driver reads and calls on the strategy it runs (``strategies.base.FedStrategy``
    implements it): the settings and algorithm state it keeps, Flower's configure/aggregate pair
    and the round's other hooks; the run state the driver writes (``clients``, ``history``,
    ``totals``) is the driver's own. Declared here so the driver needs no import of the strategy's
    class."""

    cfg: RunConfig
    rng: np.random.Generator
    unseen: frozenset[int]  # partition ids held out as new clients
    base_config: dict[str, dict[str, Any]]  # the config sent with every "train" / "evaluate" message
    run_key: str
    state_rounds: dict[int, int]  # partition id -> the round of the client state it holds
    kept_state_rounds: dict[int, int]
    results_path: Path | None
    # partition id -> the arrays its reply must carry, of the last configure_train / configure_evaluate
    expected: dict[str, dict[int, Spec | None]]
    client_evals: list[tuple[int, bool, dict[str, float]]]  # the last evaluation's (pid, unseen, metrics)

    def plain_clients(self) -> bool: ...
    def client_need(self) -> str: ...
    def global_arrays(self) -> ArrayRecord | None: ...
    def reference(self, pid: int, name: str) -> Tensors | None: ...
    def configure_train(self, server_round: int, arrays: ArrayRecord | None, config: Mapping,
                        grid: Grid) -> list[Message]: ...
    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]: ...
    def configure_evaluate(self, server_round: int, arrays: ArrayRecord | None, config: Mapping,
                           grid: Grid) -> list[Message]: ...
    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None: ...
    def evaluate_central(self) -> dict[str, float]: ...
    def summary(self) -> None: ...


class OwnHooks(Protocol):
    """Hooks an algorithm may add as its own methods, where one algorithm needs them (so the base
    offers no default); the driver and the results find them with :func:`own_hook` only.

    A round the algorithm runs itself, where one configure/aggregate pair is not its round (PeFLL and
    pFedHN: several exchanges a step through ``Driver.round_trip``), replaces the driver's
    ``train_round`` / ``evaluate_round``; Flower's loop cannot drive such a strategy
    (``FedStrategy.check_flower_loop``)."""

    def train_round(self, server_round: int, grid: Grid) -> dict[str, float]: ...
    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, float]: ...
    def round_row(self, server_round: int) -> dict[str, Any]:
        """Entries of a training round's row besides aggregate_train's metrics (HCCT: the groups)."""
    def extra_results(self) -> dict[str, Any]:
        """Entries merged into rounds.json (HCCT: the groups of every round)."""
    def train_pool(self) -> list[int]:
        """Partition ids that take part in training (Local: every client, new ones included)."""
    def present(self, server_round: int, pool: list[int]) -> list[int]:
        """The clients of ``pool`` that take part in ``server_round`` (HCCT: those arrived by then)."""


def own_hook(strategy: object, name: str) -> Callable | None:
    """The strategy's own hook ``name`` (one that ``OwnHooks`` declares), or None when it has none."""
    if name not in OwnHooks.__dict__:
        raise AttributeError(f"{name} is no hook of OwnHooks")
    return getattr(strategy, name, None)


class Driver:
    """Runs one strategy's rounds; ``strategy`` supplies the hooks (``RoundHooks``)."""

    def __init__(self, strategy: RoundHooks,
                 private_round: Callable[[RoundHooks, int, Grid], dict[str, Any]] | None = None):
        self.strategy = strategy
        #: a training round through Flower's DP wrapper (``strategies.privacy.private_round``): the
        #: round under the run config's ``dp`` (FedStrategy passes it)
        self.private_round = private_round
        # the run state the driver writes (checkpoints carry history and totals: fedapp.runtime.checkpoint)
        self.clients: dict[int, ClientInfo] = {}  #: partition id -> its node, found at discovery
        #: this round's reply metrics by phase, under their clients' names (``named_metrics``), for Flower's Result
        self.named: dict[str, dict[str, float]] = {}
        self.history: list[dict[str, Any]] = []  #: the rows of the rounds run, round 0 first
        self.totals: Counter = Counter()  #: traffic since round 1
        #: node id -> the partition id it claimed that another node serves (-1: a plain Flower
        #: ClientApp the strategy cannot use)
        self.refused: dict[int, int] = {}
        #: the ``site-keys`` table (key fingerprint -> site; fedapp.core.sites), set by the ServerApp in a
        #: deployment that binds partitions to SuperNode keys; None: ``first_keys``, else the first node to
        #: claim a partition serves it
        self.sites: dict[str, sites.Site] | None = None
        self.unbound: dict[int, str] = {}  # node id -> why its key may not serve the partition it claims
        #: without ``sites``, where the SuperLink authenticates SuperNodes (set to {} by the ServerApp): key
        #: fingerprint -> the partition it claimed first, bound to it (sites.bind_first); None: off
        self.first_keys: dict[str, sites.Site] | None = None
        self.traffic: Counter = Counter()  # this round's bytes and parameters, each way
        self.dropped: Counter = Counter()  # this round's dropped replies by reason
        self.clipped = 0  # this round's replies scaled down to the norm bound (robust)
        self.sent: dict[int, Payload] = {}  # partition id -> the arrays sent to it in the current exchange
        #: partition id -> the ``reply-nonce`` of the message it was sent in the current exchange
        self.nonces: dict[int, int] = {}
        #: id of a message of the last exchange -> its reply's arrays on disk (``reply-memory-mb``),
        #: until parse_replies reads them
        self.spilled: dict[str, SpilledContent] = {}
        #: id of a message of the last exchange -> why its reply's arrays were too large to keep
        self.oversized: dict[str, str] = {}
        self.state_holders: set[int] = set()  # partition ids that reported committing client state
        self.state_lost: set[int] = set()  # partition ids that did not hold the state version asked for
        self.reported_lost: set[int] = set()
        self.plain_app: bool | None = None  # app_is_plain(), found at the first discovery on Flower's grids

    @property
    def cfg(self) -> RunConfig:
        return self.strategy.cfg  # start() may replace it (num_rounds, timeout)

    # ---- nodes and sampling ----------------------------------------------------------
    def discover(self, grid: Grid, wait: float = 0.0) -> None:
        """Ask unknown nodes for their partition id; wait up to ``wait`` s for num-clients. With a
        ``site-keys`` table (``sites``) a node serves the partition it claims only if its key is
        bound to it; other nodes are refused (asked again at the next call: a site may have fixed
        its partition-id and restarted). Without one, under SuperNode authentication (``first_keys``),
        the first key to claim a partition is bound to it (``sites.bind_first``)."""
        deadline, clients = time.time() + wait, self.clients
        unbound: set[int] = set()  # refused for their keys in this call
        while True:
            online = set(grid.get_node_ids())
            known = {c.node_id for c in clients.values()} | unbound
            # a refused node is asked again once the node serving its partition is gone
            known |= {n for n, pid in self.refused.items() if pid < 0 or clients[pid].node_id in online}
            new = [n for n in online if n not in known]
            if new and self.plain_app is None:
                self.plain_app = isinstance(grid, flower_grids()) and app_is_plain()
            if new and self.plain_app:
                for node in new:
                    self.plain_client(node)
            elif new:
                keys = {} if self.sites is None and self.first_keys is None else {
                    n.node_id: n.public_key for n in grid.get_nodes()}
                msgs = [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=n,
                                message_type=MessageType.QUERY) for n in new]
                for msg in send_and_receive(grid, msgs, self.cfg.round_timeout):
                    if msg.has_error() and lacks_handler(msg.error, MessageType.QUERY):
                        self.plain_client(msg.metadata.src_node_id)
                        continue
                    if msg.has_error():
                        log(WARNING, "node %s did not answer discovery: %s", msg.metadata.src_node_id,
                            msg.error.reason)
                        continue
                    m = msg.content["metrics"]
                    if "num-partitions" in m and int(m["num-partitions"]) != self.cfg.num_clients:
                        raise ConfigError(
                            f"the federation has {int(m['num-partitions'])} simulated SuperNodes but run config "
                            f"'num-clients' = {self.cfg.num_clients}: make them equal (options.num-supernodes "
                            "in $FLWR_HOME/config.toml, or python -m fedapp.runtime.launch, which sets it)")
                    pid, node = int(m["partition-id"]), msg.metadata.src_node_id
                    pem = keys.get(node)
                    if why := (sites.refusal(self.sites, node, pem, pid) if self.sites is not None else
                               sites.bind_first(self.first_keys, node, pem, pid) if self.first_keys is not None
                               else None):
                        if self.unbound.get(node) != why:
                            log(WARNING, why)
                        self.unbound[node] = why
                        unbound.add(node)
                        continue
                    self.unbound.pop(node, None)
                    owner = clients.get(pid)
                    if owner is not None and owner.node_id != node and owner.node_id in online:
                        if self.refused.get(node) != pid:
                            log(WARNING, "node %s refused: it claims partition %d, which node %s serves", node, pid,
                                owner.node_id)
                        self.refused[node] = pid
                        continue
                    self.refused.pop(node, None)
                    clients[pid] = ClientInfo(msg.metadata.src_node_id, int(m["num-train"]), int(m["num-test"]),
                                              pid in self.strategy.unseen)
            if len(clients) >= self.cfg.num_clients or time.time() >= deadline:
                return
            time.sleep(1.0)

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

    def plain_client(self, node: int) -> None:
        """Take node ``node``, whose ClientApp has no query function (a plain Flower ClientApp),
        as a client keyed by its node id, where the strategy's clients need no step of their own
        (``FedStrategy.plain_clients``). Before round 1 (``history`` empty) a strategy that needs
        its own client refuses the run in one line; a node joining later is left out, with a warning."""
        strategy = self.strategy
        if strategy.plain_clients():
            self.clients[node] = ClientInfo(node, None, None, False, plain=True)
            return
        need = strategy.client_need()
        if not self.history:
            raise ConfigError(f"node {node} runs a plain Flower ClientApp (it answers no discovery query), which "
                              f"lacks {need}: run fedapp's ClientApp there, or a strategy whose clients only train "
                              f"the model they receive ({', '.join(plain_strategies())})")
        if node not in self.refused:
            log(WARNING, "node %s left out: it runs a plain Flower ClientApp, which lacks %s", node, need)
        self.refused[node] = -1

    def sample(self, pool: list[int], fraction: float) -> list[int]:
        """Seeded sample of ``fraction`` of ``pool`` (at least min-train-nodes), sorted. Drawn as
        positions in ``pool`` (the same draw as of the ids themselves): plain clients are keyed by
        64-bit node ids, which NumPy turns into float64, losing digits, when some lie above 2**63."""
        n = sample_size(len(pool), fraction, self.cfg.min_train_nodes)
        return sorted(int(pool[i]) for i in self.strategy.rng.choice(len(pool), size=n, replace=False))

    def train_pool(self) -> list[int]:
        """Partition ids that take part in training: the connected seen clients, or the strategy's
        own ``train_pool`` (Local's: every client)."""
        if own := own_hook(self.strategy, "train_pool"):
            return own()
        return sorted(pid for pid, c in self.clients.items() if not c.unseen)

    def round_sample(self, phase: str, server_round: int) -> list[int]:
        """The clients of a round's ``phase``: the seeded sample of fraction-train of the training
        pool ("train"), or of fraction-evaluate of all clients ("evaluate"), of those present (the
        strategy's own ``present``: HCCT's arrived clients)."""
        strategy, cfg = self.strategy, self.cfg
        pool = self.train_pool() if phase == "train" else sorted(self.clients)
        if present := own_hook(strategy, "present"):
            pool = present(server_round, pool)
        return self.sample(pool, cfg.fraction_train if phase == "train" else cfg.fraction_evaluate)

    # ---- messages --------------------------------------------------------------------
    def messages(self, contents: Mapping[int, RecordDict], message_type: str) -> list[Message]:
        """One message per partition id; each config names the run and the client state version to
        start from and to keep (``state-round``, ``state-keep``: fedapp.runtime.client_app), and carries a
        fresh random ``reply-nonce`` that the reply must echo (:meth:`parse_replies`)."""
        strategy = self.strategy
        self.nonces = {pid: secrets.randbits(52) for pid in contents}  # exact as a float metric too
        for pid, c in contents.items():
            if "config" not in c.config_records:
                c["config"] = ConfigRecord({})
            c["config"]["run-key"] = strategy.run_key
            c["config"]["reply-nonce"] = self.nonces[pid]
            c["config"]["state-round"] = strategy.state_rounds.get(pid, 0)
            c["config"]["state-keep"] = strategy.kept_state_rounds.get(pid, 0)
        return [Message(c, dst_node_id=self.clients[pid].node_id, message_type=message_type)
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
        contents = self.contents(server_round, payloads, lambda pid: message_config(phase, base, per_client(pid)),
                                 broadcast, shared)
        expected = {pid: None if spec is None else spec(pid) for pid in contents}
        return self.parse_replies(self.exchange(grid, self.messages(contents, message_type), traffic, expected),
                                  expected)

    def exchange(self, grid: Grid, msgs: list[Message], traffic: str = "train",
                 expected: Mapping[int, Spec | None] | None = None) -> list[Message]:
        """Send the messages and return the replies, counting bytes both ways. A reply's arrays are
        bounded as it arrives, from their metadata and byte lengths, before anything is decoded,
        spilled or kept: by ``REPLY_ARRAYS_MARGIN`` times the bytes of the arrays ``expected`` asks
        of its partition, or where that asks none (evaluation) of the arrays it was sent. A reply over
        its bound keeps only its other records and is dropped as ``oversized`` by ``parse_replies``."""
        bound: dict[int, int] = {}  # node id -> most array bytes its reply may declare
        for msg in msgs:
            nbytes, params = content_bytes(msg.content)
            self.traffic[f"{traffic}-bytes-down"] += nbytes
            self.traffic[f"{traffic}-params-down"] += params
            bound[msg.metadata.dst_node_id] = int(REPLY_ARRAYS_MARGIN * sum(
                declared_bytes(a) for r in msg.content.array_records.values() for a in r.values()))
        for pid, spec in (expected or {}).items():
            if spec is not None and pid in self.clients:
                bound[self.clients[pid].node_id] = int(REPLY_ARRAYS_MARGIN * spec_bytes(spec))
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

    def parse_replies(self, replies: Iterable[Message], expected: Mapping[int, Spec | None]) -> list[Reply]:
        """Valid replies only: no error, a known partition id answering once, the expected
        arrays, finite values and scalar metrics (config and metric records within
        ``REPLY_METRICS_MAX_KEYS`` and ``REPLY_RECORDS_MAX_BYTES``, else ``oversized``), and the
        ``reply-nonce`` of the message the partition was sent in this exchange (a reply made for
        another message, such as an earlier round's reply sent again, is dropped as ``replayed``).
        Every multi-phase ``train_round`` passes its
        replies through here, so no aggregation ever sees a bad one. A reply's ``num-examples``
        is capped by the split size the client reported at discovery, and replies carrying
        arrays are screened and clipped (:meth:`robust`).

        ``expected`` maps each addressed partition id to the arrays its reply must carry
        (names, shapes, dtypes); ``None`` skips the array check (evaluation replies).
        """
        node_to_pid = {self.clients[pid].node_id: pid for pid in expected}
        valid: dict[int, Reply] = {}
        for msg in replies:
            pid = node_to_pid.get(msg.metadata.src_node_id)
            if msg.has_error():
                # counted by the error's first line (same failure, same key); the log has more
                first = (msg.error.reason or "?").strip().splitlines()[0][:120]
                self.drop(f"client-error: {first}", pid=pid, detail=msg.error.reason[:500])
                continue
            why = self.oversized.pop(msg.metadata.reply_to_message_id, None)
            if why is not None:
                self.drop("oversized", pid=pid, detail=f"oversized: {why}")
                continue
            spilled = self.spilled.pop(msg.metadata.reply_to_message_id, None)
            content = msg.content if spilled is None else spilled.content(msg.content)  # one reply at a time
            info = self.clients[pid] if pid is not None else None
            try:
                plain = info is not None and info.plain  # a plain Flower ClientApp cannot echo the nonce
                reason = (self.check_reply(content, pid, expected.get(pid), plain)
                          or (None if plain else self.check_nonce(content, pid)))
            except Exception as exc:  # a reply too odd to check (wrong record types, ...) is bad too
                reason = f"malformed: {type(exc).__name__}: {exc}"
            if reason is None and pid in valid:
                reason = "duplicate"
            if reason:
                self.drop(reason.split(":")[0], pid=pid, detail=reason)
                continue
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
            valid[pid] = Reply(pid, payload_of(content) if spilled is None else spilled.payload(), metrics)
        out = [valid[pid] for pid in sorted(valid)]
        out = self.robust(out) if any(s is not None for s in expected.values()) else out
        for r in out:  # the state versions the server's state now builds on (fedapp.runtime.client_app)
            if "state-round" in r.metrics:
                self.strategy.state_rounds[r.pid] = int(r.metrics["state-round"])
                self.state_holders.add(r.pid)
            if r.metrics.get("state-missing"):
                self.state_lost.add(r.pid)
        return out

    # ---- robust screen -----------------------------------------------------------------
    def reply_updates(self, reply: Reply) -> dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]:
        """(record, key) -> (value, reference or None) for every float array of the reply."""
        out = {}
        for name, tensors in reply.payload.items():
            ref = self.strategy.reference(reply.pid, name) or {}
            for k, v in tensors.items():
                if v.is_floating_point():
                    out[name, k] = (v, ref[k] if k in ref and ref[k].shape == v.shape else None)
        return out

    def update_norm(self, reply: Reply) -> float:
        """L2 norm of the reply's update (its float arrays less their references), in float64."""
        return updates_norm(self.reply_updates(reply))

    @staticmethod
    def median_cosines(pairs: list[dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]]
                       ) -> list[tuple[float, float, float, float]]:
        """(cosine, chance, low, mid) of each reply's model update (``pairs``: each reply's
        ``reply_updates``; its arrays less the records it was sent; records that are updates
        themselves, such as deltas and descriptors, left out) with the coordinate-wise median of the
        other replies' updates among those sent the same model (HCCT's groups, cluster models and
        personal models are compared only within their own model). The reply under test is left out
        of its reference, which it would otherwise pull toward itself. ``chance`` is DIRECTION_Z /
        sqrt(d) over the d compared coordinates (a direction drawn at random has cosine ~ N(0, 1/d)
        with any fixed vector), or 0 where that exceeds DIRECTION_BOUND_MAX (random and honest cosines
        overlap in so few dimensions); ``mid`` is the median of the group's cosines and ``low`` that
        less DIRECTION_Z robust standard deviations (1.4826 times their median absolute deviation),
        below which a reply is an outlier among the group's (``against_median`` judges). (1, 0, -inf,
        1) where a reply has no such update or its model went to fewer than 3 replies."""
        keys = [k for k in pairs[0] if all(p.get(k, (None, None))[1] is not None for p in pairs)]
        out = [(1.0, 0.0, -math.inf, 1.0)] * len(pairs)
        # per key, each reply's class of the arrays it was sent (equal arrays, one class); a key whose
        # replies were all sent their own arrays (a personal model or head) has no common direction
        classes: dict[tuple[str, str], list[int]] = {}
        for k in keys:
            firsts: list[int] = []  # the first reply of each class
            classes[k] = []
            for p in pairs:
                c = next((c for c, j in enumerate(firsts)  # a broadcast is one tensor: no comparison
                          if p[k][1] is pairs[j][k][1] or torch.equal(p[k][1], pairs[j][k][1])), len(firsts))
                if c == len(firsts):
                    firsts.append(len(classes[k]))
                classes[k].append(c)
        keys = [k for k in keys if len(set(classes[k])) < len(pairs)]
        groups: dict[tuple[int, ...], list[int]] = {}  # the replies sent the same model
        for i in range(len(pairs)):
            groups.setdefault(tuple(classes[k][i] for k in keys), []).append(i)
        dims = sum(pairs[0][k][0].numel() for k in keys)
        chance = DIRECTION_Z / math.sqrt(dims) if dims else 0.0
        chance = chance if chance <= DIRECTION_BOUND_MAX else 0.0
        for group in groups.values() if keys else []:
            if len(group) < 3:
                continue
            updates = [{k: pairs[i][k][0].double() - pairs[i][k][1].double() for k in keys} for i in group]
            medians = leave_one_out_medians(updates)
            cosines = []
            for u, median in zip(updates, medians):
                scale = math.sqrt(sum(float((u[k] ** 2).sum()) for k in keys)
                                  * sum(float((median[k] ** 2).sum()) for k in keys))
                cosines.append(sum(float((u[k] * median[k]).sum()) for k in keys) / scale if scale > 0 else 1.0)
            # the round's cosines: median less DIRECTION_Z robust standard deviations (1.4826 MAD)
            mid = float(np.median(cosines))
            low = mid - DIRECTION_Z * 1.4826 * float(np.median(np.abs(np.array(cosines) - mid)))
            for i, c in zip(group, cosines):
                out[i] = (c, chance, low, mid)
        return out

    def robust(self, replies: list[Reply]) -> list[Reply]:
        """The defence against poisoned training replies: off by default (the algorithm exactly);
        ``defence = "robust"`` is the direction screen with every record's norm bound at ROBUST_FACTOR
        lower medians, and the fine-grained keys act alone or beside it.

        The direction screen (``screen-direction``; ``median_cosines``, ``against_median``) drops a
        reply whose model update, compared with the coordinate-wise median of the other replies'
        updates among those sent the same model, is an outlier below the round's cosines and points
        against that median beyond chance, or nowhere in a round whose replies share a direction
        (FLAME's cosine filtering, Nguyen et al., USENIX Security 2022, with the coordinate-wise
        median of Yin et al., ICML 2018, as the honest reference). The norm bound then scales each
        kept reply's update of each record (``record_bounds``) down to the smallest of ``clip-median``
        and ``screen-factor`` times the round's lower median norm of that record (norm bounding, Sun
        et al., "Can You Really Backdoor Federated Learning?", 2019, at an adaptive radius as FLAME's;
        ``clip-median`` 1 is one step of centered clipping, Karimireddy, He and Jaggi, ICML 2021,
        centred on what was sent), and the whole update to ``clip-norm``, counting it in the round's
        ``clipped-replies``. The lower median is an honest norm while attackers are fewer than half;
        an honest site with long updates still counts, at the bound's weight, instead of being
        excluded. Replies within every bound are left as received. The median-based bounds and the
        screen need 3 replies or more (``screen-factor``, the screen) or 1 (``clip-median``)."""
        cfg = self.cfg
        defended = cfg.defence == "robust"
        direction = cfg.screen_direction or defended
        screen_factor = cfg.screen_factor or (ROBUST_FACTOR if defended else 0.0)
        factors = [f for f in (cfg.clip_median, screen_factor if len(replies) >= 3 else 0.0) if f]
        if not replies or not (factors or cfg.clip_norm or direction):
            return replies
        pairs = [self.reply_updates(r) for r in replies]  # each reply's arrays and what it was sent, once
        if direction:
            kept = []
            for r, pair, *verdicts in zip(replies, pairs, self.median_cosines(pairs),
                                          self.median_cosines(delta_pairs(pairs))):
                bad = [(what, v) for what, v in zip(("model update", "deltas"), verdicts) if against_median(*v)]
                if bad:
                    what, (cosine, chance, low, mid) = bad[0]
                    self.drop("against-median", pid=r.pid, detail=f"against-median: {what} at cosine {cosine:.3g} "
                              f"with the other replies' median (chance {chance:.3g}), below the others' (their "
                              f"median {mid:.3g} less 3 robust deviations, {low:.3g})")
                else:
                    kept.append((r, pair))
            replies, pairs = [r for r, _ in kept], [p for _, p in kept]
        norms_of = [record_norms(pair) for pair in pairs]
        bounds = record_bounds(norms_of, factors)
        for r, pair, norms in zip(replies, pairs, norms_of):
            scale = {name: min(1.0, bounds.get(name, math.inf) / n) if n > 0 else 1.0 for name, n in norms.items()}
            total = math.sqrt(sum((scale[name] * n) ** 2 for name, n in norms.items()))
            if cfg.clip_norm and total > cfg.clip_norm:
                scale = {name: f * cfg.clip_norm / total for name, f in scale.items()}
            if all(f == 1.0 for f in scale.values()):
                continue
            for (name, k), (v, ref) in pair.items():
                if scale[name] < 1.0:
                    base = 0.0 if ref is None else ref.double()
                    r.payload[name][k] = (base + scale[name] * (v.double() - base)).to(v.dtype)
            self.clipped += 1
            log(INFO, "clipped the reply from partition %d: %s", r.pid, ", ".join(
                f"{name} update norm {n:.3g} to {scale[name] * n:.3g}" for name, n in norms.items() if scale[name] < 1))
        return replies

    def check_nonce(self, content: RecordDict, pid: int) -> str | None:
        """Why the reply does not answer the message ``pid`` was sent in this exchange, or None.
        Replies to messages this driver did not make (tests build some by hand) are not bound."""
        if pid not in self.nonces:
            return None
        got = content["metrics"].get("reply-nonce")
        if got is None:
            return "replayed: the reply carries no reply-nonce"
        if got != self.nonces[pid]:
            return "replayed: the reply's reply-nonce is another message's, not this exchange's"
        return None

    @staticmethod
    def check_reply(content: RecordDict, pid: int | None, spec: Spec | None, plain: bool = False) -> str | None:
        """Why a reply is invalid (``reason: detail``), or None when it is fine. A ``plain`` client's
        reply (a plain Flower ClientApp, keyed by its node id) names no partition id."""
        if pid is None:
            return "unknown-node"
        small = sum(r.count_bytes() for r in (*content.config_records.values(), *content.metric_records.values()))
        if small > REPLY_RECORDS_MAX_BYTES:
            return f"oversized: config and metric records of {small} bytes > {REPLY_RECORDS_MAX_BYTES}"
        metrics = content.metric_records.get("metrics")
        if metrics is None:
            return "wrong-records: no metrics"
        if len(metrics) > REPLY_METRICS_MAX_KEYS:
            return f"oversized: {len(metrics)} metrics > {REPLY_METRICS_MAX_KEYS}"
        for k, v in metrics.items():
            if not isinstance(v, (int, float)):
                return f"wrong-shape: metric {k} is not a scalar"
            if not math.isfinite(v):
                return f"non-finite: metric {k}"
        if not plain and metrics.get("partition-id") != pid:
            return "wrong-partition-id"
        n = metrics.get("num-examples")
        if n is None or n < 0 or n != int(n):
            return "bad-num-examples"
        if spec is None:
            return None
        got = {name: {k: (tuple(a.shape), a.dtype) for k, a in rec.items()}
               for name, rec in content.array_records.items()}
        if set(got) != set(spec):
            return f"wrong-records: {sorted(got)} != {sorted(spec)}"
        for name, keys in spec.items():
            if list(got[name]) != list(keys):
                return f"wrong-keys in {name}"
            for k, (shape, dtype) in keys.items():
                gshape, gdtype = got[name][k]
                if gshape != shape:
                    return f"wrong-shape: {name}/{k} {gshape} != {shape}"
                if gdtype != str(dtype).removeprefix("torch."):
                    return f"wrong-dtype: {name}/{k} {gdtype} != {dtype}"
        why = oversize(content, spec_bytes(spec))  # the bytes each array holds, before any is decoded
        if why is not None:
            return f"oversized: {why}"
        for name, rec in content.array_records.items():
            for k, a in rec.items():
                arr = array_numpy(a)
                if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                    return f"non-finite: {name}/{k}"
        return None

    # ---- the loop --------------------------------------------------------------------
    def run(self, grid: Grid, evaluate_fn, writer, start_round: int) -> Result:
        """All rounds from ``start_round``: each one's training, evaluation (every eval-every) and
        ``evaluate_fn``, its row recorded; Flower's ``Result`` of the rounds run."""
        strategy, num_rounds = self.strategy, self.cfg.num_server_rounds
        result = Result()
        strategy.results_path = writer.path if writer is not None else None
        if isinstance(grid, flower_grids()[1]):
            # a simulation's ServerApp shares the cores with the Ray workers: a second torch
            # thread only spins against them (aggregation took 2/3 of the process's time)
            torch.set_num_threads(1)
        strategy.summary()
        self.discover(grid, wait=self.cfg.node_wait_timeout)
        if len(self.clients) < self.cfg.num_clients:
            log(WARNING, "only %d of %d clients connected; going on with those", len(self.clients),
                self.cfg.num_clients)
        if not self.train_pool():
            raise RuntimeError("no training client is connected")
        t_start = time.time() - (self.history[-1]["wall-time"] if self.history else 0.0)
        if not self.history:  # a run resumed from its round-0 checkpoint has this row
            row = {"round": 0, **strategy.evaluate_central(), "wall-time": 0.0}
            row.update(self.server_evaluate(0, evaluate_fn, result))
            self.record(row, writer, result)
        empty = 0  # rounds in a row without a valid training reply
        for rnd in range(start_round, num_rounds + 1):
            t0 = time.time()
            self.traffic.clear()
            self.dropped.clear()
            self.clipped = 0
            self.discover(grid)  # nodes that joined since the last round
            self.named.clear()
            fit = self.train_round(rnd, grid)
            result.train_metrics_clientapp[rnd] = MetricRecord({**self.named.pop("train", {}), **scalars(fit)})
            row: dict[str, Any] = {"round": rnd, **fit}
            row["train-seconds"] = time.time() - t0
            empty = empty + 1 if row.get("replies") == 0 else 0
            if empty and (rnd == start_round or empty == self.cfg.max_empty_rounds):
                # no valid reply in a run's first round is a set-up error (a device that is not there,
                # missing data, clients that all answer wrongly), and max-empty-rounds such rounds in a
                # row a run that learns nothing: it fails, saying why, instead of reporting success
                what = "its first round" if rnd == start_round else f"{empty} rounds in a row (max-empty-rounds)"
                reasons = ", ".join(f"{k}: {v}" for k, v in sorted(self.dropped.items())) or "none"
                raise RuntimeError(f"round {rnd}: no valid training reply in {what}, so the run stops; "
                                   f"dropped replies by reason: {reasons}")
            if rnd % self.cfg.eval_every == 0 or rnd == num_rounds:
                row.update(self.evaluate_round(rnd, grid))
                if named := self.named.pop("evaluate", None):
                    result.evaluate_metrics_clientapp.setdefault(rnd, MetricRecord()).update(named)
            row.update(self.server_evaluate(rnd, evaluate_fn, result))
            self.totals.update(self.traffic)
            row.update(self.traffic)
            row.update({f"total-{k}": v for k, v in self.totals.items()})
            row["dropped-replies"] = sum(self.dropped.values())
            row["dropped-reasons"] = dict(self.dropped)
            row["clipped-replies"] = self.clipped
            if lost := sorted(self.state_lost - self.reported_lost):
                log(WARNING, "round %d: partition(s) %s no longer hold the client state this run builds on "
                    "(a site lost its state-dir, or a simulation was resumed in a new run): they restart it from "
                    "scratch", rnd, ", ".join(map(str, lost)))
                row["state-lost"] = lost
                self.reported_lost.update(lost)
            self.state_lost.clear()
            row["round-seconds"] = time.time() - t0
            row["wall-time"] = time.time() - t_start
            self.record(row, writer, result)
        self.end_of_run(grid)
        arrays = strategy.global_arrays()
        if arrays is not None:
            result.arrays = arrays
        return result

    def train_round(self, server_round: int, grid: Grid) -> dict[str, Any]:
        """One round of training: the strategy's configure_train (its ``begin("train")`` work, then
        the messages), the exchange, its aggregate_train (under ``dp``, those of Flower's DP wrapper
        around the strategy: strategies.privacy); the row's entries, with the strategy's own
        ``round_row`` where it has one. A strategy with its own round (``OwnHooks.train_round``) runs that."""
        strategy = self.strategy
        if own := own_hook(strategy, "train_round"):
            return own(server_round, grid)
        if self.cfg.dp != "none":
            metrics = self.private_round(strategy, server_round, grid)
        else:
            msgs = strategy.configure_train(server_round, None, strategy.base_config["train"], grid)
            replies = self.exchange(grid, msgs, expected=strategy.expected["train"])
            metrics = dict(strategy.aggregate_train(server_round, replies)[1] or {})
        row = own_hook(strategy, "round_row")
        return {**metrics, **(row(server_round) if row else {})}

    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, Any]:
        """One evaluation: the strategy's configure_evaluate (its ``begin("evaluate")`` work, then
        the messages), the exchange, its aggregate_evaluate (pooled ``fed-*`` metrics), each client's
        accuracy by partition id, and the central evaluation (``central-*``). A strategy with its own
        evaluation (``OwnHooks.evaluate_round``) runs that."""
        strategy, out = self.strategy, {}
        if own := own_hook(strategy, "evaluate_round"):
            return own(server_round, grid)
        strategy.client_evals = []
        msgs = strategy.configure_evaluate(server_round, None, strategy.base_config["evaluate"], grid)
        if msgs:
            replies = self.exchange(grid, msgs, traffic="eval", expected=strategy.expected["evaluate"])
            out.update(strategy.aggregate_evaluate(server_round, replies) or {})
            accuracy = {pid: m["accuracy"] for pid, _, m in strategy.client_evals if m["num-examples"] > 0}
            if accuracy:  # per partition id
                out["fed-client-accuracy"] = accuracy
        out.update(strategy.evaluate_central())
        return out

    def end_of_run(self, grid: Grid) -> None:
        """The run has finished: its client state files are removed at the sites (``end-of-run``),
        or with ``keep-client-state`` (to resume the run with more rounds later) all but the last
        version. Sites that do not answer within a minute keep their files."""
        if not self.state_holders:
            return
        keep = self.cfg.keep_client_state
        contents = {pid: RecordDict({"config": ConfigRecord({"end-of-run": True, "keep-client-state": keep})})
                    for pid, c in self.clients.items() if not c.plain}
        replies = [m for m in send_and_receive(grid, self.messages(contents, MessageType.QUERY),
                                               min(self.cfg.round_timeout, 60.0)) if m.has_content()]
        log(INFO, "end of run: %d of %d clients removed %d client state files%s", len(replies), len(contents),
            sum(int(m.content["metrics"]["removed-files"]) for m in replies),
            " (keep-client-state: all but the last version)" if keep else "; keep-client-state=true keeps them")

    def server_evaluate(self, server_round: int, evaluate_fn, result: Result) -> dict[str, float]:
        """Flower's ``evaluate_fn(round, arrays)`` on the global model; its metrics go to the
        result's ServerApp-side metrics and to the round's row as ``server-<name>``."""
        if evaluate_fn is None:
            return {}
        metrics = evaluate_fn(server_round, self.strategy.global_arrays())
        if metrics is None:
            return {}
        result.evaluate_metrics_serverapp.setdefault(server_round, MetricRecord()).update(metrics)
        return {f"server-{k}": v for k, v in metrics.items()}

    def record(self, row: dict[str, Any], writer, result: Result | None = None) -> None:
        self.history.append(row)
        if result is not None:  # the evaluations of the row in Flower's result
            for prefix, into in (("fed-", result.evaluate_metrics_clientapp),
                                 ("central-", result.evaluate_metrics_serverapp)):
                metrics = scalars({k: v for k, v in row.items() if k.startswith(prefix)})
                if metrics:
                    into.setdefault(row["round"], MetricRecord()).update(metrics)
        parts = [f"round {row['round']}/{self.cfg.num_server_rounds}"]
        if row["round"] and row.get("wall-time"):  # elapsed, and the rest at the mean pace so far
            left = row["wall-time"] / row["round"] * (self.cfg.num_server_rounds - row["round"])
            parts.append(f"elapsed {row['wall-time']:.0f} s, about {left:.0f} s left")
        for key in ("train-loss", "central-accuracy", "fed-accuracy", "fed-unseen-accuracy", "train-bytes-down",
                    "train-bytes-up", "round-seconds", "dp-epsilon"):
            if key in row:
                v = row[key]
                parts.append(f"{key} {v:.4f}" if isinstance(v, float) else f"{key} {v}")
        if row.get("dropped-replies"):
            parts.append(f"dropped {row['dropped-reasons']}")
        log(INFO, " | ".join(parts))
        if writer is not None:
            writer.add(row, self.strategy)
