"""pFedMe client: a personal model theta pulled towards the local copy w of the global model."""

import torch

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.config import Key
from fedapp.core.records import Payload, Tensors


class PFedMeClient(FedClient):
    """Per batch, K steps theta <- theta - eta_p (grad f(theta) + lambda (theta - w) + mu theta) (FL-bench's
    personal step, ``mu`` its L2 term), then w <- w - eta lambda (w - theta); theta and w start from the
    global model, theta carries on from batch to batch. Replies with w; keeps theta
    (``self.state["personal"]``), which it evaluates. A client without one (a new client) fits theta
    from the global model on the pFedMe loss for ``new-epochs`` epochs (w held at the global model).
    """

    def personal_steps(self, w: Tensors, steps: int, lr: float, seed: int, move_w: bool) -> float:
        """``steps`` batches of the K personal steps on the model (theta); with ``move_w`` each batch
        then moves ``w`` (in place) towards theta at ``lr``. Returns the mean loss of the first step."""
        lam, k, eta_p, mu = (float(self.setting("lambda")), int(self.setting("k")),
                             float(self.setting("personal-lr")), float(self.setting("mu")))
        self.model.train()
        loader = self.loader(seed)
        params = self.params
        total = torch.zeros(())
        for _ in range(steps):
            x, y = loader.next_batch()
            for j in range(k):
                self.model.zero_grad(set_to_none=False)
                loss = self.loss(x, y)
                loss.backward()
                if j == 0:
                    total += loss.detach().cpu()
                with torch.no_grad():
                    for name, p in params.items():  # FL-bench's pFedMeOptimizer.step, term for term
                        p.copy_(p - eta_p * (p.grad + lam * (p - w[name]) + mu * p))
            if move_w:
                with torch.no_grad():
                    for name, p in params.items():
                        w[name] = w[name] - lam * lr * (w[name] - p)
        return total.item() / max(steps, 1)

    def local_sgd(self, steps: int, lr: float, seed: int) -> dict[str, float]:
        self.local = self.param_tensors()
        return {"train-loss": self.personal_steps(self.local, steps, lr, seed, move_w=True)}

    def after_train(self, payload: Payload, config: dict) -> None:
        self.state["personal"] = self.model_tensors()

    def reply(self, payload: Payload, config: dict) -> Payload:
        return {"arrays": {**self.model_tensors(), **{k: v.cpu() for k, v in self.local.items()}}}

    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = config
        self.load_model(payload)
        if "personal" in self.state:
            self.load_tensors(self.state["personal"])
        else:  # a new client: theta fitted to its data, w the global model
            self.personal_steps(self.param_tensors(), self.epoch_steps(int(self.setting("new-epochs"))),
                                float(config["lr"]), self.round_seed(int(config["server-round"])), move_w=False)
        return {}, self.evaluate_local()


#: the run-config keys pfedme's clients read (``pfedme.<key>``; the server's mixing beta: strategies/pfedme.py)
PFEDME = Settings(
    "pfedme",
    keys=(
        Key("lambda", float, 15.0, "Regularisation lambda of the Moreau envelope (PeFLL's appendix: 15).", low=0.0,
            low_open=True),
        Key("k", int, 3, "Personal steps K per batch (PeFLL's appendix: 3).", low=1),
        Key("personal-lr", float, 0.01, "Personal learning rate of the K steps (FL-bench's default).", low=0.0,
            low_open=True),
        Key("mu", float, 1e-3, "L2 term mu of the personal step (FL-bench's default).", low=0.0),
        Key("new-epochs", int, 20, "Epochs a new client fine-tunes its personal model (PeFLL's appendix: 20).",
            low=0),
    ),
)

ALGORITHMS = {"pfedme": (PFEDME, PFedMeClient)}
