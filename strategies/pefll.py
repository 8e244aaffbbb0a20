"""PeFLL: a hypernetwork on the server generates each client's model from a descriptor."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import torch
from flwr.app import MessageType
from flwr.serverapp import Grid

from clients.pefll import EMBEDDINGS, HyperNetwork, PeFLLClient, embedding_network
from fedapp.config import ConfigError, Key
from fedapp.records import Payload, Tensors, make_content
from strategies.base import FedStrategy, Reply, Spec, spec_of


def embed_dim(cfg) -> int:
    """l = 1 + n/4 for n clients (the paper's choice), unless set."""
    return cfg.algo("embed-dim") or 1 + cfg.num_clients // 4


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

    where SGD_k is k steps of step size beta on loss + lambda_theta ||theta||^2. With
    ``server-opt = "adam"`` the negated mean deltas (plus the L2 terms) are instead fed as
    gradients to Adam with ``server-lr``, as the authors' public code does. A new client
    (Algorithm 1) sends only a descriptor and evaluates h(v) on its test split.
    """

    config_prefix = "pefll"
    config_keys = (
        Key("k", int, 50, "Local SGD steps on the generated model per training step.", low=1),
        Key("beta", float, 0.01, "Step size: the clients' SGD and the L2 decay 1 - 2 beta lambda.",
            low=0.0, low_open=True),
        Key("lambda-h", float, 1e-3, "L2 weight lambda_h of the hypernetwork.", low=0.0),
        Key("lambda-v", float, 1e-3, "L2 weight lambda_v of the embedding network.", low=0.0),
        Key("lambda-theta", float, 0.0, "L2 weight lambda_theta of the client model in local SGD.", low=0.0),
        Key("embedding", str, "cnn", "phi: cnn (image + one-hot label channels), label (linear in the "
            "one-hot label), unlabeled (cnn on the image only).", EMBEDDINGS),
        Key("embed-dim", int, 0, "Descriptor size l; 0 means 1 + num-clients/4.", low=0),
        Key("descriptor-batch", int, 32, "Examples in the batch B a training descriptor is computed on.", low=1),
        Key("server-opt", str, "delta", "delta: the paper's update; adam: the public code's Adam on the "
            "averaged deltas.", ("delta", "adam")),
        Key("server-lr", float, 2e-4, "Adam learning rate (server-opt adam).", low=0.0, low_open=True),
    )
    checkpoint_attrs = ("hnet", "embed", "optimizers")

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        torch.manual_seed(cfg.seed + 1)  # eta_h, eta_v initialised from the run seed, reproducibly
        self.hnet = HyperNetwork(embed_dim(cfg), {k: v.shape for k, v in self.global_state.items()})
        self.embed = self.build_embedding()
        self.optimizers = {name: torch.optim.Adam(getattr(self, name).parameters(), lr=cfg.algo("server-lr"))
                           for name in ("hnet", "embed") if cfg.algo("server-opt") == "adam"}

    def build_embedding(self) -> torch.nn.Module:
        ds = self.dataset
        return embedding_network(self.cfg.algo("embedding"), ds.input_shape, ds.num_classes, embed_dim(self.cfg))

    @classmethod
    def check_config(cls, cfg) -> None:
        if cfg.model != "lenet":
            raise ConfigError(f"run config 'model' = {cfg.model!r}: {cls.__name__} generates 'lenet' models")

    def central_state(self) -> None:
        return None  # every client has its own model

    # ---- messages ----------------------------------------------------------------
    def phase_config(self, server_round: int) -> dict:
        cfg = self.cfg
        return {"local-steps": cfg.algo("k"), "lr": cfg.algo("beta"), "lambda-theta": cfg.algo("lambda-theta"),
                "embed-dim": embed_dim(cfg), "embedding": cfg.algo("embedding"),
                "descriptor-batch": cfg.algo("descriptor-batch")}

    def round_trip(self, grid: Grid, server_round: int, payloads: Mapping[int, Payload], phase: str,
                   spec: Callable[[int], Spec | None], message_type: str = MessageType.TRAIN,
                   traffic: str = "train") -> list[Reply]:
        """One exchange of phase ``phase`` with each client in ``payloads``: valid replies only."""
        cache: dict = {}
        config = {**self.phase_config(server_round), "phase": phase, "server-round": server_round}
        contents = {pid: make_content(self.records(p, cache), {**config, "partition-id": pid})
                    for pid, p in payloads.items()}
        replies = self.exchange(grid, self.messages(contents, message_type), traffic)
        return self.parse_replies(replies, {pid: spec(pid) for pid in contents})

    def descriptor_spec(self, pid: int) -> Spec:
        return {"v": {"v": ((embed_dim(self.cfg),), torch.float32)}}

    def delta_spec(self, pid: int) -> Spec:
        return spec_of({"delta": self.global_state})

    # ---- the three phases ----------------------------------------------------------
    def descriptors(self, server_round: int, grid: Grid, pids: list[int], train: bool = True,
                    traffic: str = "train") -> dict[int, torch.Tensor]:
        """Phase 1 (or the first half of Algorithm 1 with ``train=False``): v_i per client."""
        eta_v = {k: v.detach() for k, v in self.embed.state_dict().items()}
        payload = {"eta_v": eta_v}  # one object: serialised once for all clients
        replies = self.round_trip(grid, server_round, dict.fromkeys(pids, payload), "descriptor",
                                  self.descriptor_spec, MessageType.TRAIN if train else MessageType.EVALUATE,
                                  traffic)
        return {r.pid: r.payload["v"]["v"] for r in replies}

    def personal_model(self, v: torch.Tensor) -> Tensors:
        with torch.no_grad():
            return self.hnet(v)

    def local_training(self, server_round: int, grid: Grid, v: Mapping[int, torch.Tensor],
                       traffic: str = "train") -> list[Reply]:
        """Phase 2: theta_i = h(v_i) to each client (a different message each), delta_theta_i back."""
        payloads = {pid: {"theta": self.personal_model(vi)} for pid, vi in v.items()}
        return self.round_trip(grid, server_round, payloads, "train", self.delta_spec, traffic=traffic)

    def hypernetwork_vjp(self, v: torch.Tensor, delta: Tensors) -> tuple[list[torch.Tensor], torch.Tensor]:
        """(delta_eta_h, delta_v) = (d theta / d (eta_h, v))^T delta_theta at theta = h(v)."""
        v = v.detach().clone().requires_grad_(True)
        theta = self.hnet(v)
        grads = torch.autograd.grad(list(theta.values()), [*self.hnet.parameters(), v],
                                    grad_outputs=[delta[k] for k in theta])
        return list(grads[:-1]), grads[-1]

    def embedding_backprop(self, server_round: int, grid: Grid, delta_v: Mapping[int, torch.Tensor]
                           ) -> dict[int, list[torch.Tensor]]:
        """Phase 3: delta_v_i to each client, delta_eta_v_i back."""
        spec = spec_of({"delta": self.embed.state_dict()})
        replies = self.round_trip(grid, server_round, {pid: {"delta_v": {"v": d}} for pid, d in delta_v.items()},
                                  "backprop", lambda pid: spec)
        return {r.pid: list(r.payload["delta"].values()) for r in replies}

    def fit_round(self, server_round: int, grid: Grid) -> dict[str, float]:
        v = self.descriptors(server_round, grid, self.sample(server_round))
        trained = self.local_training(server_round, grid, v)
        delta_h, delta_v = {}, {}
        for r in trained:
            delta_h[r.pid], delta_v[r.pid] = self.hypernetwork_vjp(v[r.pid], r.payload["delta"])
        delta_e = self.embedding_backprop(server_round, grid, delta_v)
        done = sorted(delta_e)  # a client missing in any phase drops out of this step
        metrics = {"replies": len(done)}
        if len(done) < self.cfg.min_train_nodes:
            metrics["skipped"] = 1
            return metrics
        self.apply("hnet", [delta_h[p] for p in done], self.cfg.algo("lambda-h"))
        self.update_embedding({p: delta_e[p] for p in done})
        losses = [r.metrics["train-loss"] for r in trained if r.pid in delta_e]
        metrics["train-loss"] = sum(losses) / len(losses)
        return metrics

    def update_embedding(self, deltas: Mapping[int, list[torch.Tensor]]) -> None:
        self.apply("embed", deltas.values(), self.cfg.algo("lambda-v"))

    def apply(self, name: str, deltas: Iterable[list[torch.Tensor]], lam: float) -> None:
        """Network ``name``: eta <- (1 - 2 beta lambda) eta + mean_i delta_i, or Adam on
        -mean_i delta_i + 2 lambda eta."""
        deltas = list(deltas)
        if self.cfg.aggregation == "mean":
            mean = [torch.stack(ds).mean(0) for ds in zip(*deltas)]
        else:  # a robust combination (run config 'aggregation')
            mean = list(self.combine([dict(enumerate(d)) for d in deltas], [1.0] * len(deltas)).values())
        params = list(getattr(self, name).parameters())
        opt = self.optimizers.get(name)
        with torch.no_grad():
            if opt is None:
                for p, d in zip(params, mean):
                    p.mul_(1 - 2 * self.cfg.algo("beta") * lam).add_(d)
                return
        for p, d in zip(params, mean):
            p.grad = -d + 2 * lam * p.detach()
        opt.step()

    # ---- evaluation (Algorithm 1 for every client, seen or new) ---------------------
    def personal_models(self, server_round: int, grid: Grid, pids: list[int]) -> dict[int, Tensors]:
        v = self.descriptors(server_round, grid, pids, train=False, traffic="eval")
        return {pid: self.personal_model(vi) for pid, vi in v.items()}

    def evaluate_round(self, server_round: int, grid: Grid) -> dict[str, float]:
        if not self.cfg.fraction_evaluate:
            return {}
        pids = self.sample(server_round, sorted(self.clients), self.cfg.fraction_evaluate)
        thetas = self.personal_models(server_round, grid, pids)
        cache: dict = {}
        contents = {pid: make_content(self.records({"theta": t}, cache),
                                      {"phase": "evaluate", "server-round": server_round, "partition-id": pid})
                    for pid, t in thetas.items()}
        replies = self.exchange(grid, self.messages(contents, MessageType.EVALUATE), traffic="eval")
        return dict(self.aggregate_evaluate(server_round, replies, dict.fromkeys(contents)) or {})


ALGORITHMS = {"pefll": (PeFLL, PeFLLClient)}
