"""The clients of a run: node discovery keyed by ``partition-id``, site binding, and the seeded sample.

:class:`Federation` asks each new node of the grid which partition it serves, binds it to its
SuperNode key where the run says so (``fedapp.server.sites``), takes a plain Flower ClientApp by its
node id where the strategy can use one, and samples each round's clients from those it knows.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from logging import WARNING

from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.common import log
from flwr.serverapp import Grid

from fedapp.core.compat import answers, app_component, flower_grids, lacks_handler
from fedapp.core.config import ConfigError, RunConfig
from fedapp.server import sites
from fedapp.server.transport import send_and_receive
from fedapp.server.hooks import RoundHooks, own_hook


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


def sample_size(pool: int, fraction: float, min_nodes: int) -> int:
    """Clients a round samples from ``pool`` of them: ``fraction`` of it, at least ``min_nodes``."""
    return min(pool, max(min_nodes, int(round(fraction * pool))))


class Federation:
    """The clients ``strategy`` (``RoundHooks``) runs with, by partition id; ``started()`` says
    whether the run has recorded a row (a plain ClientApp then joins late instead of refusing it)."""

    def __init__(self, strategy: RoundHooks, started: Callable[[], bool]):
        self.strategy, self.started = strategy, started
        self.clients: dict[int, ClientInfo] = {}  #: partition id -> its node, found at discovery
        #: node id -> the partition id it claimed that another node serves (-1: a plain Flower
        #: ClientApp the strategy cannot use)
        self.refused: dict[int, int] = {}
        #: the ``site-keys`` table (key fingerprint -> site; fedapp.server.sites), set by the ServerApp in a
        #: deployment that binds partitions to SuperNode keys; None: ``first_keys``, else the first node to
        #: claim a partition serves it
        self.sites: dict[str, sites.Site] | None = None
        self.unbound: dict[int, str] = {}  # node id -> why its key may not serve the partition it claims
        #: without ``sites``, where the SuperLink authenticates SuperNodes (set to {} by the ServerApp): key
        #: fingerprint -> the partition it claimed first, bound to it (sites.bind_first); None: off
        self.first_keys: dict[str, sites.Site] | None = None
        self.plain_app: bool | None = None  # app_is_plain(), found at the first discovery on Flower's grids

    @property
    def cfg(self) -> RunConfig:
        return self.strategy.cfg  # start() may replace it (num_rounds, timeout)

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
                self.query(grid, new, online, unbound)
            if len(clients) >= self.cfg.num_clients or time.time() >= deadline:
                return
            time.sleep(1.0)

    def query(self, grid: Grid, new: list[int], online: set[int], unbound: set[int]) -> None:
        """Ask the ``new`` nodes their partition ids and take each answer (``admit``); a node whose
        ClientApp has no query function is a plain one (``plain_client``)."""
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
            self.admit(msg, keys.get(msg.metadata.src_node_id), online, unbound)

    def admit(self, msg: Message, pem: bytes | None, online: set[int], unbound: set[int]) -> None:
        """Take a discovery answer's node as the client of the partition it claims, unless its key may
        not serve it (``unbound``) or another online node serves it (``refused``)."""
        m = msg.content["metrics"]
        if "num-partitions" in m and int(m["num-partitions"]) != self.cfg.num_clients:
            raise ConfigError(
                f"the federation has {int(m['num-partitions'])} simulated SuperNodes but run config "
                f"'num-clients' = {self.cfg.num_clients}: make them equal (options.num-supernodes "
                "in $FLWR_HOME/config.toml, or python -m fedapp.runtime.launch, which sets it)")
        pid, node = int(m["partition-id"]), msg.metadata.src_node_id
        if why := (sites.refusal(self.sites, node, pem, pid) if self.sites is not None else
                   sites.bind_first(self.first_keys, node, pem, pid) if self.first_keys is not None
                   else None):
            if self.unbound.get(node) != why:
                log(WARNING, why)
            self.unbound[node] = why
            unbound.add(node)
            return
        self.unbound.pop(node, None)
        owner = self.clients.get(pid)
        if owner is not None and owner.node_id != node and owner.node_id in online:
            if self.refused.get(node) != pid:
                log(WARNING, "node %s refused: it claims partition %d, which node %s serves", node, pid,
                    owner.node_id)
            self.refused[node] = pid
            return
        self.refused.pop(node, None)
        self.clients[pid] = ClientInfo(msg.metadata.src_node_id, int(m["num-train"]), int(m["num-test"]),
                                       pid in self.strategy.unseen)

    def plain_client(self, node: int) -> None:
        """Take node ``node``, whose ClientApp has no query function (a plain Flower ClientApp),
        as a client keyed by its node id, where the strategy's clients need no step of their own
        (``FedStrategy.plain_clients``). Before round 1 (no row recorded) a strategy that needs
        its own client refuses the run in one line; a node joining later is left out, with a warning."""
        strategy = self.strategy
        if strategy.plain_clients():
            self.clients[node] = ClientInfo(node, None, None, False, plain=True)
            return
        need = strategy.client_need()
        if not self.started():
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
