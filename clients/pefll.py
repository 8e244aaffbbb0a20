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
from fedapp.core.config import Key
from fedapp.core.data import prepare
from fedapp.core.hypernetworks import EMBEDDINGS, embedding_network
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


#: pefll's run-config keys (``pefll.<key>``)
PEFLL = Settings(
    "pefll",
    keys=(
        Key("k", int, 50, "Local SGD steps on the generated model per training step.", low=1),
        Key("beta", float, 0.01, "Step size: the clients' SGD and the L2 decay 1 - 2 beta lambda.",
            low=0.0, low_open=True),
        Key("lambda-h", float, 1e-3, "L2 weight lambda_h of the hypernetwork.", low=0.0),
        Key("lambda-v", float, 1e-3, "L2 weight lambda_v of the embedding network.", low=0.0),
        Key("lambda-theta", float, 0.0, "L2 weight lambda_theta of the client model in local SGD.", low=0.0),
        Key("embedding", str, "cnn", "phi: cnn (image + one-hot label channels; on feature vectors a linear "
            "map of the features and the one-hot label), label (linear in the one-hot label), unlabeled (cnn on "
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
    ),
)
#: pfedhn's run-config keys (``pfedhn.<key>``)
PFEDHN = Settings(
    "pfedhn",
    keys=(
        *(k for k in PEFLL.keys if k.name in ("k", "beta", "lambda-h", "lambda-theta", "embed-dim",
                                               "server-opt", "server-lr", "server-momentum", "server-clip",
                                               "momentum", "inner-wd", "clip", "hyper-hidden", "hyper-layers",
                                               "hypernet")),
        Key("lambda-e", float, 0.0, "L2 weight of the client embeddings (server-opt adam/sgd).", low=0.0),
        Key("new-client-rounds", int, 20, "Round trips that fit a new client's embedding (eta_h frozen).", low=0),
        Key("new-client-init", str, "random", "A new client's embedding starts random (N(0, 1), as the trained "
            "ones did) or at the mean of the trained ones.", ("random", "mean")),
    ),
)

ALGORITHMS = {"pefll": (PEFLL, PeFLLClient), "pfedhn": (PFEDHN, PeFLLClient)}
