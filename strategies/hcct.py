"""HCCT: hierarchical clustering-based collaborative training (Sun, Kountouris, Zhang)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.common import log
from flwr.serverapp import Grid

from clients.hcct import HCCT as DECLARED
from clients.hcct import HCCT_P
from fedapp.core.aggregation import weighted_mean
from fedapp.core.config import ConfigError, Key, RunConfig
from fedapp.core.experiment import round_lr
from fedapp.core.layer_split import check_head
from fedapp.core.models import body_head_keys, layer_groups
from fedapp.core.records import Shared, Tensors
from fedapp.server.replies import Reply, spec_of
from strategies.base import FedStrategy
from strategies.settings import declare

Group = tuple[int, ...]

#: the server's run-config keys of hcct, hcct-e and hcct-p (``hcct.<key>``): how groups form and clients arrive
GROUPING_KEYS = (
    Key("alpha", float, 1000.0, "Weight of the data-size term -alpha / D_G of the client utility.", low=0.0),
    Key("alpha-per-client", bool, False, "alpha_i = D_i, the client's own data size (the authors' public code's "
        "alpha = -1): U_i = -D_i / D_G + cos, a data term in [-1, 0) that needs no tuning; 'alpha' is then unused."),
    Key("groups", str, "", "Fixed collaboration pattern by partition id, e.g. '0,1;2' ('' learns it)."),
    Key("first-round", str, "singletons", "Groups of round 1, before any update exists: 'singletons' "
        "(Algorithm 1, line 4) or 'global', all clients in one group (the authors' code).",
        ("singletons", "global")),
    Key("initial-clients", int, 0, "Clients (partition ids 0..n-1) that train from round 1; 0: all.", low=0),
    Key("new-clients", int, 0, "New clients (the next partition ids) that arrive every 'arrival-every' "
        "rounds (Section 7.3, Fig. 3); they train alone from the initial model first.", low=0),
    Key("arrival-every", int, 10, "Rounds between arrivals of 'new-clients'.", low=1),
    Key("newcomer", str, "next-round", "A client without an update: trains alone from the initial model "
        "and is placed the round after ('next-round'), or, as the authors' code does, first trains once "
        "from the initial model at the initial lr and is placed by that update in the same round "
        "('same-round').", ("next-round", "same-round")),
)


def group_name(group: Group) -> str:
    """The name a group's model travels under in an exchange's shared payloads."""
    return "group-" + "-".join(map(str, group))


def _gram(updates: Mapping[int, np.ndarray]) -> dict[tuple[int, int], float]:
    """Inner products <g_i, g_j>: every utility below needs only these, so partitioning costs
    O(n^2 d) once instead of O(d) per evaluated group."""
    ids = sorted(updates)
    flat = np.stack([updates[i] for i in ids]).astype(np.float64)
    gram = flat @ flat.T
    return {(i, j): float(gram[a, b]) for a, i in enumerate(ids) for b, j in enumerate(ids)}


Alpha = float | Mapping[int, float]  # one alpha for all clients, or alpha_i per client


def group_utility(members: Sequence[int], updates: Mapping[int, np.ndarray] | None, sizes: Mapping[int, float],
                  alpha: Alpha, gram: Mapping[tuple[int, int], float] | None = None) -> float:
    """Sum over i in G of U_i = -alpha_i / D_G + cos(g_i, g_G), g_G = sum_j D_j g_j / D_G.

    ``alpha`` is one number for every client or a mapping client -> alpha_i.

    cos(g_i, g_G) = sum_j D_j <g_i, g_j> / (|g_i| sqrt(sum_jk D_j D_k <g_j, g_k>)); a zero vector has
    cosine 0. ``gram`` (from the updates when not given) holds the inner products.
    """
    gram = _gram(updates) if gram is None else gram
    d_group = sum(sizes[i] for i in members)
    norm_g = math.sqrt(max(sum(sizes[j] * sizes[k] * gram[j, k] for j in members for k in members), 0.0))
    total = 0.0
    for i in members:
        norm_i = math.sqrt(max(gram[i, i], 0.0))
        dot = sum(sizes[j] * gram[i, j] for j in members)
        a_i = alpha[i] if isinstance(alpha, Mapping) else alpha
        total += -a_i / d_group + (dot / (norm_i * norm_g) if norm_i > 0 and norm_g > 0 else 0.0)
    return total


def merge_benefit(a: Sequence[int], b: Sequence[int], updates: Mapping[int, np.ndarray] | None,
                  sizes: Mapping[int, float], alpha: Alpha, gram: Mapping[tuple[int, int], float] | None = None) -> float:
    """Change of the members' summed utility when groups a and b merge: S(a u b) - S(a) - S(b)."""
    gram = _gram(updates) if gram is None else gram
    return (group_utility([*a, *b], None, sizes, alpha, gram) - group_utility(a, None, sizes, alpha, gram)
            - group_utility(b, None, sizes, alpha, gram))


def hierarchical_partition(updates: Mapping[int, np.ndarray], sizes: Mapping[int, float], alpha: Alpha,
                           trace: list | None = None) -> list[Group]:
    """Agglomerative partition of Algorithm 2, from singletons.

    The best pair of groups (largest :func:`merge_benefit`) is merged while its benefit is positive.
    Benefits are cached: after a merge only the pairs with the new group are computed (ties: the
    pair with the lowest client ids). ``trace`` receives (a, b, benefit) per merge, in order.
    """
    gram = _gram(updates)
    groups = [(i,) for i in sorted(updates)]
    cache = {(a, b): merge_benefit(a, b, None, sizes, alpha, gram) for n, a in enumerate(groups) for b in groups[n + 1:]}
    while cache:
        (a, b), gain = max(cache.items(), key=lambda kv: (kv[1], [-i for i in kv[0][0] + kv[0][1]]))
        if gain <= 0:
            break
        merged = tuple(sorted(a + b))
        if trace is not None:
            trace.append((a, b, gain))
        groups = [g for g in groups if g not in (a, b)]
        cache = {pair: v for pair, v in cache.items() if a not in pair and b not in pair}
        cache.update({(g, merged): merge_benefit(g, merged, None, sizes, alpha, gram) for g in groups})
        groups.append(merged)
    return sorted(groups, key=lambda g: g[0])


def parse_groups(text: str) -> list[Group]:
    """'0,1;2' -> [(0, 1), (2,)]: a fixed collaboration pattern (Table II)."""
    return [tuple(sorted(int(p) for p in g.split(","))) for g in text.split(";") if g.strip()]


class HCCT(FedStrategy):
    """HCCT (Sun, Kountouris, Zhang, "How to Collaborate: Towards Maximizing the Generalization
    Performance in Cross-Silo Federated Learning", IEEE TMC 2024), Algorithms 1 and 2.

    Every client trains every round (full participation). Round 1 (the paper's round 0) every
    client is its own group (``first-round = "global"``: one group of all, as the authors' code does). Each later round the clients are partitioned again, from singletons,
    with the previous round's updates g_i = w_i^{t,K} - w_{G(i)}^t: the utility of client i in
    group G is

        U_i(G) = -alpha_i / D_G + cos(g_i, g_G),   g_G = sum_{j in G} D_j g_j / D_G,

    with alpha_i = alpha, or alpha_i = D_i with ``alpha-per-client`` (the authors' public code's
    alpha = -1, which makes the data term -D_i / D_G scale-free), and the pair of groups whose merge
    most increases the summed utility of their members is merged while that increase is positive.
    Group G starts from w_G = sum_{j in G} D_j w_j / D_G (the members' current models) and after
    local training takes w_G = sum_{j in G} D_j w_j^{t,K} / D_G; each member receives its own
    group's model. A newcomer trains one round alone from the initial model and is then placed by
    the same rule.
    """

    config_prefix, config_keys, client_keys = declare(DECLARED, *GROUPING_KEYS)
    checkpoint_attrs = ("models", "updates", "groups", "group_log")
    global_model = False  # a model per group

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, dataset=None):
        super().__init__(cfg, model, dataset)
        self.shared_keys = self.shared_state_keys()
        self.init_state: Tensors = {k: self.global_state[k] for k in self.shared_keys}
        self.similarity_keys = [k for k in self.shared_keys if self.init_state[k].is_floating_point()]
        self.models: dict[int, Tensors] = {}  # each client's current (group) model
        self.updates: dict[int, Tensors] = {}  # each client's last local update g_i
        self.groups: list[Group] = []
        self.starts: dict[Group, Tensors] = {}
        self.group_models: dict[Group, Tensors] = {}  # this round's model of each group that trained
        self.group_log: list[dict[str, Any]] = []

    @classmethod
    def check_config(cls, cfg: RunConfig) -> None:
        if cfg.fraction_train != 1.0:
            raise ConfigError(f"run config 'fraction-train' = {cfg.fraction_train}: {cls.__name__} needs "
                              "full participation (1.0)")
        try:
            fixed = parse_groups(cfg.algo("groups"))
        except ValueError:
            raise ConfigError(f"run config '{cls.config_prefix}.groups' = {cfg.algo('groups')!r}: "
                              "expected partition ids like '0,1;2'") from None
        ids = [i for g in fixed for i in g]
        if len(ids) != len(set(ids)) or any(not 0 <= i < cfg.num_clients for i in ids):
            raise ConfigError(f"run config '{cls.config_prefix}.groups' = {cfg.algo('groups')!r}: each "
                              f"partition id in 0..{cfg.num_clients - 1} at most once")

    # ---- who takes part ------------------------------------------------------------------
    def arrived(self, server_round: int) -> int:
        """Clients present in ``server_round``: partition ids below initial-clients + new-clients per
        arrival-every rounds elapsed (the authors' schedule: 10, then 1 or 2 more every 10 epochs)."""
        first = self.cfg.algo("initial-clients") or self.cfg.num_clients
        return min(self.cfg.num_clients, first + self.cfg.algo("new-clients") * ((server_round - 1)
                                                                              // self.cfg.algo("arrival-every")))

    def present(self, server_round: int, pool: list[int]) -> list[int]:
        """The clients of ``pool`` arrived by ``server_round``, the only ones sampled
        (``fedapp.server.hooks.OwnHooks``)."""
        return [p for p in pool if p < self.arrived(server_round)]

    # ---- what is shared -----------------------------------------------------------------
    def shared_state_keys(self) -> list[str]:
        """State dict keys averaged within a group (HCCT-P keeps the head out)."""
        return list(self.global_state)

    def flat_update(self, pid: int) -> np.ndarray:
        return torch.cat([self.updates[pid][k].reshape(-1) for k in self.similarity_keys]).double().numpy()

    # ---- grouping -----------------------------------------------------------------------
    def partition(self, server_round: int, pool: list[int]) -> list[Group]:
        """This round's groups; clients without an update yet (round 1, newcomers) stay alone."""
        fixed = parse_groups(self.cfg.algo("groups"))
        if fixed:
            placed = {i for g in fixed for i in g}
            return [g for g in ([tuple(i for i in g if i in pool) for g in fixed]
                                + [(i,) for i in pool if i not in placed]) if g]
        known = [pid for pid in pool if pid in self.updates]
        if not known and self.cfg.algo("first-round") == "global":
            return [tuple(sorted(pool))]
        sizes = {pid: self.clients[pid].num_train for pid in known}
        alpha = sizes if self.cfg.algo("alpha-per-client") else self.cfg.algo("alpha")
        groups = hierarchical_partition({pid: self.flat_update(pid) for pid in known}, sizes, alpha) if known else []
        return sorted(groups + [(pid,) for pid in pool if pid not in self.updates], key=lambda g: g[0])

    def group_start(self, group: Group) -> Tensors:
        """w_G = sum_j D_j w_j / D_G over the members' current models (newcomers: the initial model)."""
        states = [self.models.get(pid, self.init_state) for pid in group]
        return weighted_mean(states, [self.clients[pid].num_train for pid in group])

    def places_newcomers_at_once(self) -> bool:
        return self.cfg.algo("newcomer") == "same-round"

    def probe_newcomers(self, server_round: int, grid: Grid, pool: list[int]) -> None:
        """newcomer = "same-round": each newcomer trains once from the initial model at the round-1
        lr; its update and model then count as if it had trained in the previous round."""
        new = [pid for pid in pool if pid not in self.updates]
        if not new or not self.updates:  # round 1 has no one to be placed among
            return
        replies = self.driver.round_trip(grid, server_round, dict.fromkeys(new, {}), lambda pid: self.client_config("train", pid, 1),
                                  lambda pid: self.reply_spec(pid, server_round), broadcast={"arrays": self.init_state})
        for r in replies:
            self.updates[r.pid] = {k: r.payload["arrays"][k] - self.init_state[k] for k in self.similarity_keys}
            self.models[r.pid] = r.payload["arrays"]

    def begin(self, phase: str, server_round: int, grid: Grid) -> None:
        """This round's groups and their start models, before the training messages."""
        if phase != "train":
            return
        pool = self.present(server_round, self.driver.train_pool())
        if self.places_newcomers_at_once():
            self.probe_newcomers(server_round, grid, pool)
        self.groups = self.partition(server_round, pool)
        self.starts = {g: self.group_start(g) for g in self.groups}
        self.group_models = {}
        log(INFO, "round %d groups: %s", server_round, [list(g) for g in self.groups])
        self.group_log.append({"round": server_round, "groups": [list(g) for g in self.groups]})

    def round_row(self, server_round: int) -> dict[str, Any]:
        """The row's groups (``fedapp.server.hooks.OwnHooks``)."""
        return {"groups": [list(g) for g in self.groups], "num-groups": len(self.groups)}

    def group_of(self, pid: int) -> Group:
        return next(g for g in self.groups if pid in g)

    # ---- hooks --------------------------------------------------------------------------
    def broadcast_payload(self, phase: str, server_round: int):
        return {}  # each group trains its own model, each client evaluates its own

    def shared_payloads(self, phase: str, server_round: int):
        if phase == "train":
            return {group_name(g): start for g, start in self.starts.items()}
        return {"initial": self.init_state, **{group_name(g): m for g, m in self.group_models.items()}}

    def client_payload(self, phase: str, pid: int, server_round: int):
        if phase == "train":
            return {"arrays": Shared(group_name(self.group_of(pid)))}
        group = next((g for g in self.group_models if pid in g), None)
        if group is not None:
            return {"arrays": Shared(group_name(group))}
        return {"arrays": self.models[pid]} if pid in self.models else {"arrays": Shared("initial")}

    def reply_spec(self, pid: int, server_round: int):
        return spec_of({"arrays": self.init_state})

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        by_pid = {r.pid: r for r in replies}
        for group in self.groups:
            got = [by_pid[pid] for pid in group if pid in by_pid]
            if not got:
                continue
            start = self.starts[group]
            for r in got:
                self.updates[r.pid] = {k: r.payload["arrays"][k] - start[k] for k in self.similarity_keys}
            model = self.combine([r.payload["arrays"] for r in got], [r.num_examples for r in got])
            self.group_models[group] = model
            for pid in group:
                self.models[pid] = model
        self.after_aggregate(server_round)

    def after_aggregate(self, server_round: int) -> None:
        """Work after every aggregation of a round (HCCT-E picks its similarity layer after round 1)."""

    def central_state(self) -> Tensors | None:
        """The single model when all clients form one group and the whole model is shared."""
        if len(self.groups) != 1 or self.shared_keys != list(self.global_state):
            return None
        return self.models[self.groups[0][0]]

    def model_state(self) -> Tensors | dict[str, Tensors] | None:
        """The single model where there is one (``central_state``), else each client's current
        model (its group's; HCCT-P: with the client's own head) as ``client-<partition id>``."""
        single = self.central_state()
        return single if single is not None else {f"client-{pid}": m for pid, m in sorted(self.models.items())}

    def extra_results(self) -> dict[str, Any]:
        """The groups of every round (``fedapp.server.hooks.OwnHooks``)."""
        return {"hcct-groups": self.group_log}


class HCCTE(HCCT):
    """HCCT-E: the cosine similarities use only one layer, chosen once after round 1 (every client
    has then trained once from the initial model) as the layer L with the largest score over the
    tensors k of L among the similarity keys; g_ik are client i's update entries (w_local - w_global).

    ``hcct.layer-score = "dispersion"`` (default: what the authors ran, their public code
    github.com/hiyuchang/HCCT, main_cluster.py, cluster_metric "layer"): with the pseudo-gradients
    p_ik = -g_ik / eta (eta the round's lr) pooled over all clients and all entries of tensor k,

        score(L) = sum_{k in L} Var(p_k) / mean(p_k) = -(1/eta) sum_{k in L} Var(g_k) / mean(g_k),

    Var and mean over the pooled entries (population variance), so a score is signed: a layer whose
    pooled mean update is positive scores negative. For a Conv/Linear with bias this is the weight's
    ratio plus the bias's ratio; a following norm layer's tensors add theirs.

    ``"scale-free"`` (this project's alternative, not the authors'): per-entry statistics across the
    clients i, scale-free so that layers of different sizes compare,

        score(L) = sum_j Var_i(g_ij) / sum_j (mean_i g_ij)^2   over the entries j of L.
    """

    config_prefix, config_keys, client_keys = declare(
        DECLARED, *GROUPING_KEYS,
        Key("layer-score", str, "dispersion", "HCCT-E layer choice: dispersion (authors' code: "
            "Var/mean of the pooled pseudo-gradients per tensor, summed over the layer) or scale-free "
            "(sum_j Var_i / sum_j mean_i^2).", ("dispersion", "scale-free")))
    checkpoint_attrs = ("similarity_keys",)  # added to HCCT's: the layer chosen after round 1

    def layer_scores(self, server_round: int) -> dict[tuple[str, ...], float]:
        """Each layer's score (its similarity keys -> score) from the clients' current updates."""
        lr, scores = round_lr(self.cfg, server_round), {}
        for layer in layer_groups(self.model):
            keys = tuple(k for k in layer if k in self.similarity_keys)
            if not keys:
                continue
            # one (clients x entries) matrix per tensor
            g = [torch.stack([u[k].reshape(-1) for u in self.updates.values()]).double() for k in keys]
            if self.cfg.algo("layer-score") == "scale-free":
                g = torch.cat(g, 1)
                score = float(g.var(0, unbiased=False).sum() / g.mean(0).square().sum().clamp_min(1e-30))
            else:
                score = sum(float(p.var(unbiased=False) / p.mean()) for p in (-x / lr for x in g))
            scores[keys] = -math.inf if math.isnan(score) else score  # 0/0: a layer no client moved
        return scores

    def after_aggregate(self, server_round: int) -> None:
        if server_round != 1 or len(self.updates) < 2:
            return
        scores = self.layer_scores(server_round)
        best = max(scores, key=scores.get)
        log(INFO, "HCCT-E similarity layer %s (%s layer scores %s)", best, self.cfg.algo("layer-score"),
            {k[0]: round(v, 3) for k, v in scores.items()})
        self.similarity_keys = list(best)

    def extra_results(self) -> dict[str, Any]:
        return {**super().extra_results(), "hcct-similarity-keys": self.similarity_keys}


class HCCTP(HCCT):
    """HCCT-P: the last layer (classifier) stays on each client; groups share and average the rest.

    ``hcct.head-start = "group"`` is the authors' code (``--personalize 1``): the whole model is
    averaged and sent, so a client trains from its group's averaged head; each client then keeps the
    group's body with its own trained head, which it is evaluated with and which enters the next
    group start w_G = sum_j D_j w_j / D_G.
    """

    config_prefix, config_keys, client_keys = declare(HCCT_P, *GROUPING_KEYS, *HCCT_P.keys)

    @classmethod
    def check_model(cls, cfg, model):
        check_head(cfg, model)

    def shared_state_keys(self) -> list[str]:
        if self.cfg.algo("head-start") == "group":
            return list(self.global_state)
        return body_head_keys(self.model)[0]

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        super().aggregate(server_round, replies)
        if self.cfg.algo("head-start") == "group":
            head = body_head_keys(self.model)[1]
            for r in replies:
                self.models[r.pid] = {**self.models[r.pid], **{k: r.payload["arrays"][k] for k in head}}
            self.group_models = {}  # each client holds its own head now: no model is shared


ALGORITHMS = {"hcct": HCCT, "hcct-e": HCCTE, "hcct-p": HCCTP}
