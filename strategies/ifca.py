"""IFCA: k cluster models, each client trains the one with its lowest local loss."""

from __future__ import annotations

import torch

import clients.ifca
from fedapp.core.aggregation import weighted_mean
from fedapp.core.config import ConfigError, Key, RunConfig
from fedapp.core.experiment import model_for
from fedapp.core.records import Payload, Shared, Tensors
from fedapp.server.replies import Reply
from strategies.base import FedStrategy
from strategies.settings import declare

#: the cluster models: IFCA, FLSC
CLUSTERS = Key("clusters", int, 3, "Number k of cluster models.", low=1)
IDENTICAL_INIT = Key("identical-init", bool, False, "All k models start from the same initial model (the HCCT "
                     "authors' code); IFCA's paper starts them from distinct initialisations.")


class IFCA(FedStrategy):
    """Iterative Federated Clustering Algorithm (Ghosh et al., NeurIPS 2020), model averaging.

    The server keeps k models w_1..w_k (distinct seeded initialisations, or one with ``identical-init``)
    and sends all of them;
    client i picks the set S_i of the ``chosen`` models with the lowest loss on its training data
    (IFCA: one, j_i = argmin_j F_i(w_j)), trains their average and replies; then
    w_j = sum_{i: j in S_i} n_i w_i / sum_{i: j in S_i} n_i (unchanged when nobody chose j).
    """

    # clients.ifca.IFCA: the class shares the declaration's name
    config_prefix, config_keys, client_keys = declare(clients.ifca.IFCA, CLUSTERS, IDENTICAL_INIT)
    checkpoint_attrs = ("cluster_models", "choices")
    global_model = False  # k cluster models

    def __init__(self, cfg: RunConfig, model: torch.nn.Module, dataset=None):
        super().__init__(cfg, model, dataset)
        same = cfg.algo("identical-init")
        self.cluster_models = [self.global_state] + [self.global_state if same else self.seeded_state(j)
                                                     for j in range(1, cfg.algo("clusters"))]
        self.choices: dict[int, list[int]] = {}

    def seeded_state(self, j: int) -> Tensors:
        ds = self.dataset
        model = model_for(self.cfg.replace(seed=self.cfg.seed * 1009 + j), ds)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if {k: v.shape for k, v in state.items()} != {k: v.shape for k, v in self.global_state.items()}:
            raise ConfigError(f"{type(self).__name__} draws its other cluster models from run config 'model' = "
                              f"{self.cfg.model!r}, whose arrays differ from the initial ones: set identical_init=True")
        return state

    def chosen(self) -> int:
        """How many of the k models each client averages (FLSC: N_g)."""
        return 1

    def models(self) -> Payload:
        return {f"model-{j}": m for j, m in enumerate(self.cluster_models)}

    def broadcast_payload(self, phase: str, server_round: int):
        return self.models() if phase == "train" else {}

    def shared_payloads(self, phase: str, server_round: int):
        return {} if phase == "train" else self.models()  # evaluation: for the clients that never trained

    def client_payload(self, phase: str, pid: int, server_round: int):
        if phase == "train":
            return {}
        chosen = self.choices.get(pid)
        if chosen is None:  # never trained: let the client pick as in training
            return {name: Shared(name) for name in self.models()}
        return {"arrays": weighted_mean([self.cluster_models[j] for j in chosen], [1.0] * len(chosen))}

    def client_config(self, phase: str, pid: int, server_round: int):
        return {**super().client_config(phase, pid, server_round), "chosen": self.chosen()}

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        for r in replies:
            mask = int(r.metrics["cluster-mask"])
            self.choices[r.pid] = [j for j in range(len(self.cluster_models)) if mask >> j & 1]
        for j in range(len(self.cluster_models)):
            members = [r for r in replies if j in self.choices[r.pid]]
            if members:
                self.cluster_models[j] = self.combine([r.payload["arrays"] for r in members],
                                                      [r.num_examples for r in members])

    def central_state(self) -> Tensors | None:
        return None

    def model_state(self) -> dict[str, Tensors]:
        """The k cluster models, ``model-0`` ... ``model-<k-1>``."""
        return self.models()


ALGORITHMS = {"ifca": IFCA}
