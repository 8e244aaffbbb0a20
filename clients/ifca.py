"""IFCA / FLSC client: picks the cluster models with the lowest loss on its training data."""

from __future__ import annotations

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.aggregation import weighted_mean
from fedapp.core.records import Payload
from fedapp.core.training import evaluate

#: examples used to score the k models; a fixed slice keeps the choice cheap and deterministic
SCORE_EXAMPLES = 1024


class IFCAClient(FedClient):
    """Scores every received ``model-j`` on local training data, trains the average of the best
    ``chosen`` ones and reports them as the bit mask ``cluster-mask``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.chosen: list[int] = []  #: the models this client trains (their average)

    def train_loss(self) -> float:
        d = self.data
        return evaluate(self.model, d.train_x[:SCORE_EXAMPLES], d.train_y[:SCORE_EXAMPLES], mean=d.mean,
                        std=d.std, device=self.device)["loss"]

    def load_model(self, payload: Payload) -> None:
        """The models chosen in training (``arrays``), or, from the k ``model-j``, the average of the
        ``chosen`` with the lowest loss on local training data (training, and the evaluation of a
        client that never trained)."""
        if "arrays" in payload:
            self.load_tensors(payload["arrays"])
            return
        models = [payload[f"model-{j}"] for j in range(len(payload))]
        losses = []
        for m in models:
            self.load_tensors(m)
            losses.append(self.train_loss())
        self.chosen = sorted(range(len(models)), key=losses.__getitem__)[: int(self.setting("chosen"))]
        self.load_tensors(weighted_mean([models[j] for j in self.chosen], [1.0] * len(self.chosen)))

    def reply_metrics(self) -> dict[str, float]:
        return {"cluster-mask": sum(1 << j for j in self.chosen)}


#: ifca's and flsc's prefixes: their clients read no key of their own (the server sends the models to pick
#: from; strategies/ifca.py, strategies/flsc.py)
IFCA = Settings("ifca")
FLSC = Settings("flsc")

ALGORITHMS = {"flsc": (FLSC, IFCAClient), "ifca": (IFCA, IFCAClient)}
