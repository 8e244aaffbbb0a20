"""Independent training: every client trains alone (HCCT's Table IV baseline)."""

from clients.hcct import INDEPENDENT
from fedapp.core.config import RunConfig
from strategies.hcct import HCCT, Group
from strategies.settings import declare


class Independent(HCCT):
    """Independent local training: w_i^{t+1} = w_i^{t,K}, no model ever leaves its client's group
    of one (HCCT with the partition fixed to singletons)."""

    config_prefix, config_keys, client_keys = declare(INDEPENDENT)
    robust_refusal = "every client trains alone in a group of one, so the server combines no updates"

    @classmethod
    def check_config(cls, cfg: RunConfig) -> None:
        """Any participation works: a client not sampled keeps its model."""

    def arrived(self, server_round: int) -> int:
        return self.cfg.num_clients  # no arrival schedule (it is an hcct.* setting)

    def places_newcomers_at_once(self) -> bool:
        return False  # nobody is placed

    def partition(self, server_round: int, pool: list[int]) -> list[Group]:
        return [(pid,) for pid in pool]


ALGORITHMS = {"independent": Independent}
