"""Dataset sources: the LEAF Synthetic benchmark, local ImageFolder trees/archives, the HF hub,
the user's own tables and hub datasets (``tables.py``), LEAF's Shakespeare (``text.py``).

Every source ends as whole tensors (uint8 images, float32 features or integer token ids, int64
labels) so training can keep the data resident on the device and batch by indexing (see
``loader.py``) instead of decoding per step. Decoding 60k images takes seconds to minutes, so
decoded tensors are cached on disk.
"""

from __future__ import annotations

import hashlib
import math
import os
import socket
import time
from logging import INFO
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import torch
from flwr.common import log

from .images import DIGIT5_DOMAINS, SPLITS, _pil_array, _read_digit5, _read_image_tree, _stack, channel_stats
from .indices import local_test_split
from .tables import frame_arrays, load_hub, read_table_dir
from .text import _plays, derive_shakespeare, select_roles, speaking_roles

_CACHE_VERSION = "v1"  # bump when the cached layout changes, so stale files are not reused
SYNTHETIC_MAX_CLIENT_SIZE = 1000  # caps lognormal(4, 2) tails: ~240 examples per client on average


@dataclass
class Dataset:
    """A whole dataset as tensors; images are uint8 (N, C, H, W), features float32 (N, D), text token
    ids (N, L) of a signed integer type with ``vocab_size`` set (the models then take it and L)."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    augment: bool
    train_client: np.ndarray | None = None  # natural client id per example (synthetic, FEMNIST, roles, sites)
    test_client: np.ndarray | None = None
    vocab_size: int | None = None  # text: token ids are below it (id 0 is padding)
    #: the label of each class index where the data names its classes (a table's label values, an
    #: image tree's label folders); None: the classes are 0, 1, ...
    classes: tuple[str, ...] | None = None

    @property
    def input_shape(self) -> tuple:
        return tuple(self.train_x.shape[1:])


@dataclass(frozen=True)
class Source:
    """How a named dataset is read from the Hugging Face hub when it is not found locally."""

    hub_id: str | None = None
    hub_config: str | None = None
    label_key: str = "label"
    writer_key: str | None = None  # natural client id column
    augment: bool = False  # random crop + flip only where it is the standard recipe (CIFAR)


DATASETS: dict[str, Source] = {
    "synthetic": Source(),
    "cifar10": Source("uoft-cs/cifar10", augment=True),
    "cifar100": Source("uoft-cs/cifar100", label_key="fine_label", augment=True),
    "mnist": Source("ylecun/mnist"),
    "fashion_mnist": Source("zalando-datasets/fashion_mnist"),
    "svhn": Source("ufldl-stanford/svhn", "cropped_digits"),
    "femnist": Source("flwrlabs/femnist", label_key="character", writer_key="writer_id"),
    "imagefolder": Source(),
    "digit5": Source(),  # local directory only: see _read_digit5
    "shakespeare": Source(),  # LEAF's task derived from the raw plays (text.py)
    "table": Source(),  # the user's own train.csv / train.parquet (tables.py)
    # sentence-pair prompts for causal language models (fedapp/core/llm.py, the llm extra): MultiNLI from the hub,
    # and an offline stand-in made from the Shakespeare plays
    "mnli": Source(),
    "shakespeare-pairs": Source(),
}
#: the run-config keys that shape a table or hub dataset (``load_dataset``'s ``options``)
DATA_OPTIONS = ("label-column", "feature-columns", "text-column", "client-column", "seq-len",
                "global-test-fraction", "hf-split", "hf-test-split")


def load_dataset(
    name: str,
    data_dir: str = "",
    *,
    num_clients: int = 10,
    seed: int = 0,
    synthetic_alpha: float = 1.0,
    synthetic_beta: float = 1.0,
    options: tuple = (),
) -> Dataset:
    """Load ``name`` as tensors: local tree/archive first, then the hub; decoded images are cached.

    ``num_clients``, ``seed`` and the ``synthetic_*`` parameters only affect ``synthetic`` (and
    ``shakespeare``: ``num_clients`` roles drawn by ``seed``, 0 all). ``imagefolder`` reads the user's own tree:
    ``data_dir`` holds ``train/<label>/...`` and optionally ``test/<label>/...`` (or is a ``.tar.gz`` of
    that layout); ``table`` the user's train.csv / train.parquet there; ``hf:<hub id>`` a hub dataset.
    ``options``: (key, value) pairs of the run config's ``DATA_OPTIONS`` (tables and hub datasets).
    """
    opts = dict(options)
    if name.startswith("hf:"):
        hub_id = name[3:]
        arrays = _cached("hf", f"{hub_id}:{sorted(opts.items())}",
                         lambda: _read_hf(hub_id, opts))
        return _dataset_of(name, arrays, augment=False)
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; allowed: {', '.join(DATASETS)} or 'hf:<hub id>'")
    if name == "synthetic":
        return make_synthetic(num_clients, seed, synthetic_alpha, synthetic_beta)
    if name == "table":
        return _dataset_of(name, _table_arrays(data_dir, opts), augment=False)
    if name in ("mnli", "shakespeare-pairs"):
        return _dataset_of(name, _prompt_pairs(name, data_dir), augment=False)
    if name == "shakespeare":
        return _dataset_of(name, _shakespeare_arrays(data_dir, num_clients, seed), augment=False)
    reader = {"imagefolder": _imagefolder_arrays, "digit5": _digit5_arrays}.get(name, _image_arrays)
    return _dataset_of(name, reader(name, data_dir), DATASETS[name].augment)


def _table_arrays(data_dir: str, opts: dict) -> dict:
    """The user's train.csv / train.parquet (and test.*) in ``data_dir``."""
    path = Path(data_dir).expanduser()
    if not data_dir or not path.is_dir():
        raise FileNotFoundError(f"table needs data_dir pointing at a folder with train.csv or train.parquet "
                                f"(and optionally test.csv or test.parquet); got {data_dir!r}")
    # "v2": a table cached before unlabelled rows were refused is read (and refused) again
    return _cached("table", f"v2:{_fingerprint(path)}:{sorted(opts.items())}", lambda: read_table_dir(path, opts))


def _shakespeare_arrays(data_dir: str, num_clients: int, seed: int) -> dict:
    """LEAF's Shakespeare derived from the raw plays, ``num_clients`` roles drawn by ``seed``."""
    name = "shakespeare"
    dirs = search_dirs(data_dir)
    path = _find_local(name, dirs, tree="")
    if path is None and data_dir and any(Path(data_dir).expanduser().glob("*.txt")):  # a site's own plays
        path = Path(data_dir).expanduser()
    if path is None:
        raise FileNotFoundError(f"shakespeare is derived from the raw plays: <dir>/shakespeare.tar.gz, "
                                f"<dir>/shakespeare/*.txt or <dir>/*.txt; looked in {', '.join(map(str, dirs))}")
    derived = _cached(name, f"leaf-v1:{_fingerprint(path)}", lambda: derive_shakespeare(path))
    return select_roles(derived, num_clients, seed)


def _imagefolder_arrays(name: str, data_dir: str) -> dict:
    """The user's own ImageFolder tree or archive at ``data_dir``."""
    path = Path(data_dir).expanduser()
    if not data_dir or not path.exists():
        raise FileNotFoundError(
            f"imagefolder needs data_dir pointing at a directory with train/<label>/<file> "
            f"(and optionally test/<label>/<file>) or a .tar.gz of it; got {data_dir!r}"
        )
    return _cached(name, _fingerprint(path), lambda: _read_image_tree(path))


def _digit5_arrays(name: str, data_dir: str) -> dict:
    """Digit-5's five domains, from a local directory only."""
    dirs = search_dirs(data_dir)
    path = next((d / name for d in dirs if (d / name / DIGIT5_DOMAINS[0]).is_dir()), None)
    if path is None:
        raise FileNotFoundError(
            f"digit5 is read from a local directory only: <dir>/digit5/<domain>/{{train,test}}/<digit>/<file> "
            f"for the domains {', '.join(DIGIT5_DOMAINS)}; looked in {', '.join(map(str, dirs))}"
        )
    return _cached(name, _fingerprint(path), lambda: _read_digit5(path))


def _image_arrays(name: str, data_dir: str) -> dict:
    """An image dataset of ``DATASETS``: its local tree or archive, else the hub."""
    if data_dir and not Path(data_dir).expanduser().is_dir():
        raise FileNotFoundError(f"data-dir {data_dir!r} is not a directory; set it to the folder holding "
                                f"{name}/train/<label>/<file> or {name}.tar.gz")
    dirs = search_dirs(data_dir)
    path = _find_local(name, dirs)
    if path is not None:
        return _cached(name, _fingerprint(path), lambda: _read_image_tree(path))
    src = DATASETS[name]
    key = f"hub:{src.hub_id}:{src.hub_config}"
    return _cached(name, key, lambda: _read_hub(name, src, dirs))


def _prompt_pairs(name: str, data_dir: str) -> dict:
    """The token ids of ``mnli`` (from the hub) or ``shakespeare-pairs`` (from the plays), cached."""
    try:
        from fedapp.core import llm
    except ImportError as err:
        raise ValueError(f"{name} needs the llm extra (pip install -e '.[llm]'): {err}") from None
    if name == "mnli":
        def build():
            if not _hub_reachable():
                raise OSError(llm.HUB_NEEDED.format(err="no connection", what=f"the dataset {llm.MNLI_ID}"))
            return llm.read_mnli()
        return _cached(name, f"hub:{llm.MNLI_ID}:{llm.OPT_ID}", build)
    dirs = search_dirs(data_dir)
    path = _find_local("shakespeare", dirs, tree="")
    if path is None:
        raise FileNotFoundError(f"shakespeare-pairs is made from the raw plays: <dir>/shakespeare.tar.gz or "
                                f"<dir>/shakespeare/*.txt; looked in {', '.join(map(str, dirs))}")
    def build():  # each play's roles' lines
        return llm.read_shakespeare_pairs([list(speaking_roles(text).values()) for _, text in _plays(path)])
    return _cached(name, f"pairs-v1:{_fingerprint(path)}", build)


def _dataset_of(name: str, arrays: dict, augment: bool) -> Dataset:
    clients = {k: None if arrays.get(k) is None else arrays[k].numpy() for k in ("train_client", "test_client")}
    return Dataset(
        name=name,
        train_x=arrays["train_x"],
        train_y=arrays["train_y"],
        test_x=arrays["test_x"],
        test_y=arrays["test_y"],
        num_classes=int(arrays["num_classes"]),
        mean=tuple(arrays["mean"]),
        std=tuple(arrays["std"]),
        augment=augment,
        vocab_size=arrays.get("vocab_size"),
        classes=None if arrays.get("classes") is None else tuple(map(str, arrays["classes"])),
        **clients,
    )


# --------------------------------------------------------------------------- synthetic


def synthetic_mean_size() -> float:
    """Expected examples of one Synthetic client, min(floor(L) + 50, SYNTHETIC_MAX_CLIENT_SIZE) with L
    lognormal(4, 2): E[min(L, c)] = e^(mu + s^2/2) Phi((ln c - mu - s^2) / s) + c (1 - Phi((ln c - mu) / s)),
    less half an example for the floor."""
    mu, s, c = 4.0, 2.0, SYNTHETIC_MAX_CLIENT_SIZE - 50

    def phi(z: float) -> float:
        return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))

    capped = math.exp(mu + s * s / 2) * phi((math.log(c) - mu - s * s) / s) + c * (1.0 - phi((math.log(c) - mu) / s))
    return capped - 0.5 + 50


def synthetic_bytes(num_clients: int, dim: int = 60) -> int:
    """Memory ``make_synthetic`` holds at its peak for ``num_clients`` clients, from the expected client
    size: per example the float64 features and int64 label and client id drawn per client, their
    concatenation, and the float32 copy of the features."""
    per_example = 2 * (8 * dim + 8 + 8) + 4 * dim
    return int(num_clients * synthetic_mean_size() * per_example)


def make_synthetic(
    num_clients: int, seed: int, alpha: float, beta: float, dim: int = 60, classes: int = 10
) -> Dataset:
    """LEAF/FedProx Synthetic(alpha, beta): alpha shifts each client's model, beta its inputs.

    Client k: u_k ~ N(0, alpha), W_k, b_k ~ N(u_k, 1); B_k ~ N(0, beta), v_k ~ N(B_k, 1);
    x ~ N(v_k, diag(j^-1.2)); y = argmax(W_k x + b_k). Sizes lognormal(4, 2) + 50 (capped);
    each client's examples are split 80/20 into train/test.
    """
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.lognormal(4, 2, num_clients).astype(np.int64) + 50, SYNTHETIC_MAX_CLIENT_SIZE)
    u = rng.normal(0, alpha, num_clients)
    big_b = rng.normal(0, beta, num_clients)
    sd = np.arange(1, dim + 1) ** -0.6  # square root of Sigma_jj = j^-1.2
    parts: dict[str, list] = {f"{s}_{k}": [] for s in SPLITS for k in ("x", "y", "client")}
    for k, n in enumerate(sizes):
        w = rng.normal(u[k], 1, (classes, dim))
        b = rng.normal(u[k], 1, classes)
        v = rng.normal(big_b[k], 1, dim)
        x = v + rng.standard_normal((n, dim)) * sd
        y = np.argmax(x @ w.T + b, axis=1)  # softmax is monotone, so argmax of logits suffices
        n_train = int(0.8 * n)
        for split, sl in (("train", slice(0, n_train)), ("test", slice(n_train, n))):
            parts[f"{split}_x"].append(x[sl])
            parts[f"{split}_y"].append(y[sl])
            parts[f"{split}_client"].append(np.full(len(y[sl]), k, dtype=np.int64))
    cat = {k: np.concatenate(v) for k, v in parts.items()}
    return Dataset(
        name="synthetic",
        train_x=torch.from_numpy(cat["train_x"]).float(),
        train_y=torch.from_numpy(cat["train_y"]).long(),
        test_x=torch.from_numpy(cat["test_x"]).float(),
        test_y=torch.from_numpy(cat["test_y"]).long(),
        num_classes=classes,
        mean=(),
        std=(),
        augment=False,
        train_client=cat["train_client"],
        test_client=cat["test_client"],
    )


# --------------------------------------------------------------------------- locating and caching


def search_dirs(data_dir: str = "") -> list[Path]:
    """Directories searched for ``<name>/train`` or ``<name>.tar.gz``: the explicit one, else defaults."""
    if data_dir:
        return [Path(data_dir).expanduser()]
    env = os.environ.get("FEDAPP_DATA")
    dirs = [Path(env).expanduser()] if env else []
    dirs += [
        Path.home() / ".cache" / "fedapp-data",
        Path.cwd().parent / "shared" / "data",
        Path(__file__).resolve().parents[4] / "shared" / "data",
    ]
    return list(dict.fromkeys(d.resolve() for d in dirs))


def _find_local(name: str, dirs: list[Path], tree: str = "train") -> Path | None:
    """``<dir>/<name>/<tree>`` (a folder ``<dir>/<name>`` with ``tree`` '') or ``<dir>/<name>.tar.gz``."""
    for d in dirs:
        if (d / name / tree).is_dir():
            return d / name
        if (d / f"{name}.tar.gz").is_file():
            return d / f"{name}.tar.gz"
    return None


def _fingerprint(path: Path) -> str:
    """Path + size + mtime, summed over a tree, so edits to the source invalidate the cache."""
    path = path.resolve()
    stats = [path.stat()] if path.is_file() else [p.stat() for p in path.rglob("*") if p.is_file()]
    size = sum(s.st_size for s in stats)
    mtime = max((s.st_mtime_ns for s in stats), default=0)
    return f"{path}:{len(stats)}:{size}:{mtime}"


def cache_dir() -> Path:
    return Path(os.environ.get("FEDAPP_CACHE") or Path.home() / ".cache" / "fedapp").expanduser()


def _cached(name: str, key: str, build) -> dict:
    """Return ``build()``'s tensors, saved once under the cache dir; written atomically so that
    parallel simulation workers never read a half-written file.

    The tensors are memory-mapped from the file (copy-on-write), not read into each process: the
    Ray workers, the simulation process and forked local workers then share one copy of the images
    in the page cache, and the kernel can drop those pages under memory pressure and read them back."""
    digest = hashlib.sha1(f"{_CACHE_VERSION}:{name}:{key}".encode()).hexdigest()[:16]
    file = cache_dir() / f"{name}-{digest}.pt"
    if file.is_file():
        return torch.load(file, mmap=True)
    t0 = time.time()
    log(INFO, "%s: reading and decoding the dataset (once: later runs read %s)...", name, file)
    arrays = build()
    log(INFO, "%s: decoded %d training and %d test examples in %.1f s", name, len(arrays["train_y"]),
        len(arrays["test_y"]), time.time() - t0)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(f"{file.name}.{os.getpid()}.tmp")
    torch.save(arrays, tmp)
    os.replace(tmp, file)
    return torch.load(file, mmap=True)


# --------------------------------------------------------------------------- decoding


def _hub_reachable() -> bool:
    hub = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((hub.hostname, hub.port or 443), timeout=5).close()
        return True
    except OSError:
        return False


def _read_hub(name: str, src: Source, dirs: list[Path]) -> dict:
    """Download through ``datasets`` and convert to the same tensors as a local tree."""
    import datasets

    try:
        if not _hub_reachable():  # offline, the hub client retries for tens of seconds
            raise ConnectionError("the hub cannot be reached")
        splits = datasets.load_dataset(src.hub_id, src.hub_config)
    except Exception as err:  # offline, missing package extras, gated repo...: all need the same fix
        raise FileNotFoundError(
            f"dataset {name!r} was not found locally (looked for {name}/train/ and {name}.tar.gz in: "
            f"{', '.join(map(str, dirs))}) and could not be loaded from the Hugging Face hub "
            f"({src.hub_id}): {type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}. "
            f"Fix: set run config data-dir='/path' to a folder holding {name}/train/<label>/<file> or "
            f"{name}.tar.gz, set $FEDAPP_DATA, or allow hub access."
        ) from err
    train = splits["train"]
    label_feature = train.features[src.label_key]
    arrays: dict = {"train_client": None, "test_client": None}
    x, y = _hub_arrays(train, src.label_key, name)
    if src.writer_key is None:
        arrays.update(train_x=x, train_y=y)
        arrays["test_x"], arrays["test_y"] = _hub_arrays(splits["test"], src.label_key, name)
    else:  # FEMNIST ships one split: hold out 10% of every writer's examples
        _, client = np.unique(np.asarray(train[src.writer_key]), return_inverse=True)
        order = np.argsort(client, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(client))[:-1])
        tr, te = zip(*(local_test_split(g, 0.1, seed=k) for k, g in enumerate(groups)))
        tr, te = np.sort(np.concatenate(tr)), np.sort(np.concatenate(te))
        arrays.update(train_x=x[tr], train_y=y[tr], test_x=x[te], test_y=y[te])
        arrays.update(train_client=torch.from_numpy(client[tr]), test_client=torch.from_numpy(client[te]))
    arrays["num_classes"] = (
        label_feature.num_classes if isinstance(label_feature, datasets.ClassLabel) else int(y.max()) + 1
    )
    arrays["mean"], arrays["std"] = channel_stats(arrays["train_x"])
    return arrays


def _read_hf(hub_id: str, options: dict) -> dict:
    """A hub dataset's tensors: its image column decoded as images, anything else as a table."""
    train, test, opts = load_hub(hub_id, options, _hub_reachable)
    where = f"hub dataset {hub_id!r}"
    if not opts["image"]:
        return frame_arrays(train.to_pandas(), None if test is None else test.to_pandas(), opts, where)
    label = opts["label-column"]
    if test is None:
        tr, te = local_test_split(np.arange(len(train)), opts.get("global-test-fraction", 0.2), seed=0)
        train, test = train.select(np.sort(tr)), train.select(np.sort(te))
    classes = sorted(set(train[label]) | set(test[label]))
    index = {c: i for i, c in enumerate(classes)}
    arrays: dict = {"train_client": None, "test_client": None, "num_classes": len(classes),
                    "classes": [str(c) for c in classes]}
    for name, part in (("train", train), ("test", test)):
        arrays[f"{name}_x"] = hub_images(part, opts["image"], where)
        arrays[f"{name}_y"] = torch.tensor([index[v] for v in part[label]], dtype=torch.int64)
    arrays["mean"], arrays["std"] = channel_stats(arrays["train_x"])
    return arrays


def _hub_arrays(split: datasets.Dataset, label_key: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    import datasets

    image_key = next(k for k, f in split.features.items() if isinstance(f, datasets.Image))
    return hub_images(split, image_key, f"hub dataset {name}"), torch.tensor(split[label_key], dtype=torch.int64)


def hub_images(split: datasets.Dataset, image_key: str, where: str) -> torch.Tensor:
    """(N, C, H, W) uint8 of a hub split's image column."""
    return _stack([_pil_array(img) for batch in split.iter(batch_size=1024) for img in batch[image_key]], where)
