"""Images as tensors: ImageFolder trees and archives, Digit-5's domains, their channel statistics.

Decoded to whole (N, C, H, W) uint8 tensors (``sources.load_dataset`` caches them on disk).
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path, PurePosixPath

import numpy as np
import torch
from PIL import Image

SPLITS = ("train", "test")
_GREY_MODES = {"1", "L", "LA", "I", "I;16", "F"}
DIGIT5_DOMAINS = ("mnist", "mnistm", "svhn", "syn", "usps")


def _pil_array(img: Image.Image) -> np.ndarray:
    """(H, W, C) uint8 with C = 1 for grey images and 3 otherwise."""
    a = np.asarray(img.convert("L" if img.mode in _GREY_MODES else "RGB"))
    return a[..., None] if a.ndim == 2 else a


def _decode(data: bytes, where: str) -> np.ndarray:
    try:
        return _pil_array(Image.open(io.BytesIO(data)))
    except (OSError, ValueError) as err:  # PIL's UnidentifiedImageError is an OSError
        raise ValueError(f"cannot decode image {where}: {err}") from None


def _stack(images: list[np.ndarray], where: str, channels: int = 0) -> torch.Tensor:
    """(N, C, H, W) uint8; grey images are widened to RGB when the set (or, through ``channels``,
    the other split) mixes both."""
    c = max([channels, *(a.shape[2] for a in images)])
    images = [np.repeat(a, c, axis=2) if a.shape[2] != c else a for a in images]
    if len({a.shape for a in images}) > 1:
        raise ValueError(f"images in {where} have different sizes; resize them to one size first")
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def _iter_tree(path: Path):
    """Yield (split, label, file name, encoded bytes) from an ImageFolder directory or archive.

    Archives are streamed member by member: extracting 60k small files would cost more than
    decoding them.
    """
    if path.is_file():
        with tarfile.open(path, "r:*") as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts
                if member.isfile() and len(parts) >= 3 and parts[-3] in SPLITS and parts[-1][0] != ".":
                    yield parts[-3], parts[-2], parts[-1], tar.extractfile(member).read()
        return
    for split in SPLITS:
        for label_dir in sorted(p for p in (path / split).glob("*") if p.is_dir()):
            for f in sorted(label_dir.iterdir()):
                if f.is_file() and not f.name.startswith("."):
                    yield split, label_dir.name, f.name, f.read_bytes()


def _read_image_tree(path: Path) -> dict:
    """Decode an ImageFolder tree/archive; labels index the sorted label folder names."""
    items = {s: [] for s in SPLITS}
    for split, label, fname, data in _iter_tree(path):
        items[split].append((label, fname, _decode(data, f"{path}/{split}/{label}/{fname}")))
    if not items["train"]:
        raise FileNotFoundError(f"no images under {path} in the layout train/<label>/<file>")
    names = sorted({label for s in SPLITS for label, _, _ in items[s]})
    arrays: dict = {"num_classes": len(names), "classes": names, "train_client": None, "test_client": None}
    channels = max(a.shape[2] for s in SPLITS for _, _, a in items[s])  # grey and RGB splits: both RGB
    for split in SPLITS:
        rows = sorted(items[split], key=lambda r: (r[0], r[1]))
        arrays[f"{split}_y"] = torch.tensor([names.index(r[0]) for r in rows], dtype=torch.int64)
        arrays[f"{split}_x"] = (
            _stack([r[2] for r in rows], str(path), channels)
            if rows
            else torch.zeros((0, *arrays["train_x"].shape[1:]), dtype=torch.uint8)
        )
    arrays["mean"], arrays["std"] = channel_stats(arrays["train_x"])
    return arrays


def _read_digit5(path: Path, size: int = 32) -> dict:
    """Digit-5 (MNIST, MNIST-M, SVHN, SynDigits, USPS; HCCT's feature-skew task) from
    ``path/<domain>/{train,test}/<digit>/<file>``: every image resized to size x size RGB, labels the
    digit folder names, and the domain index as each example's natural client id."""
    parts: dict[str, list] = {f"{s}_{k}": [] for s in SPLITS for k in ("x", "y", "client")}
    for d, domain in enumerate(DIGIT5_DOMAINS):
        if not (path / domain).is_dir():
            raise FileNotFoundError(f"digit5: missing domain folder {path / domain}")
        for split, label, _, data in _iter_tree(path / domain):
            img = Image.open(io.BytesIO(data)).convert("RGB").resize((size, size), Image.BILINEAR)
            parts[f"{split}_x"].append(np.asarray(img))
            parts[f"{split}_y"].append(int(label))
            parts[f"{split}_client"].append(d)
    arrays: dict = {"num_classes": 10}
    for split in SPLITS:
        arrays[f"{split}_x"] = _stack(parts[f"{split}_x"], str(path))
        arrays[f"{split}_y"] = torch.tensor(parts[f"{split}_y"], dtype=torch.int64)
        arrays[f"{split}_client"] = torch.tensor(parts[f"{split}_client"], dtype=torch.int64)
    arrays["mean"], arrays["std"] = channel_stats(arrays["train_x"])
    return arrays


def channel_stats(x: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean/std of uint8 images on the [0, 1] scale, from value histograms
    (exact, and without materialising a float copy of the whole set)."""
    values = torch.arange(256, dtype=torch.float64) / 255
    mean, std = [], []
    for c in range(x.shape[1]):
        p = torch.bincount(x[:, c].reshape(-1), minlength=256).double()
        p /= p.sum()
        m = float((p * values).sum())
        mean.append(m)
        std.append(float((p * (values - m) ** 2).sum().sqrt()))
    return mean, std
