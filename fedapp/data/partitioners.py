"""Client partitioners over a label array, built on flwr-datasets' ``Partitioner`` interface.

flwr-datasets partitions a ``datasets.Dataset``; we wrap the labels in a two-column one
(``label``, ``idx`` = original row) and read ``idx`` back, so every scheme returns plain index
arrays into the caller's tensors. Schemes flwr-datasets lacks are ``Partitioner`` subclasses.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import datasets
import numpy as np
from flwr_datasets.partitioner import (
    DirichletPartitioner,
    IidPartitioner,
    NaturalIdPartitioner,
    PathologicalPartitioner,
    Partitioner,
    SizePartitioner,
)


class PrecomputedPartitioner(Partitioner):
    """Base for schemes that need the whole label column at once; computed on first access."""

    def __init__(self, num_partitions: int, seed: int) -> None:
        super().__init__()
        self._num_partitions = num_partitions
        self._seed = seed
        self._parts: list[np.ndarray] | None = None

    def _split(self, labels: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        raise NotImplementedError

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        if self._parts is None:
            self._parts = self._split(np.asarray(self.dataset["label"]), np.random.default_rng(self._seed))
        return self.dataset.select(self._parts[partition_id])

    @property
    def num_partitions(self) -> int:
        return self._num_partitions


class DirichletHsuPartitioner(PrecomputedPartitioner):
    """Hsu et al. (2019) label skew as FedSMOO's authors draw it (their simulator's ``DatasetObject``,
    rule 'Dirichlet'): client k's class prior q_k ~ Dir(alpha, ..., alpha) (alpha per class), every
    client gets N // K examples (client 0 also the remainder). Repeatedly a random client that is not
    full draws a class from q_k and takes that class's next unused example; a class that has run out
    is refilled, so its examples are used again (the paper's "sampling with replacement": class totals
    follow the priors, not the data). The draws replay the simulator's numpy calls in order from
    ``np.random.seed(seed)``, so the per-client class counts equal the simulator's for the same seed
    and the same class sizes."""

    def __init__(self, num_partitions: int, alpha: float, seed: int) -> None:
        super().__init__(num_partitions, seed)
        self._alpha = alpha

    def priors(self, rng: np.random.RandomState, num_classes: int) -> np.ndarray:
        """Cumulative class priors, one row per client."""
        return np.cumsum(rng.dirichlet([self._alpha] * num_classes, size=self._num_partitions), axis=1)

    def _split(self, labels, _):
        rng = np.random.RandomState(self._seed)  # the simulator's legacy global stream
        order = rng.permutation(len(labels))  # the simulator shuffles the training set first
        labels = labels[order]
        n = self._num_partitions
        sizes = np.full(n, len(labels) // n, dtype=np.int64)
        sizes[0] += len(labels) - sizes.sum()
        cumsum = self.priors(rng, int(labels.max()) + 1)
        pools = [np.flatnonzero(labels == c) for c in range(cumsum.shape[1])]
        left = [len(p) for p in pools]
        # np.argmax(u <= cumsum[k]) as a bisection over the row's positive (non-decreasing) entries
        rows = [(row[row > 0].tolist(), np.flatnonzero(row > 0).tolist()) for row in cumsum]
        parts = [np.empty(s, dtype=np.int64) for s in sizes]
        sizes = sizes.tolist()
        remaining = sum(sizes)
        while remaining:
            k = rng.randint(n)
            if sizes[k] <= 0:
                continue
            sizes[k] -= 1
            remaining -= 1
            values, classes = rows[k]
            while True:
                u = rng.uniform()
                j = bisect.bisect_left(values, u)
                c = classes[j] if u > 0 and j < len(values) else 0  # no True: argmax gives 0
                if left[c] <= 0:  # class used up: refill it and draw again
                    left[c] = len(pools[c])
                    continue
                left[c] -= 1
                parts[k][sizes[k]] = order[pools[c][left[c]]]
                break
        return parts


class PathologicalHsuPartitioner(DirichletHsuPartitioner):
    """FedSMOO's pathological split (their simulator's rule 'Pathological'): client k may hold only c
    random classes, each with prior 1/c; drawn like ``DirichletHsuPartitioner`` (equal client sizes,
    a used-up class is refilled), replaying the simulator's numpy stream for the same seed."""

    def __init__(self, num_partitions: int, classes_per_client: int, seed: int) -> None:
        super().__init__(num_partitions, 1.0, seed)
        self._c = classes_per_client

    def priors(self, rng, num_classes):
        active = np.ones((self._num_partitions, num_classes))
        active[:, self._c:] = 0
        for row in active:
            rng.shuffle(row)
        return np.where(active > 0, np.cumsum(active, axis=1) / self._c, 0.0)


class ShardsHalfNormalPartitioner(PrecomputedPartitioner):
    """Label-sorted shards (McMahan et al.) with a skewed shard count per client (HCCT): client
    k's share is max(1, |N(0, sigma)|), scaled so all ``num_shards`` are handed out, >= 1 each."""

    def __init__(self, num_partitions: int, num_shards: int, sigma: float, seed: int) -> None:
        super().__init__(num_partitions, seed)
        if num_shards < num_partitions:
            raise ValueError(f"num_shards={num_shards} must be >= num_partitions={num_partitions}")
        self._num_shards = num_shards
        self._sigma = sigma

    def _split(self, labels, rng):
        shards = np.array_split(np.argsort(labels, kind="stable"), self._num_shards)
        weights = np.maximum(1.0, np.abs(rng.normal(0, self._sigma, self._num_partitions)))
        counts = allocate(weights, self._num_shards, minimum=1)
        order = rng.permutation(self._num_shards)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        return [np.concatenate([shards[s] for s in order[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]


class HalfClassesPartitioner(PrecomputedPartitioner):
    """HCCT Table II: the last client holds the second half of the classes; clients 0..n-2 split
    every class of the first half with shares proportional to (k+1)^2, which for three clients is
    the paper's 20% / 80% (so collaboration helps only among the first n-1 clients)."""

    def __init__(self, num_partitions: int, seed: int) -> None:
        if num_partitions < 2:
            raise ValueError(f"partitioner 'half-classes' needs num_partitions >= 2, got {num_partitions}")
        super().__init__(num_partitions, seed)

    def _split(self, labels, rng):
        classes = np.unique(labels)
        first = set(classes[: len(classes) // 2].tolist())
        shares = np.arange(1, self._num_partitions) ** 2.0
        parts: list[list[np.ndarray]] = [[] for _ in range(self._num_partitions)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            if c in first:
                cuts = np.cumsum(allocate(shares, len(idx), minimum=0))[:-1]
                for k, chunk in enumerate(np.split(idx, cuts)):
                    parts[k].append(chunk)
            else:
                parts[-1].append(idx)
        return [np.sort(np.concatenate(p)) for p in parts]


def allocate(weights: np.ndarray, total: int, minimum: int) -> np.ndarray:
    """Integer sizes summing to ``total``, each >= ``minimum``, the rest proportional to weights
    (largest-remainder rounding, so nothing is lost to truncation)."""
    n = len(weights)
    rest = total - minimum * n
    if rest < 0:
        raise ValueError(f"cannot give {n} partitions at least {minimum} of {total} items")
    share = weights / weights.sum() * rest
    sizes = np.floor(share).astype(np.int64)
    sizes[np.argsort(sizes - share, kind="stable")[: rest - sizes.sum()]] += 1
    return sizes + minimum


# Each factory returns the partitioner and the row order of the dataset it partitions
# (None = original order): IID and label-sorted are contiguous chunks of a permuted order.
_Factory = Callable[..., tuple[Partitioner, np.ndarray | None]]


def _iid(labels, n, seed, **_):
    return IidPartitioner(n), np.random.default_rng(seed).permutation(len(labels))


def _dirichlet(labels, n, seed, alpha, **_):
    part = DirichletPartitioner(n, "label", alpha, min_partition_size=2, self_balancing=False, seed=seed)
    return part, None


def _dirichlet_hsu(labels, n, seed, alpha, **_):
    return DirichletHsuPartitioner(n, alpha, seed), None


def _pathological_hsu(labels, n, seed, classes_per_client, **_):
    return PathologicalHsuPartitioner(n, classes_per_client, seed), None


def _pathological(labels, n, seed, classes_per_client, **_):
    # "first-deterministic": client k always holds class k mod C (so all classes are used once
    # n >= C), the remaining classes are drawn by seed; each class is split evenly among holders.
    part = PathologicalPartitioner(n, "label", classes_per_client, "first-deterministic", seed=seed)
    return part, None


def _label_sorted(labels, n, seed, **_):
    return IidPartitioner(n), np.argsort(labels, kind="stable")


def _shards_halfnormal(labels, n, seed, num_shards, sigma, **_):
    return ShardsHalfNormalPartitioner(n, num_shards, sigma, seed), None


def _quantity_halfnormal(labels, n, seed, sigma, **_):
    rng = np.random.default_rng(seed)
    minimum = min(10, len(labels) // n)
    sizes = allocate(np.abs(rng.normal(0, sigma, n)), len(labels), minimum)
    return SizePartitioner([int(s) for s in sizes]), rng.permutation(len(labels))


def _half_classes(labels, n, seed, **_):
    return HalfClassesPartitioner(n, seed), None


def _natural(labels, n, seed, natural_ids, **_):
    if natural_ids is None:
        raise ValueError("partitioner 'natural' needs natural_ids (e.g. Dataset.train_client)")
    found = len(np.unique(natural_ids))
    if found != n:
        raise ValueError(f"partitioner 'natural' found {found} distinct natural ids but num_partitions={n}")
    return NaturalIdPartitioner("natural_id"), None


PARTITIONERS: dict[str, _Factory] = {
    "iid": _iid,
    "dirichlet": _dirichlet,
    "dirichlet-hsu": _dirichlet_hsu,
    "pathological": _pathological,
    "pathological-hsu": _pathological_hsu,
    "label-sorted": _label_sorted,
    "shards-halfnormal": _shards_halfnormal,
    "quantity-halfnormal": _quantity_halfnormal,
    "half-classes": _half_classes,
    "natural": _natural,
}


def partition_indices(
    name: str,
    labels: np.ndarray,
    num_partitions: int,
    seed: int,
    *,
    alpha: float = 0.5,
    classes_per_client: int = 2,
    num_shards: int = 100,
    sigma: float = 1.0,
    natural_ids: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Index arrays (int64, into ``labels``), one per client; deterministic given ``seed``.

    ``natural`` partition i holds the i-th smallest natural id.
    """
    if name not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {name!r}; allowed: {', '.join(PARTITIONERS)}")
    labels = np.asarray(labels)
    partitioner, order = PARTITIONERS[name](
        labels, num_partitions, seed, alpha=alpha, classes_per_client=classes_per_client,
        num_shards=num_shards, sigma=sigma, natural_ids=natural_ids,
    )
    order = np.arange(len(labels)) if order is None else order
    columns = {"label": labels[order], "idx": order}
    if natural_ids is not None:
        columns["natural_id"] = np.asarray(natural_ids)[order]
    partitioner.dataset = datasets.Dataset.from_dict(columns)
    return [np.asarray(partitioner.load_partition(i)["idx"], dtype=np.int64) for i in range(num_partitions)]


def split_seen_unseen(num_clients: int, unseen_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(seen, unseen) client ids, sorted: ``round(fraction * n)`` random clients (>= 1 when the
    fraction is positive) are held out of training to measure generalisation to new clients."""
    n_unseen = round(unseen_fraction * num_clients)
    if unseen_fraction > 0:
        n_unseen = min(num_clients, max(1, n_unseen))
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
