"""What the ServerApp and ClientApp build from a RunConfig: data, model, device.

Loaded datasets are cached per process (read-only tensors, not client state), so a
Ray worker or SuperNode decodes and partitions once and serves every message from memory.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from fedapp.core.config import ConfigError, RunConfig
from fedapp.core.data import Dataset, load_dataset, local_test_split, split_seen_unseen
from fedapp.core.data.sources import DATA_OPTIONS, cache_dir
from fedapp.core.models import build_model


def device_of(cfg: RunConfig) -> torch.device:
    if cfg.device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(cfg.device)


@lru_cache(maxsize=4)
def _dataset(name: str, data_dir: str, num_clients: int, seed: int, s_alpha: float, s_beta: float,
             options: tuple = ()) -> Dataset:
    return load_dataset(name, data_dir, num_clients=num_clients, seed=seed,
                        synthetic_alpha=s_alpha, synthetic_beta=s_beta, options=options)


def data_options(cfg: RunConfig) -> tuple:
    """The run config's keys that shape a table or hub dataset, as ``load_dataset``'s ``options``."""
    return tuple((k, cfg[k]) for k in DATA_OPTIONS)


def dataset(cfg: RunConfig, data_dir: str | None = None) -> Dataset:
    return _dataset(cfg.dataset, cfg.data_dir if data_dir is None else data_dir, cfg.num_clients,
                    cfg.seed, cfg.synthetic_alpha, cfg.synthetic_beta, data_options(cfg))


def cached_indices(kind: str, inputs: tuple, build) -> list:
    """``build()``'s index arrays (a list of arrays, or a tuple of such lists), kept in the cache dir
    beside the decoded datasets. A run's partitions are computed once, by the launcher's check (or the
    first process that needs them); the ServerApp and every client process read them, without
    importing the partitioners' Hugging Face datasets and flwr-datasets (1.4 CPU s a process) or
    cutting the dataset again (0.4-0.5 CPU s for CIFAR-10). The key holds every input (arrays by
    content), the partitioners' source and the versions of the packages they use, so a change to
    any of them computes afresh."""
    h = hashlib.sha1(f"{kind}:v1:".encode())
    for x in inputs:
        h.update(np.ascontiguousarray(x).tobytes() if isinstance(x, (np.ndarray, torch.Tensor)) else repr(x).encode())
        h.update(b"|")
    h.update(PARTITIONERS_SOURCE.read_bytes())
    for package in ("numpy", "datasets", "flwr-datasets"):
        h.update(importlib.metadata.version(package).encode())
    file = cache_dir() / f"{kind}-{h.hexdigest()[:20]}.npz"
    try:
        with np.load(file) as z:
            groups = [[z[f"g{g}_{i}"] for i in range(n)] for g, n in enumerate(z["sizes"])]
            return tuple(groups) if bool(z["is_tuple"]) else groups[0]
    except (OSError, KeyError, ValueError):  # not there yet (or unreadable): computed and written
        pass
    out = build()
    groups = list(out) if isinstance(out, tuple) else [out]
    arrays = {f"g{g}_{i}": np.asarray(a) for g, group in enumerate(groups) for i, a in enumerate(group)}
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp.npz")
    np.savez(tmp, sizes=np.array([len(g) for g in groups], dtype=np.int64), is_tuple=isinstance(out, tuple), **arrays)
    os.replace(tmp, file)  # atomic: a process reading it never sees half a file
    return out


PARTITIONERS_SOURCE = Path(__file__).parent / "data" / "partitioners.py"


@lru_cache(maxsize=4)
def _partitions(name: str, data_dir: str, num_clients: int, seed: int, s_alpha: float, s_beta: float,
                partition: str, alpha: float, classes: int, shards: int, sigma: float,
                options: tuple = ()) -> list[np.ndarray]:
    ds = _dataset(name, data_dir, num_clients, seed, s_alpha, s_beta, options)

    def build():
        from fedapp.core.data.partitioners import partition_indices

        return partition_indices(partition, ds.train_y.numpy(), num_clients, seed, alpha=alpha,
                                 classes_per_client=classes, num_shards=shards, sigma=sigma,
                                 natural_ids=ds.train_client)
    return cached_indices("partitions", (partition, num_clients, seed, alpha, classes, shards, sigma,
                                         ds.train_y, ds.train_client), build)


def partitions(cfg: RunConfig) -> list[np.ndarray]:
    """Every client's indices into the configured dataset's training split."""
    return _partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.seed, cfg.synthetic_alpha,
                       cfg.synthetic_beta, cfg.partition, cfg.partition_alpha, cfg.partition_classes,
                       cfg.partition_shards, cfg.partition_sigma, data_options(cfg))


def test_partitions(cfg: RunConfig) -> list[np.ndarray]:
    """Every client's indices into the dataset's test split, cut like its training partition
    (``local-test = "test-split"``, which the config allows with partition 'half-classes' only)."""
    return _test_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.seed, cfg.synthetic_alpha,
                            cfg.synthetic_beta, data_options(cfg))


@lru_cache(maxsize=4)
def _test_partitions(name: str, data_dir: str, num_clients: int, seed: int, s_alpha: float,
                     s_beta: float, options: tuple = ()) -> list[np.ndarray]:
    ds = _dataset(name, data_dir, num_clients, seed, s_alpha, s_beta, options)

    def build():
        from fedapp.core.data.partitioners import half_classes_test_split

        return half_classes_test_split(ds.train_y.numpy(), ds.test_y.numpy(), num_clients, seed)
    return cached_indices("test-partitions", (num_clients, seed, ds.train_y, ds.test_y), build)


@lru_cache(maxsize=4)
def _pfedhn_partitions(name: str, data_dir: str, num_clients: int, seed: int, s_alpha: float, s_beta: float,
                       classes: int, options: tuple = ()) -> tuple:
    ds = _dataset(name, data_dir, num_clients, seed, s_alpha, s_beta, options)

    def build():
        from fedapp.core.data.partitioners import pfedhn_partitions

        return pfedhn_partitions(ds.train_y.numpy(), ds.test_y.numpy(), num_clients, classes, seed)
    return cached_indices("pfedhn-partitions", (num_clients, classes, seed, ds.train_y, ds.test_y), build)


@dataclass
class ClientData:
    """One client's tensors: its training split and its local test split (CPU, uint8 or float)."""

    pid: int
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple
    std: tuple
    augment: bool
    unseen: bool = False
    val_x: torch.Tensor | None = None  # held-out validation examples (partition "pfedhn")
    val_y: torch.Tensor | None = None
    vocab_size: int | None = None  # text: the token ids' vocabulary

    @property
    def input_shape(self) -> tuple:
        return tuple(self.train_x.shape[1:])


def release_data() -> None:
    """Drop the cached datasets and partitions: a process that only checked a run config (the launcher,
    which stays alive for the whole run) gives their memory back."""
    for cached in (_dataset, _partitions, _test_partitions, _pfedhn_partitions):
        cached.cache_clear()


def client_data(cfg: RunConfig, pid: int, data_dir: str | None = None) -> ClientData:
    """Partition ``pid`` of the configured dataset, split into local train/test.

    ``data_dir`` (a SuperNode's own data) overrides the run config; such a site's
    whole ImageFolder tree is its partition.
    """
    if not 0 <= pid < cfg.num_clients and data_dir is None:
        raise ValueError(f"partition-id {pid} is outside 0..{cfg.num_clients - 1} (num-clients)")
    unseen = pid in unseen_clients(cfg)
    if data_dir is None and cfg.partition == "pfedhn":  # the authors' train / validation / test recipe
        ds = dataset(cfg)
        tr, va, te = (p[pid] for p in _pfedhn_partitions(cfg.dataset, cfg.data_dir, cfg.num_clients, cfg.seed,
                                                         cfg.synthetic_alpha, cfg.synthetic_beta,
                                                         cfg.partition_classes, data_options(cfg)))
        return ClientData(pid, ds.train_x[tr], ds.train_y[tr], ds.test_x[te], ds.test_y[te], ds.num_classes,
                          ds.mean, ds.std, ds.augment and cfg.data_augment, unseen, ds.train_x[va], ds.train_y[va],
                          ds.vocab_size)
    if data_dir is not None:
        ds = site_dataset(cfg, data_dir)
        idx = np.arange(len(ds.train_y))
    else:
        ds = dataset(cfg)
        idx = partitions(cfg)[pid]
    train_idx, test_idx = local_test_split(np.asarray(idx), cfg.test_fraction, cfg.seed * 100003 + pid)
    if data_dir is not None and len(ds.test_y):  # a site's own test folder is its local test set
        train_idx, test_x, test_y = idx, ds.test_x, ds.test_y
    elif cfg.local_test == "test-split":  # the whole partition trains; the test split is cut the same way
        te = test_partitions(cfg)[pid]
        train_idx, test_x, test_y = idx, ds.test_x[te], ds.test_y[te]
    else:
        test_x, test_y = ds.train_x[test_idx], ds.train_y[test_idx]
    return ClientData(pid, ds.train_x[train_idx], ds.train_y[train_idx], test_x, test_y,
                      ds.num_classes, ds.mean, ds.std, ds.augment and cfg.data_augment, unseen,
                      vocab_size=ds.vocab_size)


def site_dataset(cfg: RunConfig, data_dir: str) -> Dataset:
    """A SuperNode's own data (node config ``data-dir``), of the kind the run's ``dataset`` names: a
    table (train.csv / train.parquet, read with the run's column keys), the raw Shakespeare plays
    (all of the site's roles), or an ImageFolder tree for every image dataset."""
    kind = cfg.dataset if cfg.dataset in ("table", "shakespeare") else "imagefolder"
    return load_dataset(kind, data_dir, num_clients=0, seed=cfg.seed, options=data_options(cfg))


def unseen_clients(cfg: RunConfig) -> frozenset[int]:
    """Partition ids held out as new clients (never trained on)."""
    if cfg.unseen_fraction == 0:
        return frozenset()
    return frozenset(split_seen_unseen(cfg.num_clients, cfg.unseen_fraction, cfg.seed)[1])


def declared_shape(cfg: RunConfig) -> tuple[int, ...] | None:
    """The shape of one example as ``input-shape`` declares it; None where the data says."""
    return tuple(int(p) for p in cfg.input_shape.split(",")) if cfg.input_shape else None


def declared_dataset(cfg: RunConfig) -> Dataset:
    """A dataset with no examples, of the ``input-shape`` and ``num-classes`` declared: what a server
    that evaluates nothing centrally builds its model from, without data of its own."""
    shape = declared_shape(cfg)
    empty = torch.empty(0, dtype=torch.int64)
    return Dataset(cfg.dataset, torch.zeros((0, *shape)), empty, torch.zeros((0, *shape)), empty, cfg.num_classes,
                   (), (), False)


def server_reads_data(cfg: RunConfig, local: bool) -> bool:
    """Whether the server reads the configured dataset: unless it needs none (not ``local``, the clients
    elsewhere; central evaluation off; the shapes declared), when it builds from ``declared_dataset``."""
    return local or cfg.central_eval or not cfg.input_shape


def server_dataset(cfg: RunConfig, local: bool) -> Dataset:
    """The data the server holds: the configured dataset, or ``declared_dataset`` where it reads none."""
    return dataset(cfg) if server_reads_data(cfg, local) else declared_dataset(cfg)


def model_for(cfg: RunConfig, ds: Dataset | ClientData | None = None) -> torch.nn.Module:
    """The configured model for the data of ``ds`` (the dataset, or a client's data), initialised from
    the run seed (identical on server and clients). Data of another shape than ``input-shape``
    declares is refused: the server built its model for that."""
    ds = ds or dataset(cfg)
    if (shape := declared_shape(cfg)) and ds.vocab_size:
        raise ConfigError(f"run config 'input-shape' = {cfg.input_shape!r} declares image or feature data, and "
                          f"dataset {cfg.dataset!r} is text (token ids): leave it and 'num-classes' out")
    if shape and (tuple(ds.input_shape), ds.num_classes) != (shape, cfg.num_classes):
        raise ConfigError(f"run config 'input-shape' = {cfg.input_shape!r} and 'num-classes' = {cfg.num_classes} "
                          f"do not fit the data: its examples have shape {','.join(map(str, ds.input_shape))} "
                          f"and {ds.num_classes} classes")
    torch.manual_seed(cfg.seed)
    return build_model(cfg.model, ds.input_shape, ds.num_classes, vocab_size=ds.vocab_size,
                       seq_len=ds.input_shape[0] if ds.vocab_size else None, head_modules=cfg.head_modules)


def round_lr(cfg: RunConfig, server_round: int) -> float:
    """lr * decay**(round - 1); decay is the strategy's own ``<prefix>.lr-decay`` when it declares one
    and it is set (non-zero), else ``lr-decay`` (FedSMOO's paper decays FedDyn/FedSMOO and the
    other methods differently in one table)."""
    own = cfg.as_dict().get(f"{cfg.prefix}.lr-decay", 0.0)
    return cfg.lr * (own or cfg.lr_decay) ** (server_round - 1)
