"""Digit-5 (HCCT's feature-skew task) from a local directory: one natural client per domain."""

import numpy as np
import pytest
from PIL import Image

from fedapp.core.data import load_dataset, partition_indices
from fedapp.core.data.sources import DIGIT5_DOMAINS

# each domain's native image format: MNIST 28x28 grey, MNIST-M/SVHN/Syn 32x32 RGB, USPS 16x16 grey
FORMATS = {"mnist": ("L", 28), "mnistm": ("RGB", 32), "svhn": ("RGB", 32), "syn": ("RGB", 32), "usps": ("L", 16)}


def make_tree(root, per_split=(3, 1)):
    for d, domain in enumerate(DIGIT5_DOMAINS):
        mode, size = FORMATS[domain]
        for split, n in zip(("train", "test"), per_split):
            for digit in (0, 7):
                folder = root / "digit5" / domain / split / str(digit)
                folder.mkdir(parents=True)
                for k in range(n):
                    value = 40 * d + digit + k
                    Image.new(mode, (size, size), value if mode == "L" else (value, 0, 0)).save(folder / f"{k}.png")


def test_digit5_loads_every_domain_as_32px_rgb_with_domain_clients(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    make_tree(tmp_path)
    ds = load_dataset("digit5", str(tmp_path))
    assert ds.train_x.shape == (5 * 2 * 3, 3, 32, 32) and ds.test_x.shape == (5 * 2 * 1, 3, 32, 32)
    assert ds.num_classes == 10 and sorted(set(ds.train_y.tolist())) == [0, 7]
    assert np.bincount(ds.train_client).tolist() == [6] * 5
    # a grey USPS pixel becomes the same value on all three channels; MNIST-M keeps its red channel
    usps = ds.train_x[ds.train_client == 4][0]
    assert usps[:, 5, 5].tolist() == [160, 160, 160]
    mnistm = ds.train_x[ds.train_client == 1][0]
    assert mnistm[:, 5, 5].tolist() == [40, 0, 0]
    parts = partition_indices("natural", ds.train_y.numpy(), 5, 0, natural_ids=ds.train_client)
    assert [sorted(set(ds.train_client[p].tolist())) for p in parts] == [[d] for d in range(5)]


def test_digit5_missing_directory_says_where_to_put_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="digit5/<domain>"):
        load_dataset("digit5", str(tmp_path))
