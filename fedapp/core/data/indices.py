"""Client index bookkeeping that needs numpy only: the partitioners' names, seen and new clients,
local train/test splits.

Apart from ``partitioners.py``, which is built on Hugging Face ``datasets`` and flwr-datasets (whose
package imports pandas and matplotlib): 1.4 CPU s of imports that a client process, parsing a run
config and cutting its partition's local split, does not need (the partitions themselves come from
the cache ``fedapp.core.experiment`` keeps of them).
"""

from __future__ import annotations

import numpy as np

#: the keys of ``partitioners.PARTITIONERS``, in its order (``tests/test_data.py`` checks they agree)
PARTITION_NAMES = ("iid", "dirichlet", "dirichlet-hsu", "pathological", "pathological-hsu", "label-sorted",
                   "shards-halfnormal", "quantity-halfnormal", "half-classes", "hcct-shards", "hcct-quantity",
                   "natural", "pfedhn")


def num_unseen(num_clients: int, unseen_fraction: float) -> int:
    """How many of ``num_clients`` clients ``split_seen_unseen`` holds out: ``round(fraction * n)``, at
    least 1 when the fraction is positive."""
    n_unseen = round(unseen_fraction * num_clients)
    return min(num_clients, max(1, n_unseen)) if unseen_fraction > 0 else n_unseen


def split_seen_unseen(num_clients: int, unseen_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(seen, unseen) client ids, sorted: ``num_unseen`` random clients are held out of training to
    measure generalisation to new clients."""
    n_unseen = num_unseen(num_clients, unseen_fraction)
    perm = np.random.default_rng(seed).permutation(num_clients)
    return sorted(map(int, perm[n_unseen:])), sorted(map(int, perm[:n_unseen]))


def local_test_split(indices: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, test) of one client's indices: shuffle by ``seed``, the last ``test_fraction``
    share is local test. With >= 2 examples and a positive fraction both sides are non-empty."""
    shuffled = np.random.default_rng(seed).permutation(np.asarray(indices))
    n = len(shuffled)
    n_test = round(test_fraction * n)
    if test_fraction > 0 and n >= 2:
        n_test = min(n - 1, max(1, n_test))
    return shuffled[: n - n_test], shuffled[n - n_test :]
