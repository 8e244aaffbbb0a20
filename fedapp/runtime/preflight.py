"""Checks of a run config that can fail before anything is submitted.

``parse_run_config`` checks each key on its own; here the keys meet the machine, the data
and the model: a GPU that is not there, data that cannot be found or read, partitions that
cannot be made (more clients than examples, more classes per client than the dataset has),
a model that cannot take the dataset's inputs, a results folder that cannot be written, a
checkpoint that cannot be read or was written with other settings. Every failure is a one-line ConfigError naming the key.
``python -m fedapp.runtime.launch`` runs these before ``flwr run``; the ServerApp runs them too, so a
plain ``flwr run .`` fails the same way.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Mapping
from logging import INFO, WARNING
from pathlib import Path
from typing import Any

import torch
from flwr.common import log

from fedapp.runtime import checkpoint, registry
from fedapp.core.config import ConfigError, RunConfig, own_keys
from fedapp.runtime.registry import defaults, parse_run_config
from fedapp.core.data import Dataset, local_test_split, prepare, split_seen_unseen
from fedapp.core.data.sources import synthetic_bytes
from fedapp.core.data.tables import ColumnError
from fedapp.core.experiment import dataset, declared_dataset, model_for, partitions, server_reads_data


def check_device(cfg: RunConfig) -> None:
    """``device='cuda'`` needs CUDA on this machine (a simulation's clients run here)."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("run config 'device' = 'cuda' but torch finds no CUDA GPU on this machine "
                          f"(torch {torch.__version__}); use device='auto' or 'cpu'")


def memory() -> tuple[int, int]:
    """(bytes available, bytes in all) of this machine's memory: Linux's MemAvailable and MemTotal,
    elsewhere the physical memory for both."""
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
        return int(info["MemAvailable"].split()[0]) * 1024, int(info["MemTotal"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total, total


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def check_sizes(cfg: RunConfig) -> None:
    """Sizes that would exhaust the memory, refused before anything is allocated: the synthetic
    data of ``num-clients`` clients (``synthetic_bytes``, from the clients' expected size)."""
    if cfg.dataset == "synthetic":
        need, (free, total) = synthetic_bytes(cfg.num_clients), memory()
        if need > free:
            raise ConfigError(f"run config 'num-clients' = {cfg.num_clients}: the synthetic data of that many "
                              f"clients needs about {gib(need)} of memory, this machine has {gib(free)} available "
                              f"({gib(total)} in all); use fewer clients")


def load_data(cfg: RunConfig) -> Dataset:
    """The configured dataset; a failure names ``data-dir`` (or ``dataset``) and the fix."""
    try:
        ds = dataset(cfg)
    except ColumnError as err:  # a column key of a table or hub dataset, named already
        raise ConfigError(str(err)) from None
    except (OSError, ValueError) as err:  # not found, unreadable, an image that does not decode
        key = "data-dir" if cfg.data_dir and not cfg.dataset.startswith("hf:") else "dataset"
        raise ConfigError(f"run config '{key}' = {cfg[key]!r}: {str(err).strip().splitlines()[0]}") from err
    if len(ds.test_y) and ds.test_x.shape[1:] != ds.train_x.shape[1:]:
        raise ConfigError(f"run config 'dataset' = {cfg.dataset!r}: its train examples have shape "
                          f"{tuple(ds.train_x.shape[1:])} but its test examples {tuple(ds.test_x.shape[1:])}")
    return ds


def check_model(cfg: RunConfig, ds: Dataset) -> torch.nn.Module:
    """Build the configured model (a user's ``<module>:<callable>`` imported and called), run one
    forward pass on two of the dataset's examples, and let the algorithm check it (a declared head,
    a size it can generate)."""
    try:
        model = model_for(cfg, ds)
    except Exception as err:  # the user's own factory may raise anything  # noqa: BLE001
        first = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(f"run config 'model' = {cfg.model!r} cannot be built for dataset {cfg.dataset!r} "
                          f"({type(err).__name__}: {first})") from None
    try:
        model.eval()
        # a server without data (``declared_dataset``) tries zeros of the declared shape
        x = ds.train_x[:2] if len(ds.train_y) else torch.zeros((2, *ds.input_shape))
        with torch.no_grad():
            out = model(prepare(x, ds.mean, ds.std))
        # a causal language model (fedapp/core/llm.py) gives next-token logits and scores its own inputs
        shape = (len(x), ds.num_classes) if not getattr(model, "causal_lm", False) else (len(x), *out.shape[1:])
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            raise ValueError(f"it gives outputs of shape {tuple(getattr(out, 'shape', ()))}, not (batch, "
                             f"{ds.num_classes} classes)")
    except (RuntimeError, ValueError, TypeError, IndexError) as err:
        first = (str(err).strip().splitlines() or [""])[0]
        kind = "token ids" if ds.vocab_size else "inputs"
        raise ConfigError(f"run config 'model' = {cfg.model!r} cannot take dataset {cfg.dataset!r}'s {kind} of "
                          f"shape {ds.input_shape} ({first}); pick a model for that input (mlp, logreg take "
                          "feature vectors and images; lenet, cnn4, resnet20, resnet18gn need images; lstm needs "
                          "text)") from None
    registry.get(cfg.strategy).strategy.check_model(cfg, model)
    return model


def check_partitions(cfg: RunConfig, ds: Dataset) -> None:
    """The partitions can be made and every training client gets examples to train on."""
    n_train = len(ds.train_y)
    if cfg.num_clients > n_train:
        raise ConfigError(f"run config 'num-clients' = {cfg.num_clients} exceeds the {n_train} training "
                          f"examples of dataset {cfg.dataset!r}")
    if cfg.partition == "pathological" and cfg.partition_classes > ds.num_classes:
        raise ConfigError(f"run config 'partition-classes' = {cfg.partition_classes} exceeds the "
                          f"{ds.num_classes} classes of dataset {cfg.dataset!r}")
    if cfg.partition == "shards-halfnormal" and cfg.partition_shards < cfg.num_clients:
        raise ConfigError(f"run config 'partition-shards' = {cfg.partition_shards} is less than "
                          f"'num-clients' = {cfg.num_clients}: every client needs a shard")
    seen = split_seen_unseen(cfg.num_clients, cfg.unseen_fraction, cfg.seed)[0]
    if len(seen) < cfg.min_train_nodes:
        raise ConfigError(f"run config 'unseen-fraction' = {cfg.unseen_fraction} leaves {len(seen)} training "
                          f"client(s) of {cfg.num_clients}, fewer than 'min-train-nodes' = {cfg.min_train_nodes}")
    try:
        parts = partitions(cfg)
    except (ValueError, IndexError) as err:
        raise ConfigError(f"run config 'partition' = {cfg.partition!r} cannot split dataset {cfg.dataset!r} "
                          f"into 'num-clients' = {cfg.num_clients}: {str(err).strip().splitlines()[0]}") from None
    for pid in seen:
        train, _ = local_test_split(parts[pid], 0.0 if cfg.local_test == "test-split" else cfg.test_fraction, 0)
        if len(train) == 0:
            raise ConfigError(f"run config 'partition' = {cfg.partition!r} with 'num-clients' = {cfg.num_clients} "
                              f"gives client {pid} no training examples ({len(parts[pid])} in its partition); "
                              "use fewer clients or another partition")


def check_results_dir(cfg: RunConfig, base: Path | None = None) -> None:
    """``results-dir`` (relative to ``base``, default the working directory) is a folder this
    process can create and write files in."""
    path = (base or Path.cwd()) / Path(cfg.results_dir).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise ConfigError(f"run config 'results-dir' = {cfg.results_dir!r}: cannot write there "
                          f"({err.strerror or err})") from None


def check_app_dir(cfg: RunConfig) -> None:
    """``app-dir``, where set, is a folder here: a relative path read from a folder that is gone (an app
    moved since `fedapp new` wrote it) would create it anew."""
    if cfg.app_dir and not Path(cfg.app_dir).expanduser().is_dir():
        raise ConfigError(f"run config 'app-dir' = {cfg.app_dir!r} is no folder on this machine (was the app "
                          "moved?): set it to the app's folder, or run the app with `fedapp run`, which sets it")


def check_aggregation(cfg: RunConfig) -> None:
    """A robust ``aggregation`` acts on every update the strategy combines; a strategy that combines
    none refuses it. Krum's settings hold for the n clients a round samples: its scores assume
    n > 2f + 2 (Blanchard et al., 2017), and Multi-Krum averages m <= n - f replies."""
    why = registry.get(cfg.strategy).strategy.robust_refusal
    if cfg.aggregation != "mean" and why:
        raise ConfigError(f"run config 'aggregation' = {cfg.aggregation!r} is invalid for strategy {cfg.strategy!r}: "
                          f"{why}; allowed is 'mean'")
    if cfg.aggregation == "krum":
        from strategies.privacy import planned_sample

        n, f, m = planned_sample(cfg), cfg.krum_byzantine, cfg.krum_select
        if n < 3:
            raise ConfigError(f"run config 'aggregation' = 'krum' needs 3 or more clients a round (n > 2f + 2), "
                              f"not {n}")
        if n <= 2 * f + 2:
            raise ConfigError(f"run config 'krum-byzantine' = {f} is invalid with the {n} clients a round samples: "
                              f"Krum needs n > 2f + 2; allowed is 0..{(n - 3) // 2}")
        if m > n - f:
            raise ConfigError(f"run config 'krum-select' = {m} is invalid with the {n} clients a round samples and "
                              f"'krum-byzantine' = {f}: Multi-Krum averages at most n - f; allowed is 1..{n - f}")


def check_privacy(cfg: RunConfig) -> RunConfig:
    """``dp`` only where it is sound (strategies.privacy: the strategy's update is the plain mean of its
    replies' models, combined by the mean), with its accountant installed, and adaptive clipping's
    noise split possible (Flower's wrapper needs dp-clipped-count-stddev > dp-noise-multiplier / 2).
    ``dp-target-epsilon``: the run config with the noise multiplier solved for it."""
    if cfg.dp == "none":
        if cfg.dp_target_epsilon:
            raise ConfigError(f"run config 'dp-target-epsilon' = {cfg.dp_target_epsilon} needs 'dp' (a clipping "
                              "mode), not 'none'")
        return cfg
    from strategies import privacy

    if why := privacy.refusal(cfg.strategy):
        raise ConfigError(f"run config 'dp' = {cfg.dp!r} is invalid for strategy {cfg.strategy!r}: {why}; "
                          "allowed is 'none'")
    if cfg.aggregation != "mean":
        raise ConfigError(f"run config 'aggregation' = {cfg.aggregation!r} is invalid with 'dp' = {cfg.dp!r}: the "
                          "noise is calibrated to the mean's sensitivity C / n; allowed is 'mean'")
    if importlib.util.find_spec("dp_accounting") is None:
        raise ConfigError(f"run config 'dp' = {cfg.dp!r} needs the dp-accounting package for its privacy "
                          "accountant: pip install -e '.[dp]'")
    if cfg.dp_target_epsilon:
        cfg = target_noise(cfg)
    n, z = privacy.planned_sample(cfg), cfg.dp_noise_multiplier
    sigma = cfg.dp_clipped_count_stddev or n / 20
    if cfg.dp.endswith("adaptive") and z > 0 and z >= 2 * sigma:
        raise ConfigError(f"run config 'dp-clipped-count-stddev' = {cfg.dp_clipped_count_stddev} is invalid with "
                          f"'dp-noise-multiplier' = {z}: adaptive clipping needs a count noise std above z / 2 = "
                          f"{z / 2:g}" + ("" if cfg.dp_clipped_count_stddev else
                                          f" (0 takes n / 20 = {n / 20:g}, n = {n} clients a round)"))
    return cfg


def target_noise(cfg: RunConfig) -> RunConfig:
    """``cfg`` with ``dp-noise-multiplier`` solved for ``dp-target-epsilon`` over ``num-server-rounds``
    releases (``strategies.privacy.noise_for_target``), logged; refused beside a multiplier of one's own."""
    from strategies import privacy

    if cfg.dp_noise_multiplier != defaults()["dp-noise-multiplier"]:
        raise ConfigError(f"run config 'dp-target-epsilon' = {cfg.dp_target_epsilon} and 'dp-noise-multiplier' = "
                          f"{cfg.dp_noise_multiplier} both set the noise: keep one")
    z = privacy.noise_for_target(cfg.dp_target_epsilon, cfg.dp_delta, cfg.num_server_rounds)
    log(INFO, "dp: noise multiplier %.4f spends epsilon %g at delta %g over %d rounds (dp-target-epsilon)",
        z, cfg.dp_target_epsilon, cfg.dp_delta, cfg.num_server_rounds)
    return cfg.replace(dp_noise_multiplier=z)


def check_defence(cfg: RunConfig) -> None:
    """``defence = "robust"`` screens and clips the updates the strategy combines: refused where it
    combines none (``robust_refusal``), and with ``dp``, whose noise is calibrated to the mean of every
    sampled client's clipped update."""
    if cfg.defence == "none":
        return
    if why := registry.get(cfg.strategy).strategy.robust_refusal:
        raise ConfigError(f"run config 'defence' = {cfg.defence!r} is invalid for strategy {cfg.strategy!r}: "
                          f"{why}; allowed is 'none'")
    if cfg.dp != "none":
        raise ConfigError(f"run config 'defence' = {cfg.defence!r} is invalid with 'dp' = {cfg.dp!r}: the noise is "
                          "calibrated to the mean of every sampled client's update; allowed is 'none'")


def warn_foreign_keys(cfg: RunConfig) -> None:
    """One line naming the keys of other algorithms set away from their defaults: they have no
    effect on the chosen strategy. A warning, not an error: a setting file may set the keys of
    every method it compares (FedSMOO's Table 1 files), and ``flwr run`` passes every key of
    ``pyproject.toml``."""
    default = defaults()
    foreign = sorted(k for k, v in cfg.as_dict().items()
                     if "." in k and k.split(".", 1)[0] != cfg.prefix and v != default[k])
    if foreign:
        log(WARNING, "run config key(s) %s belong to other algorithms: no effect with strategy %r",
            ", ".join(f"{k}={cfg[k]!r}" for k in foreign), cfg.strategy)


def check(run_config: Mapping[str, Any], local: bool = True, base: Path | None = None) -> RunConfig:
    """Validate ``run_config`` fully, or raise ConfigError; ``local``: the clients run on this
    machine from this run config's data (a simulation), so device and partitions are checked;
    ``base``: what a relative ``results-dir`` is relative to (default: the working directory)."""
    cfg = parse_run_config(run_config)
    if own := own_keys(run_config, registry.all_keys(), registry.prefixes()):
        log(INFO, "run config key(s) %s: the app's own, which fedapp passes on and does not read", ", ".join(own))
    check_sizes(cfg)
    check_aggregation(cfg)
    cfg = check_privacy(cfg)
    check_defence(cfg)
    warn_foreign_keys(cfg)
    check_app_dir(cfg)
    check_results_dir(cfg, base)
    if local:
        check_device(cfg)
    ds = load_data(cfg) if server_reads_data(cfg, local) else declared_dataset(cfg)
    check_model(cfg, ds)
    if local:
        check_partitions(cfg, ds)
    if cfg.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError("run config 'tensorboard' = true needs the tensorboard package: "
                          "pip install -e '.[tensorboard]'")
    if cfg.tracking != "none" and importlib.util.find_spec(cfg.tracking) is None:
        raise ConfigError(f"run config 'tracking' = {cfg.tracking!r} needs the {cfg.tracking} package: "
                          f"pip install -e '.[{cfg.tracking}]'")
    if cfg.resume_from:
        checkpoint.check_compatible(checkpoint.load(cfg.resume_from), cfg, cfg.resume_from)
    return cfg
