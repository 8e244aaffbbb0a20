"""pFedHN: a hypernetwork with one learned embedding per client (PeFLL's Table 1 baseline)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from flwr.serverapp import Grid

from clients.pefll import PeFLLClient
from fedapp.config import Key
from fedapp.records import Tensors
from strategies.pefll import PeFLL, embed_dim


class PFedHN(PeFLL):
    """pFedHN (Shamsian, Navon, Fetaya, Chechik, "Personalized Federated Learning using
    Hypernetworks", ICML 2021), on PeFLL's hypernetwork and update rule.

    Each training client i has a server-side embedding e_i; one round trip per step:

        theta_i = h(e_i; eta_h),  delta_theta_i = SGD_k(theta_i) - theta_i   (client)
        eta_h <- (1 - 2 beta lambda_h) eta_h + mean_i (d theta_i / d eta_h)^T delta_theta_i
        e_i <- e_i + (d theta_i / d e_i)^T delta_theta_i

    A new client gets an embedding (started at the mean of the trained ones) optimised for
    ``new-client-rounds`` round trips by the same rule with eta_h frozen, then evaluates h(e).
    """

    config_prefix = "pfedhn"
    config_keys = (
        *(k for k in PeFLL.config_keys if k.name in ("k", "beta", "lambda-h", "lambda-theta", "embed-dim",
                                                     "server-opt", "server-lr")),
        Key("new-client-rounds", int, 20, "Round trips that fit a new client's embedding (eta_h frozen).", low=0),
    )

    def build_embedding(self) -> torch.nn.Module:
        return torch.nn.Embedding(self.cfg.num_clients, embed_dim(self.cfg))

    def phase_config(self, server_round: int) -> dict:
        cfg = self.cfg
        return {"local-steps": cfg.algo("k"), "lr": cfg.algo("beta"), "lambda-theta": cfg.algo("lambda-theta")}

    def descriptors(self, server_round: int, grid: Grid, pids: list[int], train: bool = True,
                    traffic: str = "train") -> dict[int, torch.Tensor]:
        return {pid: self.embed.weight[pid].detach() for pid in pids}  # nothing to ask the clients

    def embedding_backprop(self, server_round, grid, delta_v):
        return {pid: [d] for pid, d in delta_v.items()}

    def update_embedding(self, deltas: Mapping[int, list[torch.Tensor]]) -> None:
        if not deltas:
            return
        rows = torch.tensor(sorted(deltas))
        delta = torch.zeros_like(self.embed.weight)
        delta[rows] = torch.stack([deltas[p][0] for p in sorted(deltas)])
        opt = self.optimizers.get("embed")
        if opt is None:  # each embedding belongs to one client: its own delta, not a mean
            with torch.no_grad():
                self.embed.weight.add_(delta)
            return
        self.embed.weight.grad = -delta
        opt.step()

    def personal_models(self, server_round: int, grid: Grid, pids: list[int]) -> dict[int, Tensors]:
        new = [p for p in pids if p in self.unseen]
        e = {p: self.embed.weight[p].detach() for p in pids if p not in self.unseen}
        if new:
            start = self.embed.weight[[p for p in self.train_pool()]].detach().mean(0)
            e.update({p: start.clone() for p in new})
            for _ in range(self.cfg.algo("new-client-rounds")):
                for r in self.local_training(server_round, grid, {p: e[p] for p in new}, traffic="eval"):
                    e[r.pid] = e[r.pid] + self.hypernetwork_vjp(e[r.pid], r.payload["delta"])[1]
        return {p: self.personal_model(v) for p, v in e.items()}


ALGORITHMS = {"pfedhn": (PFedHN, PeFLLClient)}
