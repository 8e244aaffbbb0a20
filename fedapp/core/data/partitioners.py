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

from .indices import local_test_split, split_seen_unseen  # noqa: F401  (their home before indices.py)


PFEDHN_VAL_SIZE = 10_000  # training images held out for validation (CIFAR-10 and CIFAR-100 alike)


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

    def __init__(self, num_partitions: int, seed: int, classes: np.ndarray | None = None) -> None:
        if num_partitions < 2:
            raise ValueError(f"partitioner 'half-classes' needs num_partitions >= 2, got {num_partitions}")
        super().__init__(num_partitions, seed)
        self._classes = classes  # whose halves to use; None: the classes present in the labels split

    def _split(self, labels, rng):
        classes = np.unique(labels) if self._classes is None else self._classes
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


def pfedhn_classes(num_classes: int, n: int, classes_per_client: int, seed: int) -> list[list[int]]:
    """The class split of pFedHN and PeFLL's public code: every class goes to
    ``classes_per_client * n / num_classes`` clients; client i in turn takes each of its classes
    at random among those with the most places left (never one it already holds)."""
    rng = np.random.default_rng(seed)
    left = np.full(num_classes, classes_per_client * n // num_classes)
    out = []
    for _ in range(n):
        mine: list[int] = []
        for _ in range(classes_per_client):
            free = np.array([c not in mine for c in range(num_classes)])
            best = np.flatnonzero(free & (left == left[free].max()))
            mine.append(int(rng.choice(best)))
            left[mine[-1]] -= 1
        out.append(mine)
    return out


def pfedhn_split(labels: np.ndarray, classes: list[list[int]], seed: int) -> list[np.ndarray]:
    """Indices per client: each class's examples (shuffled by ``seed``) cut into equal shares,
    one per client holding the class, in client order (the authors' int(count / holders))."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    num_classes = max(max(c) for c in classes) + 1
    holders = np.bincount([c for cs in classes for c in cs], minlength=num_classes)
    pools = {c: rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)}
    taken = dict.fromkeys(pools, 0)
    out = []
    for cs in classes:
        idx = []
        for c in cs:
            k = int(len(pools[c]) / holders[c])
            idx.append(pools[c][taken[c]:taken[c] + k])
            taken[c] += k
        out.append(np.sort(np.concatenate(idx)).astype(np.int64))
    return out


def pfedhn_val_holdout(labels: np.ndarray, val_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, validation) indices: ``val_size / C`` examples of every class held out, as the
    PeFLL/pFedHN code holds 10,000 CIFAR training images out for validation."""
    labels = np.asarray(labels)
    num_classes = int(labels.max()) + 1
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    k = val_size // num_classes
    return (np.sort(np.concatenate([p[k:] for p in per_class])),
            np.sort(np.concatenate([p[:k] for p in per_class])))


def hcct_shard_counts(draws: np.ndarray, num_shards: int) -> np.ndarray:
    """The HCCT authors' shard counts (``utils/sampling.py``, ``imbalanced``): floor(r_k / sum r *
    num_shards), a zero raised to 1, draws used as they are; the shards left over stay unused."""
    counts = np.floor(draws / draws.sum() * num_shards).astype(np.int64)
    counts[counts == 0] = 1
    if counts.sum() > num_shards:
        raise ValueError(f"half-normal draws ask for {counts.sum()} of {num_shards} shards")
    return counts


class HCCTShardsPartitioner(PrecomputedPartitioner):
    """HCCT's CIFAR-10 split as the authors' code makes it: ``num_shards`` label-sorted shards, client
    k gets :func:`hcct_shard_counts` of them (half-normal |N(0, sigma)| draws), drawn at random
    without replacement; unlike ``shards-halfnormal`` no draw is clamped, so data-poor clients
    stay data-poor, and the shards the floors leave over are not used."""

    def __init__(self, num_partitions: int, num_shards: int, sigma: float, seed: int) -> None:
        super().__init__(num_partitions, seed)
        self._num_shards = num_shards
        self._sigma = sigma

    def _split(self, labels, rng):
        shards = np.array_split(np.argsort(labels, kind="stable"), self._num_shards)
        counts = hcct_shard_counts(np.abs(rng.normal(0, self._sigma, self._num_partitions)), self._num_shards)
        order = rng.permutation(self._num_shards)
        bounds = np.concatenate([[0], np.cumsum(counts)])
        return [np.concatenate([shards[s] for s in order[a:b]]) for a, b in zip(bounds[:-1], bounds[1:])]


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


def _hcct_shards(labels, n, seed, num_shards, sigma, **_):
    return HCCTShardsPartitioner(n, num_shards, sigma, seed), None


def _hcct_quantity(labels, n, seed, sigma, **_):
    # the authors' imbalanced_iid: int(r_k / sum r * N) random examples each (at least 2 here, so a
    # client has a training and a test example), the rounding remainder unused
    rng = np.random.default_rng(seed)
    draws = np.abs(rng.normal(0, sigma, n))
    sizes = np.maximum(2, (draws / draws.sum() * len(labels)).astype(np.int64))
    order = rng.permutation(len(labels))
    return SizePartitioner([int(s) for s in sizes]), order


def _half_classes(labels, n, seed, **_):
    return HalfClassesPartitioner(n, seed), None


class _Fixed(Partitioner):
    """Partitions given as index arrays into the label column (for precomputed splits)."""

    def __init__(self, parts: list[np.ndarray]) -> None:
        super().__init__()
        self.parts = parts

    def load_partition(self, partition_id: int) -> datasets.Dataset:
        return self.dataset.select(self.parts[partition_id].tolist())

    @property
    def num_partitions(self) -> int:
        return len(self.parts)


def pfedhn_partitions(train_labels: np.ndarray, test_labels: np.ndarray | None, n: int, classes_per_client: int,
                      seed: int) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """(train, validation, test) index arrays per client, the recipe of pFedHN's and PeFLL's code:
    ``PFEDHN_VAL_SIZE`` training examples (at most a fifth) held out evenly per class as
    validation; one class split shared by the three sets, each class's examples of each set cut
    into equal shares among its holders; train and validation index the training labels, test
    the test labels."""
    train_labels = np.asarray(train_labels)
    num_classes = int(train_labels.max()) + 1
    train, val = pfedhn_val_holdout(train_labels, min(PFEDHN_VAL_SIZE, len(train_labels) // 5), seed)
    classes = pfedhn_classes(num_classes, n, classes_per_client, seed)
    parts = ([train[i] for i in pfedhn_split(train_labels[train], classes, seed)],
             [val[i] for i in pfedhn_split(train_labels[val], classes, seed + 1)])
    test = [] if test_labels is None else pfedhn_split(test_labels, classes, seed + 2)
    return (*parts, test)


def _pfedhn(labels, n, seed, classes_per_client, **_):
    # the training split only; fedapp.core.experiment.client_data takes validation and test from
    # pfedhn_partitions as well
    return _Fixed(pfedhn_partitions(labels, None, n, classes_per_client, seed)[0]), None


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
    "hcct-shards": _hcct_shards,
    "hcct-quantity": _hcct_quantity,
    "natural": _natural,
    "pfedhn": _pfedhn,
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
    # read as one Arrow column: numpy over the Dataset's column goes through it row by row (1 CPU s
    # for 50,000 rows)
    return [np.asarray(partitioner.load_partition(i).with_format("arrow")["idx"].to_numpy(), dtype=np.int64)
            for i in range(num_partitions)]


def half_classes_test_split(train_labels: np.ndarray, test_labels: np.ndarray, n: int, seed: int) -> list[np.ndarray]:
    """Each client's indices into the test split, cut by 'half-classes' with the halves of the
    training classes (a class missing from one split must not move the halves)."""
    return HalfClassesPartitioner(n, seed, np.unique(train_labels))._split(np.asarray(test_labels),
                                                                          np.random.default_rng(seed))
