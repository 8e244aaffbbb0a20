"""SCAFFOLD: server control variate c next to the global model."""

from __future__ import annotations

from clients.scaffold import ScaffoldClient
from fedapp.config import Key
from fedapp.records import Tensors
from strategies.base import LR_DECAY, FedStrategy, Reply, spec_of


class Scaffold(FedStrategy):
    """SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

    Sampled clients S receive (x, c) and reply (y_i, Delta c_i). With N training clients
    and global step eta_g (``scaffold.server-lr``):

        x <- x + eta_g * (1/|S|) sum_{i in S} (y_i - x)
        c <- c + (1/N) sum_{i in S} Delta c_i

    Both directions carry two model-sized arrays, twice FedAvg's traffic.
    """

    config_prefix = "scaffold"
    config_keys = (Key("server-lr", float, 1.0, "Global step size eta_g.", low=0.0, low_open=True), LR_DECAY)
    checkpoint_attrs = ("control",)
    weighted = False

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.control: Tensors = self.zeros_like_params()

    def broadcast_payload(self, server_round):
        return {"arrays": self.global_state, "control": self.control}

    def reply_spec(self, pid, server_round):
        return spec_of({"arrays": self.global_state, "control-delta": self.control})

    def update_control(self, replies: list[Reply]) -> None:
        """c <- c + sum_{i in S} Delta c_i / N (N: all training clients)."""
        n = len(self.train_pool())
        if self.cfg.aggregation != "mean":  # |S|/N times a robust combination of the Delta c_i
            robust = self.combine([r.payload["control-delta"] for r in replies], [1.0] * len(replies))
            self.control = {k: c + robust[k] * (len(replies) / n) for k, c in self.control.items()}
            return
        self.control = {k: c + sum(r.payload["control-delta"][k] for r in replies) / n
                        for k, c in self.control.items()}

    def aggregate(self, server_round, replies):
        old = self.global_state
        super().aggregate(server_round, replies)  # unweighted mean of the y_i
        eta = self.cfg.algo("server-lr")
        self.global_state = {k: (old[k] + eta * (y - old[k])) if y.is_floating_point() else y
                             for k, y in self.global_state.items()}
        self.update_control(replies)


ALGORITHMS = {"scaffold": (Scaffold, ScaffoldClient)}
