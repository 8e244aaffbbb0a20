"""pFedMe: personal models regularised by a Moreau envelope towards the global model."""

from clients.pfedme import PFEDME
from fedapp.core.config import Key
from fedapp.core.experiment import round_lr
from strategies.base import FedStrategy
from strategies.settings import declare


class PFedMe(FedStrategy):
    """pFedMe (Dinh, Tran, Nguyen, "Personalized Federated Learning with Moreau Envelopes", NeurIPS 2020).

    Client i solves theta^_i(w_{i,r}) = argmin_theta f_i(theta; D_i) + lambda/2 ||theta - w_{i,r}||^2 with
    K gradient steps at the personal rate (``personal-lr``), then w_{i,r+1} = w_{i,r} - eta lambda
    (w_{i,r} - theta^_i), for R local rounds (one per batch; eta is the run's lr); server:
    w_{t+1} = (1 - beta) w_t + beta sum_{i in S_t} n_i w_{i,R} / sum_{i in S_t} n_i (weighted by n_i as
    FL-bench; the paper: 1/S). PeFLL's appendix: lambda = 15, K = 3, beta = 1. A client evaluates its
    personal model theta; a new client starts theta at w_T and fine-tunes it for ``new-epochs`` epochs
    (PeFLL's appendix: 20) on the pFedMe loss. FL-bench (06e658b) evaluates instead the personal model its
    server sent, which it never updates (the initial model; ``test_matches_fl_bench``).
    """

    # the server's mixing beta, between the clients' mu and new-epochs
    config_prefix, config_keys, client_keys = declare(
        PFEDME, *PFEDME.keys[:4],
        Key("beta", float, 1.0, "Server mixing beta (PeFLL's appendix: 1, plain averaging).", low=0.0,
            low_open=True, high=2.0),
        *PFEDME.keys[4:])

    def aggregate(self, server_round, replies) -> None:
        beta = self.cfg.algo("beta")
        mean = self.combine([r.payload["arrays"] for r in replies], [r.num_examples for r in replies])
        self.global_state = {k: (1 - beta) * v + beta * mean[k] if v.is_floating_point() else mean[k]
                             for k, v in self.global_state.items()}

    def client_config(self, phase, pid, server_round):
        # evaluation fine-tunes (personalises) with the round's lr, as training does
        return {**super().client_config(phase, pid, server_round), "lr": round_lr(self.cfg, server_round)}


ALGORITHMS = {"pfedme": PFedMe}
