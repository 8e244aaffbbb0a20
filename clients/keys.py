"""How an algorithm declares the run-config keys its clients read, and the ones several algorithms share.

An algorithm's keys are declared beside the side that reads them. Each module in ``clients/``
declares its algorithms as ``ALGORITHMS = {name: (Settings, Client)}``: the algorithm's prefix,
the keys its clients read (sent in every message's config) and the client class its sites run.
The server's own keys are declared with the strategy that reads them (``strategies/<name>.py``,
``strategies.settings.declare``), whose ``config_keys`` are all the algorithm's keys, its
clients' among them. The registry builds the run-config schema from both
(``fedapp.runtime.registry.all_keys``); a ClientApp parses its run config from the declarations
here alone, importing no strategy (``parse_run_config(..., side="client")``).

A shared key is listed under each algorithm's own prefix (``fedsam.rho``, ``mofedsam.rho``,
``fedsmoo.rho``), so every method that shares a setting shares its type, default, bounds and
description.
"""

from typing import NamedTuple

from fedapp.core.config import Key


class Settings(NamedTuple):
    """An algorithm's run-config prefix and the keys its clients read, ``<prefix>.<key>``: a
    strategy takes its ``config_prefix`` and ``client_keys`` from it (``strategies.settings.declare``)."""

    prefix: str
    keys: tuple[Key, ...] = ()


#: SAM's radius: FedSAM, MoFedSAM, FedSpeed, FedSMOO
RHO = Key("rho", float, 0.1, "SAM perturbation radius rho.", low=0.0)

#: the dynamic regulariser's penalty: FedDyn, FedSpeed, FedSMOO
BETA = Key("beta", float, 10.0, "Dynamic-regulariser penalty beta (FedDyn's alpha = 1/beta).", low=0.0, low_open=True)

#: FedCM's mix of the local gradient and the global direction: FedCM, MoFedSAM
ALPHA = Key("alpha", float, 0.1, "Weight of the local gradient against the global direction.", low=0.0, high=1.0)
DECAY_IN_MIX = Key("decay-in-mix", bool, False,
                   "Weight decay inside the mix, alpha (g + wd w) + (1 - alpha) Delta; false: alpha g + (1 - alpha) Delta "
                   "+ wd w, as the authors' simulator (FedCM, MoFedSAM) does.")
