"""MAXFL-style participation: a client joins the global model only while it serves it well."""

from clients.maxfl import MAXFL
from fedapp.server.replies import Reply
from strategies.base import FedStrategy
from strategies.settings import declare


class MaxFL(FedStrategy):
    """MaxFL as HCCT's baseline (Zhang et al., "MaxFL: Maximizing the Number of Participating
    Clients in Federated Learning"), simplified to its participation rule.

    Client i keeps a local model v_i; it joins round t only when the global model's loss on its
    training data is below its threshold, F_i(w_t) <= F_i(v_i) + margin. Joined clients train w_t
    and w_{t+1} = sum_{i joined} n_i w_i^{t,K} / sum_{i joined} n_i; the others train v_i alone.
    A client is evaluated with the model the same rule picks: w_t if it would join, else v_i.
    """

    config_prefix, config_keys, client_keys = declare(MAXFL, *MAXFL.keys)

    def aggregate(self, server_round: int, replies: list[Reply]) -> None:
        joined = [r for r in replies if r.metrics["joined"]]
        if joined:
            self.global_state = self.combine([r.payload["arrays"] for r in joined], [r.num_examples for r in joined])


ALGORITHMS = {"maxfl": MaxFL}
