"""Per-FedAvg client: first-order MAML steps in training, a fine-tuned global model at evaluation."""

import torch

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.config import Key
from fedapp.core.records import Payload


class PerFedAvgClient(FedClient):
    """Each iteration takes two batches D, D' from w: the inner step w~ = w - alpha grad f(w; D)
    (the run's SGD, momentum and weight decay), then the outer step w <- w - beta grad f(w~; D')
    (plain SGD at ``beta``), taken from w; BatchNorm statistics are restored to w's as well, as
    FL-bench does. ``local-steps`` (or ``local-epochs``) counts batches, so an epoch is half as many
    iterations. Every client evaluates the global model after ``finetune-epochs`` epochs of the
    run's SGD on its training split; nothing is kept between rounds.
    """

    def local_sgd(self, steps: int, lr: float, seed: int) -> dict[str, float]:
        self.model.train()
        loader = self.loader(seed)
        inner = self.make_optimizer(lr)
        outer = torch.optim.SGD(self.model.parameters(), lr=float(self.setting("beta")))
        clip = self.setting("grad-clip")
        iterations = max(1, steps // 2)
        total = torch.zeros(())
        for _ in range(iterations):
            w = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
            for opt, restore in ((inner, False), (outer, True)):
                x, y = loader.next_batch()
                opt.zero_grad(set_to_none=False)
                loss = self.loss(x, y)
                loss.backward()
                if clip:
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
                if restore:  # the outer gradient, taken at w~, moves w
                    self.load_tensors(w)
                else:
                    total += loss.detach().cpu()
                opt.step()
        return {"train-loss": total.item() / iterations}

    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = config
        self.load_model(payload)
        epochs = int(self.setting("finetune-epochs"))
        if epochs:
            seed = self.round_seed(int(config["server-round"]))
            FedClient.local_sgd(self, self.epoch_steps(epochs), float(config["lr"]), seed)
        return {}, self.evaluate_local()


#: the run-config keys perfedavg's clients read (``perfedavg.<key>``)
PERFEDAVG = Settings(
    "perfedavg",
    keys=(
        Key("beta", float, 1e-3, "Outer (meta) step size beta of the first-order update (FL-bench's default).",
            low=0.0, low_open=True),
        Key("finetune-epochs", int, 1, "Epochs of SGD at the run's lr on a client's training split before it "
            "evaluates (FL-bench: at least 1).", low=0),
    ),
)

ALGORITHMS = {"perfedavg": (PERFEDAVG, PerFedAvgClient)}
