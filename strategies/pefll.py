"""PeFLL: a hypernetwork on the server generates each client's model from a descriptor."""

from __future__ import annotations

from collections.abc import Mapping

import io

import numpy as np
import torch
from flwr.app import MessageType
from flwr.serverapp import Grid

from clients.pefll import PEFLL
from fedapp.core.config import ConfigError, Key
from fedapp.core.files import atomic_write
from fedapp.core.hypernetworks import EMBEDDINGS, HyperNetwork, embedding_network
from fedapp.core.models import MAX_GENERATED_PARAMS
from fedapp.core.records import Tensors
from fedapp.server.replies import Reply, Spec, spec_of
from strategies.base import FedStrategy
from strategies.settings import declare


#: pefll's run-config keys (``pefll.<key>``), all the server's: it sends the clients what they need
KEYS = (
    Key("k", int, 50, "Local SGD steps on the generated model per training step.", low=1),
    Key("beta", float, 0.01, "Step size: the clients' SGD and the L2 decay 1 - 2 beta lambda.",
        low=0.0, low_open=True),
    Key("lambda-h", float, 1e-3, "L2 weight lambda_h of the hypernetwork.", low=0.0),
    Key("lambda-v", float, 1e-3, "L2 weight lambda_v of the embedding network.", low=0.0),
    Key("lambda-theta", float, 0.0, "L2 weight lambda_theta of the client model in local SGD.", low=0.0),
    Key("embedding", str, "cnn", "phi: cnn (image + one-hot label channels; on feature vectors a linear "
        "map of the features and the one-hot label), mlp (one hidden layer of 20 on the flattened input and the "
        "one-hot label: the paper's Table 9), label (linear in the one-hot label), unlabeled (cnn on "
        "the image, or linear in the features, only), lstm (LEAF's LSTM over a character window followed by "
        "its label character: next-character data such as shakespeare).", EMBEDDINGS),
    Key("embed-dim", int, 0, "Descriptor size l; 0 means num-clients/4 (the paper; the authors' code "
        "uses 1 + num-clients/4).", low=0),
    Key("descriptor-batch", int, 32, "Examples in the batch B a training descriptor is computed on.", low=1),
    Key("eval-descriptor-examples", int, 0, "Random training examples an evaluation descriptor (Algorithm 1) "
        "is computed on; 0: all of the client's training examples.", low=0),
    Key("server-opt", str, "delta", "delta: the paper's update; adam: the authors' code's Adam on the "
        "averaged deltas; sgd: SGD with server-momentum on them (pFedHN's code).", ("delta", "adam", "sgd")),
    Key("server-lr", float, 2e-4, "Learning rate of server-opt adam or sgd.", low=0.0, low_open=True),
    Key("server-momentum", float, 0.9, "Momentum of server-opt sgd.", low=0.0, high=1.0),
    Key("server-clip", float, 0.0, "Clip the joint gradient norm of eta_h and eta_v at this before an adam/sgd "
        "step (the authors' code: 50); 0: no clipping.", low=0.0),
    Key("momentum", float, 0.9, "Momentum of the clients' SGD (the paper: 0.9).", low=0.0, high=1.0),
    Key("inner-wd", float, 0.0, "Weight decay of the clients' SGD (the authors' code: 5e-5).", low=0.0),
    Key("clip", float, 0.0, "Clip each local SGD step's gradient norm at this (the authors' code: 50); "
        "0: no clipping.", low=0.0),
    Key("standardize", bool, True, "Feed h the descriptor standardised by the mean and std of the first "
        "training descriptor's entries, (v - m) / s, as the authors' code does."),
    Key("hyper-hidden", int, 100, "Width of the hypernetwork's hidden layers (Table 5: 100).", low=1),
    Key("hyper-layers", int, 4, "Hidden layers of the hypernetwork (Table 5: 4, FC1-FC4; the code's "
        "hyper-nhid 3 counts the ones after the first).", low=1),
    Key("hypernet", str, "table5", "Hypernetwork body: table5 (the paper: ReLU after each of the 4 hidden "
        "layers) or code (the authors' code: no ReLU after the last hidden layer).", ("table5", "code")),
)


def embed_dim(cfg) -> int:
    """l = n/4 for n clients (the paper, Appendix A.2; the authors' code uses 1 + n/4), unless set."""
    return cfg.algo("embed-dim") or max(1, cfg.num_clients // 4)


class PeFLL(FedStrategy):
    """PeFLL (Scott, Zakerinia, Lampert, "PeFLL: Personalized Federated Learning by
    Learning to Learn", ICLR 2024), Algorithm 2 as three round trips per step.

    The server holds the embedding network eta_v and the hypernetwork eta_h (never sent).
    For each sampled client i, on a batch B_i of its data:

        v_i = 1/|B_i| sum_{(x,y) in B_i} phi(x, y; eta_v)              (client, phase 1)
        theta_i = h(v_i; eta_h)                                         (server)
        delta_theta_i = SGD_k(theta_i) - theta_i                        (client, phase 2)
        delta_eta_h_i = (d theta_i / d eta_h)^T delta_theta_i,
        delta_v_i = (d theta_i / d v_i)^T delta_theta_i                 (server)
        delta_eta_v_i = (d v_i / d eta_v)^T delta_v_i                   (client, phase 3)
        eta_h <- (1 - 2 beta lambda_h) eta_h + mean_i delta_eta_h_i
        eta_v <- (1 - 2 beta lambda_v) eta_v + mean_i delta_eta_v_i

    where SGD_k is k steps of step size beta (momentum, weight decay and clipping as
    configured) on loss + lambda_theta ||theta||^2. With ``server-opt = "adam"`` the negated
    mean deltas (plus the L2 terms) are instead fed as gradients to Adam with ``server-lr``
    (clipped jointly at ``server-clip``), as the authors' public code does; ``sgd`` is SGD with
    momentum on them (pFedHN's code). With ``standardize`` the hypernetwork sees (v - m) / s,
    m and s the mean and standard deviation of the entries of the first training descriptor
    (the authors' code), and delta_v is taken with respect to the raw v. A new client
    (Algorithm 1) sends only a descriptor and evaluates h(v) on its test split.
    """

    config_prefix, config_keys, client_keys = declare(PEFLL, *KEYS)
    checkpoint_attrs = ("hnet", "embed", "optimizers", "v_stats")
    global_model = False

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        torch.manual_seed(cfg.seed + 1)  # eta_h, eta_v initialised from the run seed, reproducibly
        self.hnet = HyperNetwork(embed_dim(cfg), {k: v.shape for k, v in self.global_state.items()},
                                 hidden=cfg.algo("hyper-hidden"), layers=cfg.algo("hyper-layers"),
                                 final_relu=cfg.algo("hypernet") == "table5")
        self.embed = self.build_embedding()
        opt, lr = cfg.algo("server-opt"), cfg.algo("server-lr")
        # fused Adam: one kernel over each tensor, 8x less server time on PeFLL's 12.3 M-parameter h
        # than the per-tensor loop; equal to it within a float32 rounding (2.4e-7 seen)
        make = {"adam": lambda ps: torch.optim.Adam(ps, lr=lr, fused=True),
                "sgd": lambda ps: torch.optim.SGD(ps, lr=lr, momentum=cfg.algo("server-momentum"))}.get(opt)
        self.optimizers = {name: make(getattr(self, name).parameters()) for name in ("hnet", "embed") if make}
        self.v_stats: torch.Tensor | None = None  # (m, s) of the standardisation, set at the first step
        self.descriptor_log: list = []  # (round, v per client) of every evaluation, for descriptors.npz
        self.descriptor_hist: dict = {}
        self.eval_descriptors: dict = {}  # the last evaluation's descriptors by partition id

    def build_embedding(self) -> torch.nn.Module:
        ds = self.dataset
        if ds is None:
            raise ConfigError(f"{type(self).__name__} builds its embedding network for the data's input shape and "
                              "classes: pass model= and dataset=")
        if self.cfg.algo("embedding") == "lstm" and ds.vocab_size != ds.num_classes:
            raise ConfigError(f"run config 'pefll.embedding' = 'lstm' reads an example's label as the next token: it "
                              f"needs next-token data (labels = the vocabulary, e.g. shakespeare), not "
                              f"{self.cfg.dataset!r}")
        return embedding_network(self.cfg.algo("embedding"), ds.input_shape, ds.num_classes, embed_dim(self.cfg))

    @classmethod
    def check_model(cls, cfg, model) -> None:
        """h generates every tensor of the model: up to ``MAX_GENERATED_PARAMS`` entries."""
        size = sum(v.numel() for v in model.state_dict().values())
        if size > MAX_GENERATED_PARAMS:
            raise ConfigError(f"run config 'model' = {cfg.model!r} has {size:,} parameters: {cls.__name__}'s "
                              f"hypernetwork generates models of at most {MAX_GENERATED_PARAMS:,}")

    @classmethod
    def check_config(cls, cfg) -> None:
        p = cls.config_prefix
        if cfg.algo("server-clip") and cfg.algo("server-opt") == "delta":
            raise ConfigError(f"run config '{p}.server-clip' = {cfg.algo('server-clip')}: clipping needs "
                              f"'{p}.server-opt' adam or sgd, not delta")

    def central_state(self) -> None:
        return None  # every client has its own model

    def model_state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The hypernetwork (which generates a client's model from its descriptor) and the embedding
        network (which computes a descriptor from a client's data), as two state dicts."""
        return {"hypernetwork": self.hnet.state_dict(), "embedding": self.embed.state_dict()}

    # ---- messages ----------------------------------------------------------------
    def phase_config(self, server_round: int) -> dict:
        cfg = self.cfg
        return {**self.sgd_config(), "embed-dim": embed_dim(cfg), "embedding": cfg.algo("embedding"),
                "descriptor-batch": cfg.algo("descriptor-batch"),
                "eval-descriptor-examples": cfg.algo("eval-descriptor-examples")}

    def sgd_config(self) -> dict:
        """The clients' local SGD: the client settings with PeFLL's own k steps of size beta, momentum,
        weight decay and clipping."""
        cfg = self.cfg
        return {**self.client_settings(cfg), "local-steps": cfg.algo("k"), "lr": cfg.algo("beta"),
                "lambda-theta": cfg.algo("lambda-theta"), "momentum": cfg.algo("momentum"),
                "weight-decay": cfg.algo("inner-wd"), "clip": cfg.algo("clip")}

    def phase(self, server_round: int, name: str) -> dict:
        """The config of one of the step's round trips (``round_trip``): the phase and its settings."""
        return {**self.phase_config(server_round), "phase": name}

    def descriptor_spec(self, pid: int) -> Spec:
        return {"v": {"v": ((embed_dim(self.cfg),), torch.float32)}}

    def delta_spec(self, pid: int) -> Spec:
        return spec_of({"delta": self.global_state})

    # ---- the three phases ----------------------------------------------------------
    def descriptors(self, server_round: int, grid: Grid, pids: list[int], train: bool = True,
                    traffic: str = "train") -> dict[int, torch.Tensor]:
        """Phase 1 (or the first half of Algorithm 1 with ``train=False``): v_i per client."""
        eta_v = {k: v.detach() for k, v in self.embed.state_dict().items()}
        spec = self.descriptor_spec
        if not train:  # an evaluation descriptor comes with the client's training label counts
            classes = self.dataset.num_classes
            spec = lambda pid: {"v": {**self.descriptor_spec(pid)["v"], "hist": ((classes,), torch.int64)}}  # noqa: E731
        replies = self.driver.round_trip(grid, server_round, dict.fromkeys(pids, {}), self.phase(server_round, "descriptor"),
                                  spec, MessageType.TRAIN if train else MessageType.EVALUATE, traffic,
                                  broadcast={"eta_v": eta_v})
        if not train:  # kept for descriptors.npz
            self.eval_descriptors = {r.pid: r.payload["v"] for r in replies}
        return {r.pid: r.payload["v"]["v"] for r in replies}

    def h(self, v: torch.Tensor) -> Tensors:
        """theta = h(v), v standardised first when configured (differentiable in v)."""
        if self.v_stats is not None:
            v = (v - self.v_stats[0]) / self.v_stats[1]
        return self.hnet(v)

    def set_standardization(self, v: torch.Tensor) -> None:
        """m, s from the entries of the first training descriptor, fixed from then on (the authors'
        code: torch.mean and the unbiased torch.std of the first sampled client's v)."""
        if self.v_stats is None and self.cfg.algo("standardize"):
            # a one-entry descriptor (embed-dim 1) or a constant one has no spread: divide by 1
            s = v.std() if v.numel() > 1 else torch.ones(())
            self.v_stats = torch.stack([v.mean(), s if s > 0 else torch.ones(())]).detach()

    def personal_model(self, v: torch.Tensor) -> Tensors:
        with torch.no_grad():
            return self.h(v)

    def local_training(self, server_round: int, grid: Grid, v: Mapping[int, torch.Tensor],
                       traffic: str = "train") -> list[Reply]:
        """Phase 2: theta_i = h(v_i) to each client (a different message each), delta_theta_i back."""
        payloads = {pid: {"theta": self.personal_model(vi)} for pid, vi in v.items()}
        return self.driver.round_trip(grid, server_round, payloads, self.phase(server_round, "train"), self.delta_spec,
                               traffic=traffic)

    def vjp_graph(self, v: Mapping[int, torch.Tensor], delta: Mapping[int, Tensors], pids: list[int]):
        """The rows v_i of ``pids`` stacked (a leaf), theta = h(v) for all rows in one forward, and the
        deltas stacked the same way as the backward pass's grad_outputs."""
        rows = torch.stack([v[p].detach() for p in pids]).requires_grad_(True)
        theta = self.h(rows)
        return rows, list(theta.values()), [torch.stack([delta[p][k] for p in pids]) for k in theta]

    def descriptor_vjp(self, v: Mapping[int, torch.Tensor], delta: Mapping[int, Tensors]) -> dict[int, torch.Tensor]:
        """delta_v_i = (d theta_i / d v_i)^T delta_theta_i for every client in ``delta`` (none: none)."""
        pids = list(delta)
        if not pids:
            return {}
        rows, theta, grad_out = self.vjp_graph(v, delta, pids)
        (delta_v,) = torch.autograd.grad(theta, [rows], grad_outputs=grad_out)
        return dict(zip(pids, delta_v))

    def hypernetwork_vjp(self, v: Mapping[int, torch.Tensor], delta: Mapping[int, Tensors],
                         pids: list[int]) -> list[torch.Tensor]:
        """sum over ``pids`` of delta_eta_h_i = (d theta_i / d eta_h)^T delta_theta_i. One backward pass
        over the stacked rows forms the sum itself: one eta_h-sized gradient, not one per client (about
        five times less server time at five clients of PeFLL's 12.3 M-parameter h)."""
        _, theta, grad_out = self.vjp_graph(v, delta, pids)
        return list(torch.autograd.grad(theta, list(self.hnet.parameters()), grad_outputs=grad_out))

    def hypernetwork_update(self, v: Mapping[int, torch.Tensor], delta: Mapping[int, Tensors],
                            pids: list[int]) -> list[torch.Tensor]:
        """mean_i delta_eta_h_i over ``pids``, or the robust combination of the per-client deltas
        (run config 'aggregation')."""
        if self.cfg.aggregation == "mean":
            return [g.div_(len(pids)) for g in self.hypernetwork_vjp(v, delta, pids)]
        return self.mean_update([self.hypernetwork_vjp(v, delta, [p]) for p in pids])

    def embedding_backprop(self, server_round: int, grid: Grid, delta_v: Mapping[int, torch.Tensor]
                           ) -> dict[int, list[torch.Tensor]]:
        """Phase 3: delta_v_i to each client, delta_eta_v_i back."""
        spec = spec_of({"delta": self.embed.state_dict()})
        replies = self.driver.round_trip(grid, server_round, {pid: {"delta_v": {"v": d}} for pid, d in delta_v.items()},
                                  self.phase(server_round, "backprop"), lambda pid: spec)
        return {r.pid: list(r.payload["delta"].values()) for r in replies}

    def train_round(self, server_round: int, grid: Grid) -> dict[str, float]:
        pids = self.driver.round_sample("train", server_round)
        v = self.descriptors(server_round, grid, pids)
        if v:
            self.set_standardization(v[next(p for p in pids if p in v)])
        trained = self.local_training(server_round, grid, v)
        delta_theta = {r.pid: r.payload["delta"] for r in trained}
        delta_v = self.descriptor_vjp(v, delta_theta)
        delta_e = self.embedding_backprop(server_round, grid, delta_v)
        done = sorted(delta_e)  # a client missing in any phase drops out of this step
        metrics = {"replies": len(done)}
        if len(done) < self.cfg.min_train_nodes:
            metrics["skipped"] = 1
            return metrics
        self.apply({"hnet": (self.hypernetwork_update(v, delta_theta, done), self.cfg.algo("lambda-h")),
                    "embed": self.embedding_update({p: delta_e[p] for p in done})})
        losses = [r.metrics["train-loss"] for r in trained if r.pid in delta_e]
        metrics["train-loss"] = sum(losses) / len(losses)
        return metrics

    def embedding_update(self, deltas: Mapping[int, list[torch.Tensor]]) -> tuple[list[torch.Tensor], float]:
        """(mean_i delta_eta_v_i, lambda_v): eta_v's update direction and L2 weight."""
        return self.mean_update(list(deltas.values())), self.cfg.algo("lambda-v")

    def mean_update(self, deltas: list[list[torch.Tensor]]) -> list[torch.Tensor]:
        """mean_i delta_i over the clients, or their robust combination (run config 'aggregation')."""
        if self.cfg.aggregation == "mean":
            return [torch.stack(ds).mean(0) for ds in zip(*deltas)]
        return list(self.combine([dict(enumerate(d)) for d in deltas], [1.0] * len(deltas)).values())

    def apply(self, updates: Mapping[str, tuple[list[torch.Tensor], float]]) -> None:
        """For each network ``name: (delta, lambda)``: eta <- (1 - 2 beta lambda) eta + delta, or
        the optimiser's step on the gradient -delta + 2 lambda eta, clipped jointly over all
        networks at ``server-clip`` (the authors' code clips eta_h and eta_v together)."""
        if not self.optimizers:
            with torch.no_grad():
                for name, (delta, lam) in updates.items():
                    for p, d in zip(getattr(self, name).parameters(), delta):
                        p.mul_(1 - 2 * self.cfg.algo("beta") * lam).add_(d)
            return
        params = []
        for name, (delta, lam) in updates.items():
            for p, d in zip(getattr(self, name).parameters(), delta):
                p.grad = torch.mul(p.detach(), 2 * lam).sub_(d)  # -d + 2 lam eta, one temporary
                params.append(p)
        if self.cfg.algo("server-clip"):
            torch.nn.utils.clip_grad_norm_(params, self.cfg.algo("server-clip"))
        for name in updates:
            self.optimizers[name].step()

    # ---- evaluation (Algorithm 1 for every client, seen or new) ---------------------
    def personal_models(self, server_round: int, grid: Grid, pids: list[int]) -> dict[int, Tensors]:
        v = self.descriptors(server_round, grid, pids, train=False, traffic="eval")
        return {pid: self.personal_model(vi) for pid, vi in v.items()}

    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, float]:
        if not self.cfg.fraction_evaluate:
            return {}
        pids = self.driver.round_sample("evaluate", server_round)
        thetas = self.personal_models(server_round, grid, pids)
        replies = self.driver.round_trip(grid, server_round, {pid: {"theta": t} for pid, t in thetas.items()},
                                  lambda pid: {**self.client_config("evaluate", pid, server_round), "phase": "evaluate"}, None,
                                  MessageType.EVALUATE, "eval")
        self.save_descriptors(server_round)
        return dict(self.driver.evaluation_metrics(replies) or {})

    def save_descriptors(self, server_round: int) -> None:
        """descriptors.npz beside rounds.json, rewritten at every evaluation: per evaluation
        ``round`` and ``v`` (evaluations x clients x l, raw descriptors, NaN where a client did not
        answer); per client ``pid``, ``new`` (never trained on) and ``hist`` (training label counts),
        so the relation between descriptors and client data can be studied after a run."""
        got = self.eval_descriptors
        if not got or self.results_path is None or "hist" not in next(iter(got.values())):
            return
        pids = sorted(self.clients)
        v = torch.full((len(pids), embed_dim(self.cfg)), float("nan"))
        for i, pid in enumerate(pids):
            if pid in got:
                v[i] = got[pid]["v"]
                self.descriptor_hist[pid] = got[pid]["hist"]
        self.descriptor_log.append((server_round, v.numpy()))
        zeros = np.zeros(len(next(iter(got.values()))["hist"]), dtype=np.int64)
        hist = np.stack([np.asarray(self.descriptor_hist.get(p, zeros)) for p in pids])
        path = self.results_path / "descriptors.npz"
        buf = io.BytesIO()
        np.savez(buf, round=np.array([r for r, _ in self.descriptor_log]), v=np.stack([x for _, x in self.descriptor_log]),
                 pid=np.array(pids), new=np.array([p in self.unseen for p in pids]), hist=hist,
                 m_s=(self.v_stats.numpy() if self.v_stats is not None else np.array([0.0, 1.0])))
        atomic_write(path, buf.getvalue())


ALGORITHMS = {"pefll": PeFLL}
