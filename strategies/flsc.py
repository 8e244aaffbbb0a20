"""FLSC: soft clustering, each client averages its N_g best of k models."""

import clients.ifca
from fedapp.core.config import ConfigError, Key, RunConfig
from strategies.ifca import CLUSTERS, IDENTICAL_INIT, IFCA
from strategies.settings import declare


class FLSC(IFCA):
    """Federated Learning with Soft Clustering (Li et al., IEEE IoT-J 2022).

    As IFCA, but client i takes the N_g models with the lowest loss on its data, S_i, trains
    their average sum_{j in S_i} w_j / N_g, and its model joins the average of every w_j, j in S_i.
    """

    # clients.ifca.FLSC: the class shares the declaration's name
    config_prefix, config_keys, client_keys = declare(
        clients.ifca.FLSC,
        CLUSTERS, Key("n-g", int, 2, "Models N_g each client averages and contributes to.", low=1), IDENTICAL_INIT)

    @classmethod
    def check_config(cls, cfg: RunConfig) -> None:
        if cfg.algo("n-g") > cfg.algo("clusters"):
            raise ConfigError(f"run config 'flsc.n-g' = {cfg.algo('n-g')} exceeds 'flsc.clusters' = "
                              f"{cfg.algo('clusters')}")

    def chosen(self) -> int:
        return self.cfg.algo("n-g")


ALGORITHMS = {"flsc": FLSC}
