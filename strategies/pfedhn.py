"""pFedHN: a hypernetwork with one learned embedding per client (PeFLL's Table 1 baseline)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from flwr.serverapp import Grid

from clients.pefll import PFEDHN
from fedapp.core.records import Tensors
from fedapp.core.config import Key
from strategies.pefll import KEYS, PeFLL, embed_dim
from strategies.settings import declare


class PFedHN(PeFLL):
    """pFedHN (Shamsian, Navon, Fetaya, Chechik, "Personalized Federated Learning using
    Hypernetworks", ICML 2021), on PeFLL's hypernetwork and update rule.

    Each training client i has a server-side embedding e_i; one round trip per step:

        theta_i = h(e_i; eta_h),  delta_theta_i = SGD_k(theta_i) - theta_i   (client)
        eta_h <- (1 - 2 beta lambda_h) eta_h + mean_i (d theta_i / d eta_h)^T delta_theta_i
        e_i <- e_i + (d theta_i / d e_i)^T delta_theta_i

    A new client gets an embedding, drawn at random like the trained ones were at the start
    (pFedHN's and the PeFLL paper's procedure; ``new-client-init = "mean"`` starts it at their
    mean instead), fitted for ``new-client-rounds`` round trips with eta_h frozen (the delta rule,
    or a fresh server optimiser of the configured kind on e alone), then evaluates h(e). With
    ``server-opt = "sgd"`` and ``lambda-e`` the embeddings get weight decay 2 lambda_e, as in
    pFedHN's code (SGD on the hypernetwork and all embeddings).
    """

    config_prefix, config_keys, client_keys = declare(
        PFEDHN,
        *(k for k in KEYS if k.name in ("k", "beta", "lambda-h", "lambda-theta", "embed-dim", "server-opt",
                                        "server-lr", "server-momentum", "server-clip", "momentum", "inner-wd",
                                        "clip", "hyper-hidden", "hyper-layers", "hypernet")),
        Key("lambda-e", float, 0.0, "L2 weight of the client embeddings (server-opt adam/sgd).", low=0.0),
        Key("new-client-rounds", int, 20, "Round trips that fit a new client's embedding (eta_h frozen).", low=0),
        Key("new-client-init", str, "random", "A new client's embedding starts random (N(0, 1), as the trained "
            "ones did) or at the mean of the trained ones.", ("random", "mean")),
    )

    def build_embedding(self) -> torch.nn.Module:
        return torch.nn.Embedding(self.cfg.num_clients, embed_dim(self.cfg))

    def phase_config(self, server_round: int) -> dict:
        return self.sgd_config()

    def set_standardization(self, v: torch.Tensor) -> None:
        """Learned embeddings are not standardised."""

    def descriptors(self, server_round: int, grid: Grid, pids: list[int], train: bool = True,
                    traffic: str = "train") -> dict[int, torch.Tensor]:
        return {pid: self.embed.weight[pid].detach() for pid in pids}  # nothing to ask the clients

    def embedding_backprop(self, server_round, grid, delta_v):
        return {pid: [d] for pid, d in delta_v.items()}

    def embedding_update(self, deltas: Mapping[int, list[torch.Tensor]]) -> tuple[list[torch.Tensor], float]:
        """Each embedding belongs to one client: its own delta in its row (not a mean), lambda_e."""
        delta = torch.zeros_like(self.embed.weight)
        if deltas:
            rows = torch.tensor(sorted(deltas))
            delta[rows] = torch.stack([deltas[p][0] for p in sorted(deltas)])
        return [delta], self.cfg.algo("lambda-e")

    def personal_models(self, server_round: int, grid: Grid, pids: list[int]) -> dict[int, Tensors]:
        new = [p for p in pids if p in self.unseen]
        e = {p: self.embed.weight[p].detach() for p in pids if p not in self.unseen}
        if new:
            if self.cfg.algo("new-client-init") == "mean":
                start = self.embed.weight[self.driver.train_pool()].detach().mean(0)
                e.update({p: start.clone() for p in new})
            else:
                g = torch.Generator().manual_seed(self.cfg.seed * 7919 + server_round)
                e.update({p: torch.randn(self.embed.weight.shape[1], generator=g) for p in new})
            e.update({p: e[p].clone().requires_grad_(True) for p in new})
            opt = self.optimizers.get("embed")
            opt = opt and type(opt)([e[p] for p in new], **{k: v for k, v in opt.defaults.items()
                                                           if k in ("lr", "momentum")})
            for _ in range(self.cfg.algo("new-client-rounds")):
                replies = self.local_training(server_round, grid, {p: e[p].detach() for p in new}, traffic="eval")
                for p, d in self.descriptor_vjp(e, {r.pid: r.payload["delta"] for r in replies}).items():
                    if opt is None:
                        e[p].data.add_(d)
                    else:
                        e[p].grad = -d
                if opt is not None:
                    opt.step()
            e.update({p: e[p].detach() for p in new})
        return {p: self.personal_model(v) for p, v in e.items()}


ALGORITHMS = {"pfedhn": PFedHN}
