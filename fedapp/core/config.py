"""One typed, validated view of ``context.run_config``.

Every run setting is declared once here (common keys) or by its strategy class
(algorithm keys, under the algorithm's own prefix such as ``fedsmoo.rho``), with
a type, a default and a check. ``pyproject.toml`` mirrors these defaults; a test
keeps the two in sync. Bad input raises :class:`ConfigError` naming the key and
the allowed values before any training starts.

This module parses the common keys and knows no algorithm: ``fedapp.runtime.registry.parse_run_config``
adds every registered algorithm's keys (and the strategy names) and parses a whole run config.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A run-config value is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class Key:
    """One run-config setting: its type, default, allowed values and meaning."""

    name: str
    type: type
    default: Any
    doc: str
    choices: tuple | Callable[[], Iterable[str]] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # True: value must be strictly greater than ``low``
    #: values beside ``choices``: (their description, a test of a value), e.g. a model's import path
    also: tuple[str, Callable[[str], bool]] | None = None

    def allowed(self) -> str:
        if self.choices is not None:
            choices = self.choices() if callable(self.choices) else self.choices
            return "one of " + ", ".join(repr(c) for c in sorted(choices)) + (f" or {self.also[0]}" if self.also else "")
        lo = "-inf" if self.low is None else self.low
        hi = "inf" if self.high is None else self.high
        article = "an" if self.type is int else "a"
        return f"{article} {self.type.__name__} in {'(' if self.low_open else '['}{lo}, {hi}]"

    def parse(self, value: Any, full_name: str | None = None) -> Any:
        """Coerce ``value`` to the key's type and check it, or raise ConfigError naming
        ``full_name`` (the key with its algorithm prefix, when it has one)."""
        fail = ConfigError(f"run config '{full_name or self.name}' = {value!r} is invalid: allowed is {self.allowed()}")
        if self.type is bool:
            if isinstance(value, str) and value.lower() in ("true", "false"):
                value = value.lower() == "true"
            if not isinstance(value, bool):
                raise fail
        elif self.type is int:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
                raise fail
            value = int(value)
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
                raise fail
            value = float(value)
        elif not isinstance(value, str):
            raise fail
        if self.choices is not None:
            choices = self.choices() if callable(self.choices) else self.choices
            if value not in choices and not (self.also and self.also[1](value)):
                raise fail
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            raise fail
        if self.high is not None and value > self.high:
            raise fail
        return value


def _datasets() -> Iterable[str]:
    from fedapp.core.data import DATASETS

    return DATASETS


def _partitions() -> Iterable[str]:
    from fedapp.core.data import PARTITION_NAMES

    return PARTITION_NAMES


def _models() -> Iterable[str]:
    from fedapp.core.models import MODELS

    return MODELS


COMMON_KEYS: tuple[Key, ...] = (
    # its choices, the registered algorithms, are added by fedapp.runtime.registry
    Key("strategy", str, "fedavg", "Algorithm: server strategy and matching client."),
    Key("num-server-rounds", int, 10, "Federated rounds (PeFLL: training steps).", low=1),
    # 2: the size of Flower's default local simulation federation, so a plain `flwr run .` works
    Key("num-clients", int, 2, "Clients (data partitions); the federation must have this many SuperNodes. "
        "Synthetic data for more clients than the memory available holds is refused.", low=1),
    Key("fraction-train", float, 1.0, "Share of the training clients sampled each round.", low=0.0, high=1.0, low_open=True),
    Key("min-train-nodes", int, 1, "Fewest valid training replies a round needs to update the model.", low=1),
    Key("fraction-evaluate", float, 1.0, "Share of clients in federated evaluation (0 turns it off).", low=0.0, high=1.0),
    Key("central-eval", bool, True, "Evaluate the global model on the global test set on the server."),
    Key("eval-every", int, 1, "Evaluate every this many rounds (and after the last).", low=1),
    Key("eval-label-mask", str, "off",
        "Label masking (PeFLL, Table 6) in federated evaluation, by the classes present in the client's "
        "training split: 'exclude' sets the other logits to -inf before the argmax and the loss (a test "
        "example of an absent class counts as wrong, with the unmasked cross-entropy as its loss); 'zero' "
        "multiplies the logits by the 0/1 presence vector, as the PeFLL authors' public code does (an absent "
        "class can still win when every present logit is negative). The server's central evaluation on the "
        "global test set is never masked (no single client's classes apply).", ("off", "exclude", "zero")),
    Key("dataset", str, "synthetic", "Data source: a built-in name, 'table' (train.csv or train.parquet in data-dir) "
        "or 'hf:<hub id>' (a Hugging Face hub dataset through flwr-datasets; online only).", _datasets,
        also=("'hf:<hub id>'", lambda v: v.startswith("hf:") and len(v) > 3)),
    Key("data-dir", str, "", "Directory with an ImageFolder tree or <name>.tar.gz archive (table: train.csv or "
        "train.parquet, optionally test.csv or test.parquet); '' searches the defaults."),
    Key("label-column", str, "label", "table and hf: the label column ('' for hf: inferred when one column is a "
        "class label)."),
    Key("feature-columns", str, "", "table and hf: comma-separated feature columns; '' every column but the label, "
        "client and text ones (hf: the one image or text column)."),
    Key("text-column", str, "", "table and hf: a column of raw text, classified as a sequence of character ids "
        "(built-in tokenizer, id 0 padding); '' none (hf: inferred when the only feature is text)."),
    Key("client-column", str, "", "table and hf: a column naming each row's client (site, writer, role), which "
        "partition 'natural' follows; '' none."),
    Key("seq-len", int, 0, "Text: token ids per example, longer texts cut, shorter ones padded; 0 the longest "
        "training text's length.", low=0),
    Key("global-test-fraction", float, 0.2, "table and hf without a test file or split: share of the rows held out "
        "as the global test split.", low=0.0, high=0.9),
    Key("hf-split", str, "train", "hf: the hub split clients train on."),
    Key("hf-test-split", str, "test", "hf: the hub split the server evaluates on; '' or a missing split holds "
        "global-test-fraction of hf-split out."),
    Key("synthetic-alpha", float, 1.0, "Synthetic(alpha, beta): model heterogeneity.", low=0.0),
    Key("synthetic-beta", float, 1.0, "Synthetic(alpha, beta): feature heterogeneity.", low=0.0),
    Key("partition", str, "natural", "Partitioner name.", _partitions),
    Key("partition-alpha", float, 0.5, "Dirichlet concentration (dirichlet, dirichlet-hsu).", low=0.0, low_open=True),
    Key("partition-classes", int, 2, "Classes per client (pathological, pathological-hsu).", low=1),
    Key("partition-shards", int, 100, "Number of label-sorted shards (shards-halfnormal).", low=1),
    Key("partition-sigma", float, 1.0, "Half-normal scale (shards-halfnormal, quantity-halfnormal).", low=0.0, low_open=True),
    Key("data-augment", bool, True, "Random crop + flip in local training where it is the dataset's recipe (CIFAR); "
        "false trains on the images as they are (PeFLL's and pFedHN's code)."),
    Key("augment-recipe", str, "standard", "With data-augment: 'standard' shifts every image by the random "
        "4-pixel pad-and-crop (black border) and flips half (torchvision's RandomCrop + RandomHorizontalFlip); "
        "'fl-simulator' flips half, then pads-and-crops half, padded after normalisation (mean-colour border), "
        "as FedSMOO's authors' simulator.", ("standard", "fl-simulator")),
    Key("unseen-fraction", float, 0.0, "Share of clients held out as new clients that never train.", low=0.0, high=0.9),
    Key("test-fraction", float, 0.2, "Share of each client's data kept as its local test split.", low=0.0, high=0.99),
    Key("local-test", str, "split", "Where a client's local test set comes from: 'split' keeps test-fraction of its "
        "partition; 'test-split' cuts the dataset's test split with the same partitioner (partition 'half-classes' "
        "only: its class shares are fixed) and the client trains on its whole partition.", ("split", "test-split")),
    Key("model", str, "mlp", "Model: a built-in name, or '<module>:<callable>', any importable callable that "
        "returns a torch.nn.Module, called as callable(input_shape, num_classes) (text: also vocab_size=, "
        "seq_len=), or as callable() where it takes no argument (a quickstart's Net); input shape and class "
        "count follow the dataset.", _models,
        also=("'<module>:<callable>'", lambda v: v.count(":") == 1 and all(v.split(":")))),
    Key("input-shape", str, "", "Shape of one example ('3,32,32' for images, '784' for features): with "
        "num-classes, a server that evaluates nothing centrally (central-eval = false) builds the model from "
        "these instead of loading data of its own (a deployment's server); every client's data must have this "
        "shape. '' follows the dataset.", ("",),
        also=("comma-separated positive integers", lambda v: all(p.strip().isdigit() and int(p) > 0
                                                                  for p in v.split(",")))),
    Key("num-classes", int, 0, "Classes the model outputs, with input-shape; 0 follows the dataset.", low=0),
    Key("head-modules", str, "", "Comma-separated names of the model's head modules, where an algorithm splits "
        "body and head (FedALS, FedRep, HCCT-P); '' the model's own `head` declaration, or the last layer of a "
        "built-in model."),
    Key("local-epochs", int, 1, "Local epochs per round (used when local-steps is 0).", low=1),
    Key("local-steps", int, 0, "Local SGD steps per round; 0 means use local-epochs.", low=0),
    Key("batch-size", int, 32, "Local minibatch size.", low=1),
    Key("lr", float, 0.05, "Local learning rate.", low=0.0, low_open=True),
    Key("lr-decay", float, 1.0, "Learning rate multiplier per round: lr * lr-decay**(round-1).", low=0.0, high=1.0, low_open=True),
    Key("momentum", float, 0.0, "Local SGD momentum.", low=0.0, high=1.0),
    Key("weight-decay", float, 0.0, "Local SGD weight decay (adamw: the decoupled weight decay).", low=0.0),
    Key("optimizer", str, "sgd", "Local optimiser: sgd (momentum, weight-decay), adamw (torch's AdamW: adam-beta1, "
        "adam-beta2, adam-eps, weight-decay) or adamw-authors (the same as transformers' old AdamW computes it, the "
        "FedALS authors' LLM code); AdamW's moments stay on the client between rounds.",
        ("sgd", "adamw", "adamw-authors")),
    Key("adam-beta1", float, 0.9, "adamw: beta1, the first moment's decay.", low=0.0, high=1.0),
    Key("adam-beta2", float, 0.999, "adamw: beta2, the second moment's decay.", low=0.0, high=1.0),
    Key("adam-eps", float, 1e-8, "adamw: eps, added to the second moment's root.", low=0.0, low_open=True),
    Key("lr-schedule", str, "constant", "Learning rate of each local iteration: constant (the round's lr) or "
        "fedals-inverse, lr / (t/100 + 10) at the client's local iteration t, counted over its rounds (FedALS, "
        "Appendix E.2).", ("constant", "fedals-inverse")),
    Key("grad-clip", float, 0.0, "Clip each local step's gradient, after the algorithm's correction terms and before "
        "the optimizer's weight decay, to this l2 norm (FedSMOO's authors' simulator: 10); 0: off.", low=0.0),
    Key("seed", int, 0, "Seed for data, initial model and client sampling.", low=0),
    Key("device", str, "auto", "Training device: auto (cuda when present), cpu or cuda.", ("auto", "cpu", "cuda")),
    Key("num-threads", int, 0, "Torch threads per client; 0: the CPUs a simulated client is given (num-cpus), else torch's default.", low=0),
    Key("channels-last", bool, True, "Train on image batches laid out channels-last (NHWC) on CPU, where convolutions "
        "run faster on them (evaluation always does); the numbers differ from NCHW's in float rounding only. false: "
        "NCHW, the layout of the runs stored before this key existed."),
    Key("local-workers", int, 1, "In-process engine (fedapp.runtime.inprocess): 1 runs an exchange's clients one after "
        "another in this process, n > 1 in n worker processes (same results), 0 one per CPU.", low=0),
    Key("round-timeout", float, 600.0, "Seconds to wait for replies in one exchange.", low=0.0, low_open=True),
    Key("node-wait-timeout", float, 120.0, "Seconds to wait for num-clients nodes to connect.", low=0.0),
    Key("site-keys", str, "", "Deployment: TOML table on the SuperLink's machine binding each SuperNode public key "
        "to its partition-id and site name (fedapp/server/sites.py); '' none: with SuperNode authentication each "
        "partition is bound to the first key that claims it, for the rest of the run; without, the first node to "
        "claim a partition serves it."),
    Key("results-dir", str, "results", "Where each run writes its folder of results (absolute for deployments)."),
    Key("app-dir", str, "", "The app's folder: a relative data-dir, results-dir, resume-from, state-spill-dir or "
        "site-keys is read from there; '' from the working directory of the ServerApp and each ClientApp. `fedapp "
        "new` writes the folder it makes, `fedapp run` the folder it runs."),
    Key("run-name", str, "", "Name of the run's results folder; '' makes strategy-dataset-timestamp."),
    Key("tensorboard", bool, False, "Also log every round's metrics for TensorBoard under the run folder's "
        "tensorboard/ (needs the tensorboard extra: pip install -e '.[tensorboard]')."),
    Key("tracking", str, "none", "Also log every round's row, the run config and the final model to an experiment "
        "tracker: mlflow (extra mlflow; MLFLOW_TRACKING_URI, else results-dir/.mlflow/mlflow.db) or wandb (extra wandb; "
        "WANDB_PROJECT, WANDB_MODE=offline as W&B reads them).", ("none", "mlflow", "wandb")),
    Key("state-memory-mb", float, 2048.0, "Memory for all clients' persistent state: a client whose state times num-clients exceeds it keeps it on disk (0: never).", low=0.0),
    Key("state-spill-dir", str, "", "Directory for spilled client state; '' is fedapp-state under the system's temp dir."),
    Key("reply-memory-mb", float, 2048.0, "Memory for one exchange's replies at the server: when the replies together would exceed it, each goes to a file in state-spill-dir (or the system's temp dir) as it arrives, and is read back as it is aggregated (0: always).", low=0.0),
    Key("checkpoint-every", int, 1, "Write the server's full state to the run folder every this many rounds (0: never).", low=0),
    Key("resume-from", str, "", "Checkpoint file (or run folder holding checkpoint.pt) to continue a run from."),
    Key("keep-client-state", bool, False, "Keep the clients' state (state-dir, spill files) when the run has "
        "finished, so it can be resumed with more rounds; false removes it at the end of the run."),
    Key("max-empty-rounds", int, 3, "Stop the run (failed) after this many rounds in a row without a valid "
        "training reply (0: never; a run's first round without one always stops it).", low=0),
    Key("fault-fraction", float, 0.0, "Share of clients whose training/evaluation replies are faulty (fault injection).", low=0.0, high=1.0),
    Key("fault-kind", str, "raise", "Injected fault: raise, stall (past round-timeout), wrong-shape, nan, inf, "
        "or an attack: scale (updates times 1e30), negate (times -10), sign-flip (times -1), noise (Gaussian, "
        "of the model's norm), alie (a little is enough), collude (one direction shared by every attacker, at 2.9 "
        "times the update's norm), honest-noise (the update plus Gaussian noise of its norm) or num-examples (an "
        "inflated example count).",
        ("raise", "stall", "wrong-shape", "nan", "inf", "scale", "negate", "sign-flip", "noise", "alie", "collude",
         "honest-noise", "num-examples")),
    # robust aggregation (fedapp/server/screens.py): what a poisoned reply can do to the model. Off by default:
    # a run that sets none of these is the named algorithm exactly
    Key("defence", str, "none", "Defence against poisoned training replies: none (the algorithm exactly) or robust "
        "(the direction screen, and every record of every reply clipped to 3 times the round's lower median update "
        "norm of that record; docs/reliability.md). Refused where the strategy combines no updates.", ("none", "robust")),
    Key("screen-factor", float, 0.0, "Scale a training reply's update of each record whose norm exceeds this many "
        "times the exchange's lower median norm of that record down to that bound (3 replies or more; counted "
        "in clipped-replies; 0: off; defence robust: 3).", low=0.0),
    Key("screen-direction", bool, False, "Drop a training reply whose model update is an outlier below the "
        "round's cosines with the coordinate-wise median of the other replies' updates (among those sent the "
        "same model, 3 or more) and either points against it beyond chance or, where the round's replies share "
        "a direction, no closer to it than a random direction (defence robust: on)."),
    Key("clip-norm", float, 0.0, "Scale every training reply's update down to at most this L2 norm (0: off).", low=0.0),
    Key("clip-median", float, 0.0, "Scale every training reply's update of each record down to at most this many "
        "times the exchange's lower median norm of that record (centered clipping at an adaptive radius; 0: off).", low=0.0),
    Key("aggregation", str, "mean", "How replies are combined: mean (the algorithm's own), median "
        "(coordinate-wise), trimmed-mean or krum.", ("mean", "median", "trimmed-mean", "krum")),
    Key("trim-fraction", float, 0.2, "trimmed-mean: share of replies cut at each end of every coordinate, "
        "in [0, 0.5).", low=0.0, high=0.5),
    Key("krum-byzantine", int, 0, "krum: f, the attackers it tolerates (scores over the n - f - 2 nearest).", low=0),
    Key("krum-select", int, 1, "krum: m replies with the best scores are averaged (1: Krum, more: Multi-Krum).", low=1),
    # differential privacy (strategies/privacy.py): Flower's DP wrappers and clipping mods, epsilon by dp-accounting
    Key("dp", str, "none", "Central differential privacy of the model updates (Flower's wrappers): clipping on the "
        "server or at the clients (Flower's clipping mods), at a fixed or adaptive norm, Gaussian noise on the "
        "mean; the privacy spent is the rounds' dp-epsilon column. A strategy it is not sound for refuses it.",
        ("none", "server-fixed", "server-adaptive", "client-fixed", "client-adaptive")),
    Key("dp-noise-multiplier", float, 1.0, "dp: noise multiplier z; the mean of the n sampled clients' clipped "
        "updates gets Gaussian noise of std z C / n (adaptive: z covers the noised clipped count too).", low=0.0),
    Key("dp-clipping-norm", float, 1.0, "dp: L2 norm C every update is clipped to (adaptive: its initial value).",
        low=0.0, low_open=True),
    Key("dp-target-epsilon", float, 0.0, "dp: the epsilon (at dp-delta) the run may spend over its num-server-rounds: "
        "the server solves the noise multiplier for it with the accountant that counts dp-epsilon, in place of "
        "dp-noise-multiplier; 0 keeps dp-noise-multiplier.", low=0.0),
    Key("dp-delta", float, 1e-5, "dp: delta at which the rounds' dp-epsilon is reported.", low=0.0, high=0.5,
        low_open=True),
    Key("dp-target-clipped-quantile", float, 0.5, "dp adaptive: quantile of the update norms the clipping norm "
        "tracks.", low=0.0, high=1.0),
    Key("dp-clip-norm-lr", float, 0.2, "dp adaptive: learning rate of the clipping norm's geometric update.",
        low=0.0, low_open=True),
    Key("dp-clipped-count-stddev", float, 0.0, "dp adaptive: std of the noise on the count of clipped updates; "
        "0: Flower's default, sampled clients / 20.", low=0.0),
)


class RunConfig:
    """Validated run config; attribute access with '-' and '.' read as '_'.

    ``cfg.local_steps`` is ``run_config["local-steps"]``; algorithm keys are read
    with :meth:`algo` (``cfg.algo("rho")`` for ``fedsmoo.rho`` when the strategy's
    prefix is ``fedsmoo``).
    """

    def __init__(self, values: Mapping[str, Any], prefix: str):
        self._values = dict(values)
        self.prefix = prefix

    def __getattr__(self, attr: str) -> Any:
        try:
            return self._values[attr.replace("_", "-")]
        except KeyError:
            raise AttributeError(attr) from None

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def algo(self, name: str) -> Any:
        return self._values[f"{self.prefix}.{name}"]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with some keys changed (keys with '_' spelt as '-')."""
        values = dict(self._values)
        values.update({k.replace("_", "-"): v for k, v in changes.items()})
        return RunConfig(values, self.prefix)


#: the keys naming a file or folder, which a relative path reads from ``app-dir``
PATH_KEYS = ("data-dir", "results-dir", "resume-from", "state-spill-dir", "site-keys")


def resolve_paths(values: dict[str, Any]) -> None:
    """Make the relative paths of ``values`` absolute under its ``app-dir``: `flwr run` runs the ServerApp
    and the ClientApps where the local SuperLink was started, not in the app's folder."""
    if not values.get("app-dir"):
        return
    base = Path(values["app-dir"]).expanduser()
    for name in PATH_KEYS:
        if values[name] and not Path(values[name]).expanduser().is_absolute():
            values[name] = str(base / values[name])


def own_keys(run_config: Mapping[str, Any], keys: Mapping[str, Key],
             prefixes: Iterable[str] | None = None) -> list[str]:
    """The keys of ``run_config`` that belong to the app fedapp runs in, not to fedapp: ``<prefix>.<name>``
    under a prefix no algorithm has (``prefixes``; default: those of ``keys``) nor resembles
    (``myapp.batch-size``). fedapp reads none of them; the app's own code reads them from its Context.
    A key under a misspelt prefix (``pefl.k``) is not one: it is refused as unknown, with the prefix it
    resembles."""
    import difflib

    prefixes = list({k.split(".", 1)[0] for k in keys if "." in k} if prefixes is None else prefixes)
    return sorted(k for k in run_config if k not in keys and "." in k
                  and not difflib.get_close_matches(k.split(".", 1)[0], prefixes, n=1, cutoff=0.75))


def parse_common(run_config: Mapping[str, Any], keys: Mapping[str, Key] | None = None,
                 prefixes: Iterable[str] | None = None) -> RunConfig:
    """Validate ``run_config`` (missing keys take defaults) against ``keys`` (default: the common
    keys; ``fedapp.runtime.registry.parse_run_config`` passes every algorithm's too, and the algorithms'
    ``prefixes`` for ``own_keys``) into a RunConfig without an algorithm prefix.

    Raises ConfigError for an unknown key, a bad value or an inconsistent pair of common keys.
    """
    keys = {k.name: k for k in COMMON_KEYS} if keys is None else keys
    unknown = sorted(set(run_config) - set(keys) - set(own_keys(run_config, keys, prefixes)))
    if unknown:
        import difflib

        hints = "; ".join(f"{k!r}: did you mean {', '.join(map(repr, close))}?" if (
            close := difflib.get_close_matches(k, keys, n=2, cutoff=0.6)) else f"{k!r}: no such key" for k in unknown)
        raise ConfigError(f"unknown run config key(s): {hints} (python -m fedapp list shows every key)")
    values = {}
    for name, key in keys.items():
        values[name] = key.parse(run_config[name], name) if name in run_config else key.default
    resolve_paths(values)
    cfg = RunConfig(values, "")
    natural = ("synthetic", "femnist", "digit5", "shakespeare")
    if values["partition"] == "natural" and values["dataset"] not in natural and not values["client-column"]:
        raise ConfigError(
            f"run config 'partition' = 'natural' needs a dataset with natural clients "
            f"({', '.join(map(repr, natural))}, or a 'client-column'), not {values['dataset']!r}; use e.g. 'iid' "
            "or 'dirichlet'"
        )
    if cfg.min_train_nodes > cfg.num_clients:
        raise ConfigError(f"run config 'min-train-nodes' = {cfg.min_train_nodes} exceeds 'num-clients' = {cfg.num_clients}")
    if cfg.local_test == "test-split" and cfg.partition != "half-classes":
        raise ConfigError(f"run config 'local-test' = 'test-split' needs partition 'half-classes' (fixed class shares), "
                          f"not {cfg.partition!r}")
    if bool(cfg.input_shape) != bool(cfg.num_classes):
        raise ConfigError(f"run config 'input-shape' = {cfg.input_shape!r} and 'num-classes' = {cfg.num_classes} "
                          "go together: set both, or neither to follow the dataset")
    if cfg.trim_fraction >= 0.5:
        raise ConfigError(f"run config 'trim-fraction' = {cfg.trim_fraction} is invalid: allowed is a float in [0, 0.5)")
    return cfg
