"""PeFLL client (its networks, shared with the server, are in ``fedapp.core.hypernetworks``).

One training step of PeFLL is three round trips; the ClientApp has a single train
handler, so the client dispatches on ``config["phase"]``:

* ``descriptor``: receive eta_v, draw a batch B, reply v = mean_{(x, y) in B} phi(x, y);
* ``train``: receive theta = h(v), run k SGD steps, reply delta_theta = theta_k - theta;
* ``backprop``: receive delta_v, reply delta_eta_v = (d v / d eta_v)^T delta_v on the same B.

eta_v and B live in ``self.state`` between the phases of one step (committed by the
ClientApp after each message), never in globals. Evaluation has two phases as well:
``descriptor`` (over the whole training split) and ``evaluate`` (the received theta on
the local test split), so a new client never needs a training message.
"""

from __future__ import annotations

import torch
from torch import nn

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.data import prepare
from fedapp.core.hypernetworks import embedding_network
from fedapp.core.records import Payload


def descriptor(phi: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """v = mean over the examples of phi(x, y): invariant to their order."""
    return torch.cat([phi(x[i:i + batch_size], y[i:i + batch_size]) for i in range(0, len(y), batch_size)]).mean(0)


class PeFLLClient(FedClient):
    """Client of PeFLL (and of pFedHN, which uses only the ``train`` phase)."""

    def embedding(self, config: dict) -> nn.Module:
        d = self.data
        return embedding_network(str(config["embedding"]), tuple(d.train_x.shape[1:]), d.num_classes,
                                 int(config["embed-dim"])).to(self.device)

    def descriptor_batch(self, server_round: int, size: int) -> torch.Tensor:
        """Indices of the step's batch B, seeded by run, step and client."""
        self.generator.manual_seed(self.round_seed(server_round))
        g = self.generator  # on the client's device: the indices are drawn there
        return torch.randperm(len(self.data.train_y), generator=g, device=g.device)[:size]

    def batch_tensors(self, idx: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.data
        if idx is not None:
            idx = idx.to(d.train_x.device)
        x, y = (d.train_x, d.train_y) if idx is None else (d.train_x[idx], d.train_y[idx])
        return prepare(x.to(self.device), d.mean, d.std), y.to(self.device)

    # ---- phases ------------------------------------------------------------------
    def answer_train(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = config
        phase = config.get("phase", "train")
        out, metrics = getattr(self, f"phase_{phase}")(payload, config)
        return out, {"num-examples": len(self.data.train_y), **metrics}

    def phase_descriptor(self, payload: Payload, config: dict) -> tuple[Payload, dict]:
        rnd = int(config["server-round"])
        idx = self.descriptor_batch(rnd, int(config["descriptor-batch"]))
        phi = self.embedding(config)
        phi.load_state_dict(payload["eta_v"])
        with torch.no_grad():
            v = descriptor(phi, *self.batch_tensors(idx))
        # phase 3 differentiates phi at this eta_v on this B: keep both until then
        self.state["pefll-eta-v"] = {k: t.clone() for k, t in payload["eta_v"].items()}
        self.state["pefll-step"] = {"batch": idx, "round": torch.tensor([rnd])}
        return {"v": {"v": v.cpu()}}, {}

    def phase_train(self, payload: Payload, config: dict) -> tuple[Payload, dict]:
        self.config = config
        theta = payload["theta"]
        self.load_tensors(theta)
        steps = int(config["local-steps"])
        metrics = self.local_sgd(steps, float(config["lr"]), self.round_seed(int(config["server-round"])))
        new = self.model_tensors()
        return {"delta": {k: new[k] - theta[k] for k in theta}}, {**metrics, "local-steps": steps}

    def correct_gradient(self) -> None:
        # d/dtheta of lambda_theta * ||theta||^2, then the clipping (the SGD's weight decay comes after it)
        lambda_theta, clip = self.setting("lambda-theta"), self.setting("clip")
        if lambda_theta:
            for p in self.model.parameters():
                p.grad.add_(p.detach(), alpha=2 * lambda_theta)
        if clip:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)

    def phase_backprop(self, payload: Payload, config: dict) -> tuple[Payload, dict]:
        step = self.state.pop("pefll-step", None)
        eta_v = self.state.pop("pefll-eta-v", None)
        if step is None or int(step["round"][0]) != int(config["server-round"]):
            raise RuntimeError("backprop phase without this step's descriptor phase")
        phi = self.embedding(config)
        phi.load_state_dict(eta_v)
        v = descriptor(phi, *self.batch_tensors(step["batch"]))
        names, params = zip(*phi.named_parameters())
        grads = torch.autograd.grad(v, params, grad_outputs=payload["delta_v"]["v"].to(self.device))
        return {"delta": {k: g.detach().cpu() for k, g in zip(names, grads)}}, {}

    # ---- evaluation (Algorithm 1) ------------------------------------------------
    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = config
        if config.get("phase") == "descriptor":
            phi = self.embedding(config)
            phi.load_state_dict(payload["eta_v"])
            size = int(config.get("eval-descriptor-examples", 0))  # 0: every training example
            idx = self.descriptor_batch(int(config["server-round"]), size) if size else None
            with torch.no_grad():
                v = descriptor(phi, *self.batch_tensors(idx))
            hist = torch.bincount(self.data.train_y, minlength=self.data.num_classes)
            return {"v": {"v": v.cpu(), "hist": hist}}, {"num-examples": len(self.data.train_y)}
        self.load_tensors(payload["theta"])
        return {}, self.evaluate_local()


#: pefll's and pfedhn's prefixes: their clients read no key of their own (the server sends what they need
#: in each message's config; strategies/pefll.py, strategies/pfedhn.py)
PEFLL = Settings("pefll")
PFEDHN = Settings("pfedhn")

ALGORITHMS = {"pefll": (PEFLL, PeFLLClient), "pfedhn": (PFEDHN, PeFLLClient)}
