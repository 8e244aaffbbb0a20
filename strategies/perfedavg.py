"""Per-FedAvg: FedAvg on the MAML objective, personalised by fine-tuning."""

from clients.perfedavg import PERFEDAVG
from fedapp.core.experiment import round_lr
from strategies.base import FedStrategy
from strategies.settings import declare


class PerFedAvg(FedStrategy):
    """Per-FedAvg, first-order (Fallah, Mokhtari, Ozdaglar, "Personalized Federated Learning with
    Theoretical Guarantees: A Model-Agnostic Meta-Learning Approach", NeurIPS 2020).

    The objective is F(w) = 1/n sum_i f_i(w - alpha grad f_i(w)). Client i, from w_{k+1,0}^i = w_k,
    for t = 1..tau: w~_{k+1,t}^i = w_{k+1,t-1}^i - alpha grad~f_i(w_{k+1,t-1}^i, D_t^i), then
    w_{k+1,t}^i = w_{k+1,t-1}^i - beta grad~f_i(w~_{k+1,t}^i, D'_t^i) (the first-order version drops
    the Hessian term); server: w_{k+1} = 1/|A_k| sum_{i in A_k} w_{k+1,tau}^i (unweighted, as the
    paper and FL-bench). alpha is the run's lr, beta is ``perfedavg.beta``, tau is one epoch (PeFLL's
    appendix), i.e. half the epoch's batches. A client, seen or new, evaluates w fine-tuned on its own
    data (``finetune-epochs`` epochs of SGD at alpha, FL-bench's at least one epoch).
    """

    config_prefix, config_keys, client_keys = declare(PERFEDAVG, *PERFEDAVG.keys)
    weighted = False

    def client_config(self, phase, pid, server_round):
        # evaluation fine-tunes (personalises) with the round's lr, as training does
        return {**super().client_config(phase, pid, server_round), "lr": round_lr(self.cfg, server_round)}


ALGORITHMS = {"perfedavg": PerFedAvg}
