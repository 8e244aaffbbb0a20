"""How an algorithm declares its run-config keys, and the keys several algorithms share.

Each module in ``clients/`` declares its algorithms as ``ALGORITHMS = {name: (Settings, Client)}``:
the prefix and keys of the algorithm's own settings and the client class its sites run. The
strategy takes its ``config_prefix``, ``config_keys`` and ``client_keys`` from that declaration,
and the registry builds the run-config schema from the declarations alone, so a ClientApp parses
its run config importing no strategy (``fedapp.runtime.registry.parse_run_config(..., side="client")``).

A shared key is listed under each algorithm's own prefix (``fedsam.rho``, ``mofedsam.rho``,
``fedsmoo.rho``), so every method that shares a setting shares its type, default, bounds and
description.
"""

from typing import NamedTuple

from fedapp.core.config import Key


class Settings(NamedTuple):
    """An algorithm's own run-config keys, ``<prefix>.<key>``; a strategy unpacks it into its
    ``config_prefix, config_keys, client_keys``."""

    prefix: str
    keys: tuple[Key, ...] = ()
    #: names of the ``keys`` the algorithm's clients read: sent in every message's config
    client_keys: tuple[str, ...] = ()


#: a method's own lr decay (read by ``fedapp.core.experiment.round_lr``), so one run-config file can decay
#: FedDyn/FedSMOO by 0.9995 and the other methods by 0.998, as FedSMOO's Table 1 does
LR_DECAY = Key("lr-decay", float, 0.0, "This method's lr decay per round; 0: the common lr-decay.", low=0.0, high=1.0)

#: SAM's radius: FedSAM, MoFedSAM, FedSpeed, FedSMOO
RHO = Key("rho", float, 0.1, "SAM perturbation radius rho.", low=0.0)

#: the dynamic regulariser's penalty: FedDyn, FedSpeed, FedSMOO
BETA = Key("beta", float, 10.0, "Dynamic-regulariser penalty beta (FedDyn's alpha = 1/beta).", low=0.0, low_open=True)

#: FedCM's mix of the local gradient and the global direction: FedCM, MoFedSAM
ALPHA = Key("alpha", float, 0.1, "Weight of the local gradient against the global direction.", low=0.0, high=1.0)
DECAY_IN_MIX = Key("decay-in-mix", bool, False,
                   "Weight decay inside the mix, alpha (g + wd w) + (1 - alpha) Delta; false: alpha g + (1 - alpha) Delta "
                   "+ wd w, as the authors' simulator (FedCM, MoFedSAM) does.")

#: the cluster models: IFCA, FLSC
CLUSTERS = Key("clusters", int, 3, "Number k of cluster models.", low=1)
IDENTICAL_INIT = Key("identical-init", bool, False, "All k models start from the same initial model (the HCCT "
                     "authors' code); IFCA's paper starts them from distinct initialisations.")
