"""kNN-Per: FedAvg's global model, personalised at inference by a local kNN."""

from clients.knnper import KNNPER
from fedapp.core.layer_split import check_head
from strategies.base import FedStrategy
from strategies.settings import declare


class KNNPer(FedStrategy):
    """kNN-Per (Marfoq, Neglia, Vidal, Kameni, Vidal, "Personalized Federated Learning through Local
    Memorization", ICML 2022).

    The global model w is trained by FedAvg. Client m predicts with
    h_m(x) = lambda_m p_kNN(y | phi_w(x); S_m) + (1 - lambda_m) p_w(y | x), where phi_w is the global
    model's feature map (the head's input), S_m its datastore of (phi_w(x_j), y_j) over its training
    data, and p_kNN weighs the k nearest neighbours j by exp(-||phi_w(x) - phi_w(x_j)||^2 / (D sigma)),
    D the feature size. PeFLL's appendix: sigma (``scale``) = 100 from {0.1, 1, 10, 100}; k in {5, 10}
    and lambda_m in {0, 0.1, ..., 1} chosen on each client by cross-validation. A new client needs
    no training: one pass of its data through w builds its datastore. FL-bench (06e658b) mixes p_kNN with
    the model's logits, not its probabilities, and caps the datastore (``test_matches_fl_bench``).
    """

    config_prefix, config_keys, client_keys = declare(KNNPER, *KNNPER.keys)

    @classmethod
    def check_model(cls, cfg, model):
        check_head(cfg, model)  # the head's input is the feature map


ALGORITHMS = {"knnper": KNNPer}
