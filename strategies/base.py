"""Shared server machinery for every fedapp strategy.

:class:`FedStrategy` is Flower's message-based ``Strategy``: ``configure_train`` /
``aggregate_train`` / ``configure_evaluate`` / ``aggregate_evaluate`` as Flower documents them,
and ``start()`` taking Flower's arguments and returning Flower's ``Result``. It adds the round
driver all algorithms here need, once: node discovery keyed by ``partition-id``, seeded sampling
over partition ids, message contents (``contents``), one exchange with byte and drop accounting
(``exchange``), reply validation (``parse_replies``), ``round_trip`` for rounds of several
exchanges, centralised and federated evaluation, per-round results and checkpoints. An algorithm
subclass overrides only the hooks that carry its update rule: ``broadcast_payload`` /
``client_payload``, ``train_config``, ``reply_spec``, ``aggregate``, ``eval_broadcast`` /
``eval_client_payload`` and ``central_state`` (and ``fit_round`` /
``evaluate_round`` for several round trips, built from ``round_trip``).
"""

from __future__ import annotations

import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from flwr.serverapp.strategy.fedtrimmedavg import trim_mean

from fedapp.aggregation import coordinate_wise, krum_select, weighted_mean
from fedapp.config import ConfigError, Key, RunConfig
from fedapp.data import Dataset
from fedapp.experiment import round_lr, unseen_clients
from fedapp.records import (Payload, RecordStore, Tensors, array_numpy, content_bytes, from_record, make_content,
                             payload_of, to_record)
from fedapp.spill import SpilledContent, spill
from fedapp.training import evaluate

Spec = dict[str, dict[str, tuple[tuple[int, ...], torch.dtype]]]

#: a method's own lr decay (read by ``fedapp.experiment.round_lr``), so one run-config file can decay
#: FedDyn/FedSMOO by 0.9995 and the other methods by 0.998, as FedSMOO's Table 1 does
LR_DECAY = Key("lr-decay", float, 0.0, "This method's lr decay per round; 0: the common lr-decay.", low=0.0, high=1.0)

#: common run-config settings that clients read in local training and evaluation: every training and
#: evaluation message's config carries them (``client_settings``), so a client never reads them from
#: its own run config
CLIENT_SETTINGS = ("batch-size", "local-steps", "local-epochs", "momentum", "weight-decay", "grad-clip",
                   "augment-recipe", "eval-label-mask")


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
    node_id: int
    num_train: int
    num_test: int
    unseen: bool


def scalars(metrics: Mapping[str, Any]) -> dict[str, int | float]:
    """The numeric entries of a row (a MetricRecord holds no dicts or strings)."""
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def spec_of(payload: Mapping[str, Tensors]) -> Spec:
    return {name: {k: (tuple(v.shape), v.dtype) for k, v in t.items()} for name, t in payload.items()}


def flower_grids() -> tuple[type, type]:
    """Flower's HTTP grid (deployments) and in-memory grid (simulations). Imported when a server
    needs them: ``flwr.superlink`` brings the SuperLink's state machinery (about 0.9 s of CPU),
    which every ClientApp process would otherwise load, as parsing a run config imports this module."""
    from flwr.superlink.grid import HttpGrid, InMemoryGrid

    return HttpGrid, InMemoryGrid


#: longest wait between two pulls of replies: a simulation's in-memory grid answers a pull from this
#: process's memory, a deployment's HTTP grid with a request to the SuperLink
PULL_WAIT = {"memory": 0.02, "http": 0.1}


def send_and_receive(grid: Grid, msgs: list[Message], timeout: float | None,
                     arrived: Callable[[Message], Message] | None = None) -> list[Message]:
    """``grid.send_and_receive`` with a short poll: Flower's grids sleep between pulls (3 s for
    the HTTP grid of a deployment, 0.1 s for a simulation's in-memory grid), which rounds every
    exchange up to a multiple of that. The wait doubles from 10 ms to ``PULL_WAIT`` (20 ms in a
    simulation, where PeFLL's three exchanges a step would each wait up to 0.1 s more; 0.1 s
    over HTTP), so a reply is seen at most that late. Each reply goes through ``arrived`` as it
    arrives (fedapp.inprocess's grid calls it as it computes the reply)."""
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


class FedStrategy(Strategy):
    """FedAvg-shaped base: every hook defaults to Federated Averaging.

    McMahan et al., "Communication-Efficient Learning of Deep Networks from
    Decentralized Data" (AISTATS 2017). Each round a seeded sample S_t of the
    training clients receives the global model w_t, runs local SGD, and returns
    w_i; then w_{t+1} = sum_{i in S_t} n_i w_i / sum_{i in S_t} n_i.
    """

    #: run-config prefix and keys of the algorithm's own settings (``prefix.key``)
    config_prefix: ClassVar[str] = "fedavg"
    config_keys: ClassVar[tuple[Key, ...]] = ()
    #: names of the ``config_keys`` the algorithm's clients read: sent in every message's config
    #: (``client_settings``)
    client_keys: ClassVar[tuple[str, ...]] = ()
    #: attributes written to checkpoints besides the base ones
    checkpoint_attrs: ClassVar[tuple[str, ...]] = ()
    #: average replies by example count (False: unweighted means, as FedDyn-style methods use)
    weighted: ClassVar[bool] = True
    #: the server's state is one global model (``global_state``): Flower's ``arrays`` (``start``'s
    #: ``initial_arrays``, ``configure_*``'s input, ``aggregate_train``'s output) stand for it. False
    #: for strategies with several models, personal models or parts of one (IFCA, HCCT, PeFLL, FedRep, ...)
    global_model: ClassVar[bool] = True

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, dataset: Dataset | None = None):
        self.cfg = cfg
        self.model = model
        self.dataset = dataset
        self.global_state: Tensors = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        self.rng = np.random.default_rng([cfg.seed, 7])
        self.clients: dict[int, ClientInfo] = {}
        self.unseen = unseen_clients(cfg)
        self.traffic: Counter = Counter()
        self.dropped: Counter = Counter()
        self.totals: Counter = Counter()  # traffic since round 1 (an attribute: checkpoints carry it)
        self.history: list[dict[str, Any]] = []
        #: this round's valid evaluation replies (pid, unseen, metrics): the results' clients.csv
        self.client_evals: list[tuple[int, bool, dict[str, float]]] = []
        self.results_path: Path | None = None  #: this run's results folder, once running with a writer
        self.sent: dict[int, Payload] = {}  # partition id -> the arrays sent to it in the current exchange
        self.refused: dict[int, int] = {}  # node id -> the partition id it claimed that another node serves
        #: id of a reply of the last exchange -> (the reply, its arrays on disk) (``reply-memory-mb``),
        #: until parse_replies reads them
        self.spilled: dict[int, tuple[Message, SpilledContent]] = {}
        # names this run's client state at the sites (every message carries it); a checkpoint keeps
        # it, so only a run resumed from this one's checkpoint finds that state
        self.run_key = f"{cfg.run_name or cfg.strategy}-{uuid.uuid4().hex[:12]}"
        #: ``start``'s ``train_config`` / ``evaluate_config``: the base of every message's config
        self.base_config: dict[str, dict[str, Any]] = {"train": {}, "evaluate": {}}
        # the partition ids addressed by the last configure_train / configure_evaluate, with the
        # arrays their replies must carry: aggregate_train / aggregate_evaluate check replies against them
        self.expected: dict[str, dict[int, Spec | None]] = {"train": {}, "evaluate": {}}
        self.in_round = False  # inside this class's own fit_round / evaluate_round

    @property
    def param_keys(self) -> list[str]:
        """Names of the trainable parameters (server duals and control variates live on these)."""
        return [k for k, _ in self.model.named_parameters()]

    def zeros_like_params(self) -> Tensors:
        return {k: torch.zeros_like(self.global_state[k]) for k in self.param_keys}

    @classmethod
    def check_config(cls, cfg: RunConfig) -> None:
        """Cross-key checks of the algorithm's settings; raise ConfigError."""

    def summary(self) -> None:
        keys = {f"{self.config_prefix}.{k.name}": self.cfg.algo(k.name) for k in self.config_keys}
        log(INFO, "%s: %s", type(self).__name__, keys or "no algorithm settings")

    # ---- nodes and sampling ----------------------------------------------------------
    def discover(self, grid: Grid, wait: float = 0.0) -> None:
        """Ask unknown nodes for their partition id; wait up to ``wait`` s for num-clients."""
        deadline = time.time() + wait
        while True:
            online = set(grid.get_node_ids())
            known = {c.node_id for c in self.clients.values()}
            # a refused node is asked again once the node serving its partition is gone
            known |= {n for n, pid in self.refused.items() if self.clients[pid].node_id in online}
            new = [n for n in online if n not in known]
            if new:
                msgs = [Message(RecordDict({"config": ConfigRecord({})}), dst_node_id=n,
                                message_type=MessageType.QUERY) for n in new]
                for msg in send_and_receive(grid, msgs, self.cfg.round_timeout):
                    if msg.has_error():
                        log(WARNING, "node %s did not answer discovery: %s", msg.metadata.src_node_id,
                            msg.error.reason)
                        continue
                    m = msg.content["metrics"]
                    if "num-partitions" in m and int(m["num-partitions"]) != self.cfg.num_clients:
                        raise ConfigError(
                            f"the federation has {int(m['num-partitions'])} simulated SuperNodes but run config "
                            f"'num-clients' = {self.cfg.num_clients}: make them equal (options.num-supernodes "
                            "in $FLWR_HOME/config.toml, or python -m fedapp.launch, which sets it)")
                    pid, node = int(m["partition-id"]), msg.metadata.src_node_id
                    owner = self.clients.get(pid)
                    if owner is not None and owner.node_id != node and owner.node_id in online:
                        if self.refused.get(node) != pid:
                            log(WARNING, "node %s refused: it claims partition %d, which node %s serves", node, pid,
                                owner.node_id)
                        self.refused[node] = pid
                        continue
                    self.refused.pop(node, None)
                    self.clients[pid] = ClientInfo(msg.metadata.src_node_id, int(m["num-train"]),
                                                   int(m["num-test"]), pid in self.unseen)
            if len(self.clients) >= self.cfg.num_clients or time.time() >= deadline:
                return
            time.sleep(1.0)

    def train_pool(self) -> list[int]:
        """Partition ids that take part in training (seen clients that are connected)."""
        return sorted(pid for pid, c in self.clients.items() if not c.unseen)

    def sample(self, server_round: int, pool: list[int] | None = None, fraction: float | None = None) -> list[int]:
        """Seeded sample of ``fraction`` of ``pool`` (at least min-train-nodes), sorted."""
        pool = self.train_pool() if pool is None else pool
        fraction = self.cfg.fraction_train if fraction is None else fraction
        n = min(len(pool), max(self.cfg.min_train_nodes, int(round(fraction * len(pool)))))
        return sorted(int(p) for p in self.rng.choice(pool, size=n, replace=False))

    # ---- messages --------------------------------------------------------------------
    def exchange(self, grid: Grid, msgs: list[Message], traffic: str = "train") -> list[Message]:
        """Send the messages and return the replies, counting bytes both ways."""
        for msg in msgs:
            nbytes, params = content_bytes(msg.content)
            self.traffic[f"{traffic}-bytes-down"] += nbytes
            self.traffic[f"{traffic}-params-down"] += params
        budget, self.spilled = self.cfg.reply_memory_mb * 2**20, {}

        def arrived(msg: Message) -> Message:
            if msg.has_content():
                nbytes, params = content_bytes(msg.content)
                self.traffic[f"{traffic}-bytes-up"] += nbytes
                self.traffic[f"{traffic}-params-up"] += params
                if nbytes * len(msgs) > budget:  # all of them together would not fit: to disk now
                    msg.content, spilled = spill(msg.content, self.cfg.state_spill_dir or None)
                    self.spilled[id(msg)] = (msg, spilled)
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
        arrays, finite values and scalar metrics. Every multi-phase ``fit_round`` passes its
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
            spilled = self.spilled.pop(id(msg), (None, None))[1]
            content = msg.content if spilled is None else spilled.content(msg.content)  # one reply at a time
            try:
                reason = self.check_reply(content, pid, expected.get(pid))
            except Exception as exc:  # a reply too odd to check (wrong record types, ...) is bad too
                reason = f"malformed: {type(exc).__name__}: {exc}"
            if reason is None and pid in valid:
                reason = "duplicate"
            if reason:
                self.drop(reason.split(":")[0], pid=pid, detail=reason)
                continue
            metrics = {k: float(v) for k, v in msg.content["metrics"].items()}
            cap = self.clients[pid].num_train if expected.get(pid) is not None else self.clients[pid].num_test
            if metrics["num-examples"] > cap:
                log(WARNING, "partition %d claims %d examples, %d at discovery: counted as %d", pid,
                    metrics["num-examples"], cap, cap)
                metrics["num-examples"] = float(cap)
            valid[pid] = Reply(pid, payload_of(content) if spilled is None else spilled.payload(), metrics)
        out = [valid[pid] for pid in sorted(valid)]
        return self.robust(out) if any(s is not None for s in expected.values()) else out

    # ---- robust aggregation ------------------------------------------------------------
    def reference(self, pid: int, name: str) -> Tensors | None:
        """What reply record ``name`` of client ``pid`` is an update of: the record of that name
        sent to it in this exchange; None when the reply is an update itself (a delta)."""
        return self.sent.get(pid, {}).get(name)

    def reply_updates(self, reply: Reply) -> dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]]:
        """(record, key) -> (value, reference or None) for every float array of the reply."""
        out = {}
        for name, tensors in reply.payload.items():
            ref = self.reference(reply.pid, name) or {}
            for k, v in tensors.items():
                if v.is_floating_point():
                    out[name, k] = (v, ref[k] if k in ref and ref[k].shape == v.shape else None)
        return out

    def update_norm(self, reply: Reply) -> float:
        """L2 norm of the reply's update (its float arrays less their references), in float64."""
        return math.sqrt(sum(float(((v.double() - (0.0 if r is None else r.double())) ** 2).sum())
                             for v, r in self.reply_updates(reply).values()))

    def robust(self, replies: list[Reply]) -> list[Reply]:
        """The screen (``screen-factor``: a reply whose update norm is that many times the exchange's
        lower median is dropped) and clipping (``clip-norm``: a longer update is scaled down to it).
        Replies that pass unclipped are left as received, so an honest run is bit-identical."""
        factor, clip = self.cfg.screen_factor, self.cfg.clip_norm
        if not replies or not (factor or clip):
            return replies
        norms = [self.update_norm(r) for r in replies]
        median = sorted(norms)[(len(norms) - 1) // 2]
        kept = []
        for r, norm in zip(replies, norms):
            if factor and median > 0 and norm > factor * median:
                self.drop("outlier-norm", pid=r.pid,
                          detail=f"outlier-norm: update norm {norm:.3g} > {factor:g} x median {median:.3g}")
                continue
            if clip and norm > clip:
                for (name, k), (v, ref) in self.reply_updates(r).items():
                    base = 0.0 if ref is None else ref.double()
                    r.payload[name][k] = (base + clip / norm * (v.double() - base)).to(v.dtype)
            kept.append(r)
        return kept

    def combine(self, states: list[Tensors], weights: Iterable[float]) -> Tensors:
        """The replies' states combined as ``aggregation`` says: the weighted mean (each algorithm's
        own rule), the coordinate-wise median, the trimmed mean (Flower's ``trim_mean``), or the
        weighted mean of the states (Multi-)Krum selects. Aggregations over replies call this."""
        how, weights = self.cfg.aggregation, list(weights)
        if how == "mean" or len(states) == 1:
            return weighted_mean(states, weights)
        if how == "median":
            return coordinate_wise(states, lambda a: np.median(a, axis=0))
        if how == "trimmed-mean":
            return coordinate_wise(states, lambda a: trim_mean(a, self.cfg.trim_fraction))
        chosen = krum_select(states, self.cfg.krum_byzantine, self.cfg.krum_select)
        return weighted_mean([states[i] for i in chosen], [weights[i] for i in chosen])

    @staticmethod
    def check_reply(content: RecordDict, pid: int | None, spec: Spec | None) -> str | None:
        """Why a reply is invalid (``reason: detail``), or None when it is fine."""
        if pid is None:
            return "unknown-node"
        metrics = content.metric_records.get("metrics")
        if metrics is None:
            return "wrong-records: no metrics"
        for k, v in metrics.items():
            if not isinstance(v, (int, float)):
                return f"wrong-shape: metric {k} is not a scalar"
            if not math.isfinite(v):
                return f"non-finite: metric {k}"
        if metrics.get("partition-id") != pid:
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
        for name, rec in content.array_records.items():
            for k, a in rec.items():
                arr = array_numpy(a)
                if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                    return f"non-finite: {name}/{k}"
        return None

    # ---- algorithm hooks (FedAvg defaults) ---------------------------------------------
    def begin_train(self, server_round: int, grid: Grid) -> None:
        """Work before the round's training messages are built (HCCT groups the clients here);
        may exchange with the clients through ``round_trip``."""

    def begin_evaluate(self, server_round: int, grid: Grid) -> None:
        """Work before the evaluation messages are built (FedALS collects the bodies here)."""

    def round_row(self, server_round: int) -> dict[str, Any]:
        """Entries of the round's results row besides aggregate_train's metrics (HCCT: the groups)."""
        return {}

    def broadcast_payload(self, server_round: int) -> Payload:
        """Arrays every sampled client receives for training (converted to records once)."""
        return {"arrays": self.global_state}

    def shared_payloads(self, server_round: int) -> Payload:
        """Arrays several (not all) clients receive for training, by name: a client's payload names
        one with ``Shared(name)``, and it is converted to a record once per exchange."""
        return {}

    def client_payload(self, pid: int, server_round: int) -> Payload:
        """Arrays client ``pid`` receives for training besides the broadcast ones (an entry may name
        one of ``shared_payloads``)."""
        return {}

    def train_payload(self, pid: int, server_round: int) -> Payload:
        """Everything client ``pid`` receives for training: the broadcast and its own arrays."""
        store = RecordStore(self.shared_payloads(server_round))
        return {**self.broadcast_payload(server_round),
                **{name: store.tensors(entry) for name, entry in self.client_payload(pid, server_round).items()}}

    @classmethod
    def client_settings(cls, cfg: RunConfig) -> dict[str, Any]:
        """The settings the clients read, as the messages carry them: the common ``CLIENT_SETTINGS``
        and the algorithm's ``client_keys``, without the prefix (``fedprox.proximal-mu`` travels as
        ``proximal-mu``, as Flower's FedProx sends it)."""
        return {**{k: cfg[k] for k in CLIENT_SETTINGS}, **{k: cfg.algo(k) for k in cls.client_keys}}

    def train_config(self, pid: int, server_round: int) -> dict[str, Any]:
        """Config of client ``pid``'s training message: the client settings and the round's lr."""
        return {**self.client_settings(self.cfg), "lr": round_lr(self.cfg, server_round)}

    def eval_config(self, pid: int, server_round: int) -> dict[str, Any]:
        """Config of client ``pid``'s evaluation message: the client settings."""
        return self.client_settings(self.cfg)

    def reply_spec(self, pid: int, server_round: int) -> Spec:
        """Arrays a training reply must carry: by default the full model."""
        return spec_of({"arrays": self.global_state})

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        """Update the server state from the valid replies (at least min-train-nodes)."""
        weights = [r.num_examples if self.weighted else 1.0 for r in replies]
        self.global_state = self.combine([r.payload["arrays"] for r in replies], weights)

    def eval_broadcast(self, server_round: int) -> Payload:
        """Arrays every client of the evaluation receives (converted once): what it evaluates."""
        return {"arrays": self.global_state}

    def eval_shared_payloads(self, server_round: int) -> Payload:
        """Arrays several clients receive for evaluation, by name (as ``shared_payloads``)."""
        return {}

    def eval_client_payload(self, pid: int, server_round: int) -> Payload:
        """Arrays client ``pid`` receives for evaluation besides the broadcast ones (an entry may
        name one of ``eval_shared_payloads``)."""
        return {}

    def central_state(self) -> Tensors | None:
        """The model evaluated on the global test set; None when there is no single model."""
        return self.global_state

    # ---- Flower Strategy API ---------------------------------------------------------
    def messages(self, contents: Mapping[int, RecordDict], message_type: str) -> list[Message]:
        for c in contents.values():
            if "config" not in c.config_records:
                c["config"] = ConfigRecord({})
            c["config"]["run-key"] = self.run_key
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
        config below ``config``; ``broadcast``: records every one gets; ``shared``: named arrays payloads
        name), bytes and drops counted, and the
        valid replies, each checked against
        ``spec(pid)`` (None: no arrays checked, as for evaluation replies). Every exchange of a round
        beyond Flower's configure/aggregate pair goes through here (PeFLL's phases, pFedHN, FedALS's
        body collection, HCCT's newcomers)."""
        base = self.base_config["train" if message_type == MessageType.TRAIN else "evaluate"]
        per_client = config if callable(config) else lambda pid: config
        contents = self.contents(server_round, payloads, lambda pid: {**base, **per_client(pid)}, broadcast, shared)
        replies = self.exchange(grid, self.messages(contents, message_type), traffic)
        return self.parse_replies(replies, {pid: None if spec is None else spec(pid) for pid in contents})

    def train_contents(self, server_round: int, config: Mapping | None = None) -> dict[int, RecordDict]:
        """One message content per sampled partition id."""
        base = self.base_config["train"] if config is None else config
        pids = self.sample(server_round)
        return self.contents(server_round, {pid: self.client_payload(pid, server_round) for pid in pids},
                             lambda pid: {**dict(base), **self.train_config(pid, server_round)},
                             self.broadcast_payload(server_round), self.shared_payloads(server_round))

    # ---- the global model as Flower's ArrayRecord ------------------------------------------
    def global_arrays(self) -> ArrayRecord | None:
        """The global model as Flower carries it between rounds; None without one (``global_model``)."""
        return to_record(self.global_state) if self.global_model else None

    def set_global_arrays(self, arrays: ArrayRecord, what: str = "arrays") -> None:
        """Take ``arrays`` as the global model: the same keys, shapes and dtypes as the strategy's."""
        name = type(self).__name__
        if not self.global_model:
            raise ValueError(f"{name} keeps no single global model, so it cannot take {what}: pass none (or an "
                             "empty ArrayRecord)")
        new = from_record(arrays)
        if list(new) != list(self.global_state):
            raise ValueError(f"{name}: {what} keys {list(new)} differ from the model's {list(self.global_state)}")
        for k, v in new.items():
            ref = self.global_state[k]
            if v.shape != ref.shape or v.dtype != ref.dtype:
                raise ValueError(f"{name}: {what} '{k}' is {v.dtype} {tuple(v.shape)}, the model's is "
                                 f"{ref.dtype} {tuple(ref.shape)}")
        self.global_state = new

    # ---- Flower Strategy API (single round trip; the driver below uses the same methods) ----
    def configure_train(self, server_round: int, arrays: ArrayRecord | None, config: ConfigRecord | Mapping,
                        grid: Grid) -> list[Message]:
        """Flower API: the training messages for this round's sample. ``arrays`` (when given and not
        empty) is taken as the global model first: Flower's loop carries the model there, possibly
        changed by a wrapper (differential privacy); fedapp's own loop passes None."""
        self.check_flower_loop("fit_round")
        if arrays is not None and len(arrays):
            self.set_global_arrays(arrays)
        if not self.clients:  # Flower's loop does no discovery
            self.discover(grid, wait=self.cfg.node_wait_timeout)
        self.begin_train(server_round, grid)
        contents = self.train_contents(server_round, config)
        self.expected["train"] = {pid: self.reply_spec(pid, server_round) for pid in contents}
        return self.messages(contents, MessageType.TRAIN)

    def check_flower_loop(self, own: str) -> None:
        """A strategy whose round is more than Flower's configure/aggregate pair (it overrides
        ``fit_round`` or ``evaluate_round``: several round trips, or work around the exchange) cannot
        be driven by Flower's ``Strategy.start`` or a wrapper's: say so instead of running a wrong round."""
        if not self.in_round and getattr(type(self), own) is not getattr(FedStrategy, own):
            raise RuntimeError(f"{type(self).__name__} has its own {own} (more than one configure/aggregate "
                               "pair per round), which Flower's Strategy.start cannot drive: run its own start()")

    def aggregate_train(self, server_round: int, replies: Iterable[Message]
                        ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Flower API: the valid replies to the last ``configure_train`` aggregated by the algorithm's
        ``aggregate``; returns the new global model (None without one or when the round is skipped)
        and the round's metrics."""
        valid = self.parse_replies(replies, self.expected["train"])
        metrics = {"replies": len(valid)}
        if len(valid) < self.cfg.min_train_nodes:
            log(WARNING, "round %d: %d valid replies < min-train-nodes %d: state unchanged",
                server_round, len(valid), self.cfg.min_train_nodes)
            metrics["skipped"] = 1
            return None, MetricRecord(metrics)
        self.aggregate(server_round, valid)
        n = sum(r.num_examples for r in valid) or 1
        for key in ("train-loss",):
            if all(key in r.metrics for r in valid):
                metrics[key] = sum(r.metrics[key] * r.num_examples for r in valid) / n
        return self.global_arrays(), MetricRecord(metrics)

    def evaluate_contents(self, server_round: int, config: Mapping | None = None) -> dict[int, RecordDict]:
        if not self.cfg.fraction_evaluate:
            return {}
        base = self.base_config["evaluate"] if config is None else config
        pids = self.sample(server_round, sorted(self.clients), self.cfg.fraction_evaluate)
        return self.contents(server_round, {pid: self.eval_client_payload(pid, server_round) for pid in pids},
                             lambda pid: {**dict(base), **self.eval_config(pid, server_round)},
                             self.eval_broadcast(server_round), self.eval_shared_payloads(server_round))

    def configure_evaluate(self, server_round: int, arrays: ArrayRecord | None, config: ConfigRecord | Mapping,
                           grid: Grid) -> list[Message]:
        """Flower API: the evaluation messages (``arrays``, when given and not empty, taken as the
        global model first, as in ``configure_train``)."""
        self.check_flower_loop("evaluate_round")
        if arrays is not None and len(arrays):
            self.set_global_arrays(arrays)
        if not self.clients:
            self.discover(grid, wait=self.cfg.node_wait_timeout)
        self.begin_evaluate(server_round, grid)
        contents = self.evaluate_contents(server_round, config)
        self.expected["evaluate"] = dict.fromkeys(contents)
        return self.messages(contents, MessageType.EVALUATE)

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Flower API: pooled accuracy/loss over the clients of the last ``configure_evaluate``,
        per-client spread, and seen/unseen splits."""
        return self.evaluation_metrics(self.parse_replies(replies, self.expected["evaluate"]))

    def evaluation_metrics(self, valid: list[Reply]) -> MetricRecord | None:
        """Pooled metrics of valid evaluation replies (``fed-*``); their clients in ``client_evals``."""
        self.client_evals = [(r.pid, r.pid in self.unseen, r.metrics) for r in valid]
        if not valid:
            return None
        out: dict[str, float] = {}
        groups = {"fed": valid}
        if self.unseen:
            groups["fed-seen"] = [r for r in valid if r.pid not in self.unseen]
            groups["fed-unseen"] = [r for r in valid if r.pid in self.unseen]
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
                if all(f"{extra}-accuracy" in r.metrics for r in rs):
                    w = np.array([r.metrics[f"{extra}-num-examples"] for r in rs])
                    if w.sum() > 0:
                        for m in ("accuracy", "loss"):
                            vals = np.array([r.metrics[f"{extra}-{m}"] for r in rs])
                            out[f"{prefix}-{extra}-{m}"] = float((vals * w).sum() / w.sum())
        return MetricRecord(out)

    # ---- rounds ----------------------------------------------------------------------
    def fit_round(self, server_round: int, grid: Grid) -> dict[str, float]:
        """One round of training: Flower's configure_train, the exchange, aggregate_train."""
        with self.driving():
            msgs = self.configure_train(server_round, None, self.base_config["train"], grid)
        replies = self.exchange(grid, msgs)
        _, metrics = self.aggregate_train(server_round, replies)
        return {**dict(metrics or {}), **self.round_row(server_round)}

    @contextmanager
    def driving(self):
        """Marks calls of the Flower API made by this class's own rounds (``check_flower_loop``)."""
        self.in_round = True
        try:
            yield
        finally:
            self.in_round = False

    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, float]:
        out: dict[str, Any] = {}
        self.client_evals = []
        with self.driving():
            msgs = self.configure_evaluate(server_round, None, self.base_config["evaluate"], grid)
        if msgs:
            replies = self.exchange(grid, msgs, traffic="eval")
            out.update(self.aggregate_evaluate(server_round, replies) or {})
            accuracy = {pid: m["accuracy"] for pid, _, m in self.client_evals if m["num-examples"] > 0}
            if accuracy:  # per partition id
                out["fed-client-accuracy"] = accuracy
        out.update(self.evaluate_central())
        return out

    def evaluate_central(self) -> dict[str, float]:
        state = self.central_state() if self.cfg.central_eval and self.dataset is not None else None
        if state is None:
            return {}
        self.model.load_state_dict(state)
        ds = self.dataset
        m = evaluate(self.model, ds.test_x, ds.test_y, mean=ds.mean, std=ds.std)
        return {"central-accuracy": m["accuracy"], "central-loss": m["loss"]}

    def honour(self, initial_arrays: ArrayRecord | None, num_rounds: int | None, timeout: float | None,
               train_config: Mapping | None, evaluate_config: Mapping | None, evaluate_fn) -> None:
        """Take ``start``'s Flower arguments: a run length and timeout replace the run config's
        (``num-server-rounds``, ``round-timeout``), the configs are the base of every message's
        config, ``initial_arrays`` replaces the initial global model. What a strategy cannot honour
        (arrays or ``evaluate_fn`` without a single global model) fails here, in one line."""
        if num_rounds is not None:
            self.cfg = self.cfg.replace(num_server_rounds=int(num_rounds))
        if timeout is not None:
            self.cfg = self.cfg.replace(round_timeout=float(timeout))
        self.base_config = {"train": dict(train_config or {}), "evaluate": dict(evaluate_config or {})}
        if initial_arrays is not None and len(initial_arrays):
            self.set_global_arrays(initial_arrays, "initial_arrays")
        if evaluate_fn is not None and not self.global_model:
            raise ValueError(f"{type(self).__name__} keeps no single global model, so start() cannot call "
                             "evaluate_fn: leave it out (central-eval evaluates what it can)")

    def server_evaluate(self, server_round: int, evaluate_fn, result: Result) -> dict[str, float]:
        """Flower's ``evaluate_fn(round, arrays)`` on the global model; its metrics go to the
        result's ServerApp-side metrics and to the round's row as ``server-<name>``."""
        if evaluate_fn is None:
            return {}
        metrics = evaluate_fn(server_round, self.global_arrays())
        if metrics is None:
            return {}
        result.evaluate_metrics_serverapp.setdefault(server_round, MetricRecord()).update(metrics)
        return {f"server-{k}": v for k, v in metrics.items()}

    def start(self, grid: Grid, initial_arrays: ArrayRecord | None = None, num_rounds: int | None = None,
              timeout: float | None = None, train_config: ConfigRecord | None = None,
              evaluate_config: ConfigRecord | None = None, evaluate_fn=None, writer=None,
              start_round: int = 1) -> Result:
        """Flower's ``Strategy.start``: run all rounds and return Flower's ``Result`` (the final global
        model, when there is one, and the rounds' metrics: aggregate_train's, the federated
        evaluation's ``fed-*``, and the server side's ``central-*`` and ``evaluate_fn``'s).
        ``num_rounds`` / ``timeout`` default to the run config's ``num-server-rounds`` /
        ``round-timeout``. fedapp's additions: each round's full row (traffic, drops, timings) goes
        to ``writer`` as soon as it is complete and to ``self.history``; ``start_round`` continues a
        run restored from a checkpoint (its ``Result`` holds the rounds this call ran)."""
        self.honour(initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)
        num_rounds = self.cfg.num_server_rounds
        result = Result()
        self.results_path = writer.path if writer is not None else None
        if isinstance(grid, flower_grids()[1]):
            # a simulation's ServerApp shares the cores with the Ray workers: a second torch
            # thread only spins against them (aggregation took 2/3 of the process's time)
            torch.set_num_threads(1)
        self.summary()
        self.discover(grid, wait=self.cfg.node_wait_timeout)
        if len(self.clients) < self.cfg.num_clients:
            log(WARNING, "only %d of %d clients connected; going on with those", len(self.clients),
                self.cfg.num_clients)
        if not self.train_pool():
            raise RuntimeError("no training client is connected")
        t_start = time.time() - (self.history[-1]["wall-time"] if self.history else 0.0)
        if start_round == 1:
            row = {"round": 0, **self.evaluate_central(), "wall-time": 0.0}
            row.update(self.server_evaluate(0, evaluate_fn, result))
            self._record(row, writer, result)
        for rnd in range(start_round, num_rounds + 1):
            t0 = time.time()
            self.traffic.clear()
            self.dropped.clear()
            self.discover(grid)  # nodes that joined since the last round
            fit = self.fit_round(rnd, grid)
            result.train_metrics_clientapp[rnd] = MetricRecord(scalars(fit))
            row: dict[str, Any] = {"round": rnd, **fit}
            row["train-seconds"] = time.time() - t0
            if rnd == start_round and row.get("replies") == 0 and self.dropped and all(
                    reason.startswith("client-error") for reason in self.dropped):
                # every client failing its first round is a set-up error at the sites (a device that
                # is not there, missing data), not a fault to ride out: the run fails, saying why
                raise RuntimeError(f"round {rnd}: every client failed, so the run stops: "
                                   + "; ".join(sorted(self.dropped)))
            if rnd % self.cfg.eval_every == 0 or rnd == num_rounds:
                row.update(self.evaluate_round(rnd, grid))
            row.update(self.server_evaluate(rnd, evaluate_fn, result))
            self.totals.update(self.traffic)
            row.update(self.traffic)
            row.update({f"total-{k}": v for k, v in self.totals.items()})
            row["dropped-replies"] = sum(self.dropped.values())
            row["dropped-reasons"] = dict(self.dropped)
            row["round-seconds"] = time.time() - t0
            row["wall-time"] = time.time() - t_start
            self._record(row, writer, result)
        arrays = self.global_arrays()
        if arrays is not None:
            result.arrays = arrays
        return result

    def _record(self, row: dict[str, Any], writer, result: Result | None = None) -> None:
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
                    "train-bytes-up", "round-seconds"):
            if key in row:
                v = row[key]
                parts.append(f"{key} {v:.4f}" if isinstance(v, float) else f"{key} {v}")
        if row.get("dropped-replies"):
            parts.append(f"dropped {row['dropped-reasons']}")
        log(INFO, " | ".join(parts))
        if writer is not None:
            writer.add(row, self)
