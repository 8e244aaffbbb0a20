"""SCAFFOLD: server control variate c next to the global model."""

from __future__ import annotations

from collections.abc import Callable

from clients.scaffold import SCAFFOLD as DECLARED
from fedapp.core.config import Key
from fedapp.core.records import Tensors
from fedapp.server.replies import spec_of
from strategies.base import FedStrategy
from strategies.settings import LR_DECAY, declare


def updated_control(c: Tensors, deltas: list[Tensors], num_clients: int,
                    combine: Callable[[list[Tensors], list[float]], Tensors] | None = None) -> Tensors:
    """c + sum_{i in S} Delta c_i / N, N the training clients (SCAFFOLD and FedALS + SCAFFOLD); with
    ``combine`` (a robust aggregation, run config 'aggregation'), c + |S|/N times its combination
    of the Delta c_i."""
    if combine is not None:
        robust = combine(deltas, [1.0] * len(deltas))
        return {k: v + robust[k] * (len(deltas) / num_clients) for k, v in c.items()}
    return {k: v + sum(d[k] for d in deltas) / num_clients for k, v in c.items()}


class SCAFFOLD(FedStrategy):
    """SCAFFOLD (Karimireddy et al., ICML 2020), option II control variates.

    Sampled clients S receive (x, c) and reply (y_i, Delta c_i). With N training clients
    and global step eta_g (``scaffold.server-lr``):

        x <- x + eta_g * (1/|S|) sum_{i in S} (y_i - x)
        c <- c + (1/N) sum_{i in S} Delta c_i

    Both directions carry two model-sized arrays, twice FedAvg's traffic.
    """

    config_prefix, config_keys, client_keys = declare(
        DECLARED, Key("server-lr", float, 1.0, "Global step size eta_g.", low=0.0, low_open=True), LR_DECAY)
    checkpoint_attrs = ("control",)
    weighted = False

    def __init__(self, cfg, model, dataset=None):
        super().__init__(cfg, model, dataset)
        self.control: Tensors = self.zeros_like_params()

    def broadcast_payload(self, phase, server_round):
        if phase != "train":
            return super().broadcast_payload(phase, server_round)
        return {"arrays": self.global_state, "control": self.control}

    def reply_spec(self, pid, server_round):
        return spec_of({"arrays": self.global_state, "control-delta": self.control})

    def aggregate(self, server_round, replies):
        old = self.global_state
        super().aggregate(server_round, replies)  # unweighted mean of the y_i
        eta = self.cfg.algo("server-lr")
        self.global_state = {k: (old[k] + eta * (y - old[k])) if y.is_floating_point() else y
                             for k, y in self.global_state.items()}
        self.control = updated_control(self.control, [r.payload["control-delta"] for r in replies],
                                       len(self.driver.train_pool()), None if self.cfg.aggregation == "mean" else self.combine)


Scaffold = SCAFFOLD  # its earlier name

ALGORITHMS = {"scaffold": SCAFFOLD}
