"""kNN-Per client: FedAvg training; at evaluation the global model mixed with a kNN over its features."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from clients.base import FedClient
from clients.keys import Settings
from fedapp.core.config import Key
from fedapp.core.data import prepare
from fedapp.core.models import body_head_keys
from fedapp.core.records import Payload

#: PeFLL's appendix: k and the mixing weight chosen per client by cross-validation over these
K_GRID = (5, 10)
WEIGHT_GRID = tuple(i / 10 for i in range(11))


def knn_probabilities(query: torch.Tensor, store: torch.Tensor, store_y: torch.Tensor, k: int, scale: float,
                      num_classes: int) -> torch.Tensor:
    """p_kNN(y | x) = sum_{j in N_k(x)} 1[y_j = y] s_j / (sum_j s_j + 1e-9), s_j = exp(-d_j / (D scale)), d_j the
    squared L2 distance of the features to the k nearest in the datastore, D the feature size (FL-bench's
    ``get_knn_logits``)."""
    d2 = torch.cdist(query.double(), store.double()).square()
    dist, idx = d2.topk(min(k, len(store_y)), dim=1, largest=False)
    sim = torch.exp(-dist / (query.shape[1] * scale))
    votes = F.one_hot(store_y[idx].long(), num_classes).double() * sim[..., None]
    return (votes.sum(1) / (sim.sum(1, keepdim=True) + 1e-9)).float()


class KNNMixture(torch.nn.Module):
    """log(lambda p_kNN(y | x) + (1 - lambda) softmax(model(x))): the mixture's log-probabilities, which
    evaluation takes as logits (its cross-entropy is the mixture's negative log-likelihood)."""

    def __init__(self, client: KNNPerClient, store, store_y, k: int, weight: float):
        super().__init__()
        self.client, self.store, self.store_y, self.k, self.weight = client, store, store_y, k, weight

    def forward(self, x):
        logits, feats = self.client.features(x)
        p = self.client.mixture(logits, feats, self.store, self.store_y, self.k, self.weight)
        return torch.log(p + 1e-12)


class KNNPerClient(FedClient):
    """Trains as FedAvg's client. To evaluate, it builds a datastore of the global model's features
    (the head's input) of its training split, picks k in ``K_GRID`` and lambda in ``WEIGHT_GRID`` by
    ``folds``-fold cross-validation on that split, and evaluates the mixture (``KNNMixture``). A
    label mask restricts the mixture to the client's classes ("zero" acts as "exclude": the mixture
    is of probabilities, not logits). Nothing is trained at evaluation, so a new client is a seen one.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.network = self.model  # evaluation swaps ``self.model`` for the mixture
        _, head = body_head_keys(self.model)
        self.head_module = self.model.get_submodule(head[0].rpartition(".")[0])

    def features(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The model's logits and the head's input for a batch."""
        seen = []
        hook = self.head_module.register_forward_pre_hook(lambda m, args: seen.append(args[0].flatten(1)))
        try:
            logits = self.network(x)
        finally:
            hook.remove()
        return logits, seen[0]

    def mixture(self, logits, feats, store, store_y, k: int, weight: float) -> torch.Tensor:
        knn = knn_probabilities(feats, store, store_y, k, float(self.setting("scale")), logits.shape[1])
        return weight * knn + (1 - weight) * logits.softmax(1)

    @torch.no_grad()
    def train_features(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.network.eval()
        d = self.data
        out = [self.features(prepare(d.train_x[i:i + 256].to(self.device), d.mean, d.std))
               for i in range(0, len(d.train_y), 256)]
        return torch.cat([o[0] for o in out]), torch.cat([o[1] for o in out])

    def choose(self, logits, feats, y, seed: int) -> tuple[int, float]:
        """(k, lambda) of the highest cross-validated accuracy on the training split (ties: the first)."""
        folds = min(int(self.setting("folds")), len(y))
        fold = (torch.randperm(len(y), generator=torch.Generator().manual_seed(seed)) % folds).to(y.device)
        correct = torch.zeros(len(K_GRID), len(WEIGHT_GRID))
        scale = float(self.setting("scale"))
        for f in range(folds):
            q, s = fold == f, fold != f
            model = logits[q].softmax(1)
            for a, k in enumerate(K_GRID):
                knn = knn_probabilities(feats[q], feats[s], y[s], k, scale, logits.shape[1])
                for b, w in enumerate(WEIGHT_GRID):  # the mixture of ``mixture``, its parts computed once
                    correct[a, b] += ((w * knn + (1 - w) * model).argmax(1) == y[q]).sum().item()
        a, b = divmod(int(correct.flatten().argmax()), len(WEIGHT_GRID))
        return K_GRID[a], WEIGHT_GRID[b]

    def evaluate(self, payload: Payload, config: dict) -> tuple[Payload, dict[str, float]]:
        self.config = {**config, "eval-label-mask": "exclude" if config["eval-label-mask"] == "zero"
                       else config["eval-label-mask"]}
        self.load_model(payload)
        y = self.data.train_y.to(self.device)
        if len(y) < 2:  # no datastore to cross-validate: the global model alone
            return {}, self.evaluate_local()
        logits, feats = self.train_features()
        k, weight = self.choose(logits, feats, y, self.round_seed(int(config["server-round"])))
        self.model = KNNMixture(self, feats, y, k, weight)
        try:
            metrics = self.evaluate_local()
        finally:
            self.model = self.network
        return {}, {**metrics, "knn-k": k, "knn-weight": weight}


#: the run-config keys knnper's clients read (``knnper.<key>``)
KNNPER = Settings(
    "knnper",
    keys=(
        Key("scale", float, 100.0, "Scale sigma of the kNN similarity exp(-d / (D sigma)) (PeFLL's appendix: 100).",
            low=0.0, low_open=True),
        Key("folds", int, 5, "Folds of the per-client cross-validation of k and lambda.", low=2),
    ),
)

ALGORITHMS = {"knnper": (KNNPER, KNNPerClient)}
