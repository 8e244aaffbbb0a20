"""Tests of fedapp.core.data: partitioners, synthetic data, loader, cache, local and hub sources."""

from __future__ import annotations

import functools
import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath

import datasets
import numpy as np
import pytest
import torch
from PIL import Image

from fedapp.core.data import (
    PARTITIONERS,
    BatchLoader,
    crop_flip,
    load_dataset,
    local_test_split,
    partition_indices,
    prepare,
    split_seen_unseen,
)
from fedapp.core.data import sources
from fedapp.core.data.partitioners import allocate

CIFAR_ARCHIVE = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10.tar.gz"
N_CLASSES, PER_CLASS = 10, 60
LABELS = np.random.default_rng(0).permutation(np.repeat(np.arange(N_CLASSES), PER_CLASS))


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path, monkeypatch):
    """Keep the user's cache and data directories out of every test."""
    monkeypatch.setenv("FEDAPP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FEDAPP_DATA", raising=False)
    monkeypatch.setattr(sources, "_hub_reachable", lambda: True)  # the fake loaders stand in for the hub


def _parts(name, seed=0, n=10, **kw):
    return partition_indices(name, LABELS, n, seed, **kw)


def _class_counts(parts):
    return [len(np.unique(LABELS[p])) for p in parts]


# --------------------------------------------------------------------------- partitioners


@pytest.mark.parametrize("name", list(PARTITIONERS))
def test_partitioner_deterministic_by_seed(name):
    kw = {"natural_ids": np.arange(len(LABELS)) % 10} if name == "natural" else {}
    a, b, c = _parts(name, 1, **kw), _parts(name, 1, **kw), _parts(name, 2, **kw)
    assert len(a) == 10 and all(p.dtype == np.int64 for p in a)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    if name not in ("label-sorted", "natural"):  # these two do not depend on the seed
        assert not all(np.array_equal(x, y) for x, y in zip(a, c))


@pytest.mark.parametrize(
    "name,kw",
    [
        ("iid", {}),
        ("dirichlet", {"alpha": 0.3}),
        ("pathological", {}),
        ("label-sorted", {}),
        ("shards-halfnormal", {"num_shards": 20, "sigma": 3.0}),
        ("quantity-halfnormal", {"sigma": 1.0}),
        ("natural", {"natural_ids": np.arange(len(LABELS)) % 10}),
    ],
)
def test_partitions_are_disjoint_and_cover(name, kw):
    allidx = np.concatenate(_parts(name, **kw))
    assert np.array_equal(np.sort(allidx), np.arange(len(LABELS)))


def test_iid_equal_sizes_all_classes():
    parts = _parts("iid")
    assert [len(p) for p in parts] == [60] * 10
    assert min(_class_counts(parts)) >= 8


def test_dirichlet_alpha_controls_skew():
    skewed, flat = _parts("dirichlet", alpha=0.05), _parts("dirichlet", alpha=1000.0)
    assert min(len(p) for p in skewed) >= 2
    assert np.mean(_class_counts(skewed)) < 5 < np.mean(_class_counts(flat))


def test_dirichlet_hsu_equal_sizes_with_replacement():
    parts = _parts("dirichlet-hsu", alpha=0.1)
    assert [len(p) for p in parts] == [len(LABELS) // 10] * 10
    allidx = np.concatenate(parts)
    assert allidx.min() >= 0 and allidx.max() < len(LABELS)
    assert len(np.unique(allidx)) < len(allidx)  # sampled with replacement
    top_share = [np.bincount(LABELS[p]).max() / len(p) for p in parts]
    flat_share = [np.bincount(LABELS[p]).max() / len(p) for p in _parts("dirichlet-hsu", alpha=1e4)]
    assert np.mean(top_share) > 0.6 > 0.3 > np.mean(flat_share)


def test_dirichlet_hsu_repeats_within_client_on_small_data():
    labels = np.array([0, 0, 1, 1, 2, 2])
    parts = partition_indices("dirichlet-hsu", labels, 1, 0, alpha=0.01)
    assert len(parts[0]) == 6 and len(np.unique(parts[0])) < 6


def test_pathological_classes_per_client():
    for c in (2, 3):
        parts = _parts("pathological", classes_per_client=c)
        assert _class_counts(parts) == [c] * 10
        assert set(np.concatenate([np.unique(LABELS[p]) for p in parts])) == set(range(N_CLASSES))


def test_label_sorted_contiguous_chunks():
    parts = _parts("label-sorted", n=20)
    assert np.array_equal(np.concatenate(parts), np.argsort(LABELS, kind="stable"))
    assert [len(p) for p in parts] == [30] * 20
    assert _class_counts(parts) == [1] * 20


def test_shards_halfnormal_sizes():
    parts = _parts("shards-halfnormal", num_shards=20, sigma=3.0)
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 30 and np.all(sizes % 30 == 0) and sizes.sum() == 600
    assert len(set(sizes)) > 1
    assert all(k <= s // 30 for k, s in zip(_class_counts(parts), sizes))  # one class per shard
    with pytest.raises(ValueError, match="num_shards"):
        _parts("shards-halfnormal", num_shards=5)


def test_quantity_halfnormal_sizes():
    sizes = [len(p) for p in _parts("quantity-halfnormal", sigma=1.0)]
    assert min(sizes) >= 10 and sum(sizes) == 600 and len(set(sizes)) > 3


def test_natural_partition_and_errors():
    ids = np.random.default_rng(1).integers(0, 5, len(LABELS)) * 7  # ids need not be 0..K-1
    parts = _parts("natural", n=5, natural_ids=ids)
    for k, p in enumerate(parts):
        assert np.array_equal(np.sort(p), np.flatnonzero(ids == 7 * k))
    with pytest.raises(ValueError, match="natural_ids"):
        _parts("natural", n=5)
    with pytest.raises(ValueError, match="5 distinct"):
        _parts("natural", n=4, natural_ids=ids)


def test_unknown_names():
    with pytest.raises(ValueError, match="allowed: iid, dirichlet"):
        _parts("nope")
    with pytest.raises(ValueError, match="'nope'.*cifar10"):
        load_dataset("nope")


def test_allocate_minimum_and_total():
    sizes = allocate(np.array([0.1, 5.0, 1.0, 0.0]), 103, minimum=3)
    assert sizes.sum() == 103 and sizes.min() >= 3 and sizes[1] == sizes.max()


def test_split_seen_unseen():
    seen, unseen = split_seen_unseen(10, 0.2, seed=3)
    assert len(unseen) == 2 and sorted(seen + unseen) == list(range(10))
    assert split_seen_unseen(10, 0.2, seed=3) == (seen, unseen)
    assert len(split_seen_unseen(10, 0.01, 0)[1]) == 1
    assert split_seen_unseen(10, 0.0, 0) == (list(range(10)), [])


def test_local_test_split():
    idx = np.arange(100, 110)
    tr, te = local_test_split(idx, 0.2, seed=5)
    assert len(tr) == 8 and len(te) == 2 and np.array_equal(np.sort(np.concatenate([tr, te])), idx)
    assert all(np.array_equal(a, b) for a, b in zip((tr, te), local_test_split(idx, 0.2, seed=5)))
    assert [len(a) for a in local_test_split(np.arange(2), 0.1, 0)] == [1, 1]


# --------------------------------------------------------------------------- synthetic


def test_synthetic_shapes_split_and_determinism():
    d = load_dataset("synthetic", num_clients=20, seed=4, synthetic_alpha=1.0, synthetic_beta=1.0)
    assert d.input_shape == (60,) and d.train_x.dtype == torch.float32 and d.train_y.dtype == torch.int64
    assert d.num_classes == 10 and d.mean == () and not d.augment
    assert len(d.train_client) == len(d.train_y) and len(d.test_client) == len(d.test_y)
    n_tr, n_te = np.bincount(d.train_client, minlength=20), np.bincount(d.test_client, minlength=20)
    assert np.all(n_tr + n_te >= 50) and np.all(n_tr == ((n_tr + n_te) * 0.8).astype(int))
    assert 0 <= int(d.train_y.min()) and int(d.train_y.max()) < 10
    again = load_dataset("synthetic", num_clients=20, seed=4)
    assert torch.equal(d.train_x, again.train_x) and torch.equal(d.test_y, again.test_y)
    assert not torch.equal(d.train_x[:50], load_dataset("synthetic", num_clients=20, seed=5).train_x[:50])


def test_synthetic_clients_have_different_label_distributions():
    d = load_dataset("synthetic", num_clients=10, seed=0)
    y = d.train_y.numpy()
    hist = np.stack([np.bincount(y[d.train_client == k], minlength=10) for k in range(10)])
    hist = hist / hist.sum(1, keepdims=True)
    tv = 0.5 * np.abs(hist[:, None] - hist[None]).sum(-1)
    assert tv.max() > 0.5
    parts = partition_indices("natural", y, 10, 0, natural_ids=d.train_client)
    assert all(np.array_equal(np.sort(p), np.flatnonzero(d.train_client == k)) for k, p in enumerate(parts))


# --------------------------------------------------------------------------- loader


def _images(n=23, c=3, hw=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, c, hw, hw), dtype=torch.uint8, generator=g)


def test_crop_flip_keeps_values():
    x = _images(5)
    four, zero = torch.full((5,), 4), torch.zeros(5, dtype=torch.long)
    yes, no = torch.ones(5, dtype=torch.bool), torch.zeros(5, dtype=torch.bool)
    assert torch.equal(crop_flip(x, four, four, no), x)
    assert torch.equal(crop_flip(x, four, four, yes), torch.flip(x, dims=[-1]))
    shifted = crop_flip(x, zero, zero, no)  # window at the top-left corner of the padded image
    assert torch.equal(shifted[:, :, 4:, 4:], x[:, :, :4, :4])
    assert shifted[:, :, :4].eq(0).all() and shifted[:, :, :, :4].eq(0).all()
    mixed = crop_flip(x, four, torch.tensor([4, 0, 8, 4, 4]), torch.tensor([True, False, False, False, True]))
    assert torch.equal(mixed[0], x[0].flip(-1)) and torch.equal(mixed[3], x[3])
    assert torch.equal(mixed[2][:, :, :4], x[2][:, :, 4:]) and mixed[2][:, :, 4:].eq(0).all()


def test_loader_epochs_cover_data_and_normalise():
    x, y = _images(23), torch.arange(23)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    g = torch.Generator().manual_seed(0)
    loader = BatchLoader(x, y, 5, device="cpu", mean=mean, std=std, generator=g)
    batches = list(loader)
    assert len(loader) == len(batches) == 5 and [len(b[1]) for b in batches] == [5, 5, 5, 5, 3]
    assert torch.equal(torch.sort(torch.cat([b[1] for b in batches])).values, y)
    bx, by = batches[0]
    expected = (x[by].float() / 255 - torch.tensor(mean).view(-1, 1, 1)) / torch.tensor(std).view(-1, 1, 1)
    assert bx.dtype == torch.float32 and torch.allclose(bx, expected, atol=1e-6)
    assert torch.allclose(prepare(x[by], mean, std), expected, atol=1e-6)
    order = torch.cat([b[1] for b in batches])
    assert not torch.equal(torch.cat([b[1] for b in loader]), order)  # reshuffled every epoch
    dropped = BatchLoader(x, y, 5, device="cpu", drop_last=True)
    assert len(dropped) == 4 and all(len(b[1]) == 5 for b in dropped)


def test_loader_augment_shapes_and_determinism():
    x, y = _images(23), torch.arange(23)
    a, b, c = (
        list(BatchLoader(x, y, 8, device="cpu", augment=True, generator=torch.Generator().manual_seed(s)))
        for s in (0, 0, 1)
    )
    assert a[0][0].shape == (8, 3, 8, 8) and a[0][0].dtype == torch.float32
    assert all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a, b))
    assert not torch.equal(a[0][0], c[0][0])
    plain = prepare(x[a[0][1]])
    assert not torch.equal(a[0][0], plain)  # augmentation changed something...
    assert torch.isin(a[0][0], torch.cat([plain.flatten(), torch.zeros(1)])).all()  # ...but only moved pixels


def test_loader_next_batch_and_sample():
    x, y = torch.randn(10, 60), torch.arange(10)
    loader = BatchLoader(x, y, 4, device="cpu", generator=torch.Generator().manual_seed(0))
    ys = [loader.next_batch()[1] for _ in range(6)]
    assert [len(b) for b in ys] == [4, 4, 2, 4, 4, 2]
    assert sorted(torch.cat(ys[:3]).tolist()) == sorted(torch.cat(ys[3:]).tolist()) == list(range(10))
    bx, by = loader.sample(7)
    assert len(set(by.tolist())) == 7 and torch.equal(bx, x[by])  # float features pass through
    assert len(loader.sample(100)[1]) == 10
    with pytest.raises(ValueError, match="no batch"):
        BatchLoader(x, y, 32, device="cpu", drop_last=True).next_batch()


# --------------------------------------------------------------------------- local sources and cache


def _write_tree(root: Path, files: dict[tuple[str, str, str], bytes]) -> Path:
    for (split, label, name), data in files.items():
        (root / split / label).mkdir(parents=True, exist_ok=True)
        (root / split / label / name).write_bytes(data)
    return root


def _png(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def _grey_tree(root: Path) -> Path:
    rng = np.random.default_rng(0)
    return _write_tree(
        root,
        {
            (s, lab, f"{i}.png"): _png(rng.integers(0, 256, (6, 5), dtype=np.uint8))
            for s in ("train", "test")
            for lab in ("7", "3")
            for i in range(3)
        },
    )


def test_cache_second_load_does_not_decode(tmp_path, monkeypatch):
    tree = _grey_tree(tmp_path / "tree")
    first = load_dataset("imagefolder", str(tree))
    assert first.input_shape == (1, 6, 5) and first.num_classes == 2 and len(first.test_y) == 6
    assert not list((tmp_path / "cache").glob("*.tmp")) and len(list((tmp_path / "cache").glob("*.pt"))) == 1

    def no_decode(path):
        raise AssertionError("decoded again")

    monkeypatch.setattr(sources, "_read_image_tree", no_decode)
    second = load_dataset("imagefolder", str(tree))
    assert torch.equal(first.train_x, second.train_x) and torch.equal(first.test_y, second.test_y)
    assert second.mean == first.mean and second.train_client is None
    assert first.classes == second.classes == ("3", "7")  # the label folders, sorted: class 0 is "3"
    (tree / "train" / "3" / "new.png").write_bytes(_png(np.zeros((6, 5), dtype=np.uint8)))
    with pytest.raises(AssertionError, match="decoded again"):  # a changed source is decoded anew
        load_dataset("imagefolder", str(tree))


def test_imagefolder_without_test_and_fedapp_data_search(tmp_path, monkeypatch):
    tree = _grey_tree(tmp_path / "data" / "mnist")
    shutil.rmtree(tree / "test")
    d = load_dataset("imagefolder", str(tree))
    assert d.test_x.shape == (0, 1, 6, 5) and len(d.test_y) == 0
    monkeypatch.setenv("FEDAPP_DATA", str(tmp_path / "data"))
    assert torch.equal(load_dataset("mnist").train_x, d.train_x)
    with pytest.raises(FileNotFoundError, match="imagefolder needs data_dir"):
        load_dataset("imagefolder", str(tmp_path / "missing"))


@functools.lru_cache(maxsize=1)
def _cifar_slice(num_classes=3, per_class=20) -> dict[str, list[tuple[str, bytes]]]:
    """First files of the first class folders of the real archive's test split, which the
    archive stores first, so only a small prefix of it is decompressed."""
    out: dict[str, list[tuple[str, bytes]]] = {}
    with tarfile.open(CIFAR_ARCHIVE, "r|gz") as tar:
        for member in tar:
            parts = PurePosixPath(member.name).parts
            if not member.isfile() or parts[1] != "test":
                continue
            if parts[2] not in out and len(out) == num_classes:
                break
            files = out.setdefault(parts[2], [])
            if len(files) < per_class:
                files.append((parts[3], tar.extractfile(member).read()))
    return out


needs_cifar = pytest.mark.skipif(
    not CIFAR_ARCHIVE.is_file(), reason=f"real CIFAR-10 archive not found at {CIFAR_ARCHIVE}"
)


def _cifar_tree(root: Path) -> Path:
    """ImageFolder tree of the real slice: 14 train / 6 test images per class, folders written in
    reverse order so that label order can only come from sorting."""
    files = {}
    for label, items in reversed(list(_cifar_slice().items())):
        for i, (name, data) in enumerate(items):
            files[("train" if i < 14 else "test", label, name)] = data
    return _write_tree(root, files)


def _expected(tree: Path, split: str):
    names = sorted(p.name for p in (tree / "train").iterdir())
    files = sorted((f.parent.name, f.name, f) for f in (tree / split).rglob("*.jpg"))
    x = np.stack([np.asarray(Image.open(f).convert("RGB")).transpose(2, 0, 1) for _, _, f in files])
    return torch.from_numpy(x), torch.tensor([names.index(label) for label, _, _ in files])


@needs_cifar
def test_imagefolder_real_cifar_slice(tmp_path):
    tree = _cifar_tree(tmp_path / "tree")
    d = load_dataset("imagefolder", str(tree))
    assert d.input_shape == (3, 32, 32) and d.num_classes == 3 and not d.augment
    assert sorted(_cifar_slice()) == ["airplane", "automobile", "bird"]
    for split in ("train", "test"):
        x, y = _expected(tree, split)
        assert torch.equal(getattr(d, f"{split}_y"), y) and torch.equal(getattr(d, f"{split}_x"), x)
    assert torch.bincount(d.train_y).tolist() == [14, 14, 14]
    pixels = d.train_x.float().div(255)
    assert np.allclose(d.mean, pixels.mean(dim=(0, 2, 3)), atol=1e-5)
    assert np.allclose(d.std, pixels.std(dim=(0, 2, 3), unbiased=False), atol=1e-5)


@needs_cifar
def test_named_dataset_from_real_archive_slice(tmp_path):
    tree = _cifar_tree(tmp_path / "tree")
    (tmp_path / "data").mkdir()
    with tarfile.open(tmp_path / "data" / "cifar10.tar.gz", "w:gz") as tar:
        tar.add(tree, arcname="cifar10")
    d = load_dataset("cifar10", str(tmp_path / "data"))
    ref = load_dataset("imagefolder", str(tree))
    assert d.augment and d.num_classes == 3
    assert torch.equal(d.train_x, ref.train_x) and torch.equal(d.test_y, ref.test_y)


# --------------------------------------------------------------------------- hub


def _hub_split(n: int, image_key: str, label_key: str, extra: dict | None = None):
    """Tiny in-memory hub split; pixel (0, 0) of image i is i so rows can be traced."""
    arrays = np.random.default_rng(n).integers(0, 256, (n, 4, 4, 3), dtype=np.uint8)
    arrays[:, 0, 0, 0] = np.arange(n)
    features = {image_key: datasets.Image(), label_key: datasets.ClassLabel(names=["a", "b", "c"])}
    columns = {image_key: [Image.fromarray(a) for a in arrays], label_key: [i % 3 for i in range(n)]}
    for key, values in (extra or {}).items():
        columns[key], features[key] = values, datasets.Value("string")
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features)), arrays


def test_hub_cifar_with_fake_loader(tmp_path, monkeypatch):
    train, train_arrays = _hub_split(12, "img", "label")
    test, _ = _hub_split(5, "img", "label")
    calls = []

    def fake_load_dataset(path, name=None, **kw):
        calls.append((path, name))
        return datasets.DatasetDict(train=train, test=test)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    d = load_dataset("cifar10", str(tmp_path))
    assert calls == [("uoft-cs/cifar10", None)]
    assert d.input_shape == (3, 4, 4) and d.num_classes == 3 and d.augment
    assert torch.equal(d.train_x, torch.from_numpy(train_arrays).permute(0, 3, 1, 2))
    assert d.train_y.tolist() == [i % 3 for i in range(12)] and len(d.test_y) == 5
    load_dataset("cifar10", str(tmp_path))  # served from the cache
    assert len(calls) == 1


def test_hub_femnist_per_writer_split(tmp_path, monkeypatch):
    writers = ["w2"] * 20 + ["w0"] * 10 + ["w1"] * 30
    train, _ = _hub_split(60, "image", "character", {"writer_id": writers})
    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, **kw: {"train": train})
    d = load_dataset("femnist", str(tmp_path))
    assert np.bincount(d.test_client).tolist() == [1, 3, 2]
    assert np.bincount(d.train_client).tolist() == [9, 27, 18]
    rows_tr, rows_te = d.train_x[:, 0, 0, 0].long().numpy(), d.test_x[:, 0, 0, 0].long().numpy()
    assert np.array_equal(np.sort(np.concatenate([rows_tr, rows_te])), np.arange(60))
    writer_index = {"w0": 0, "w1": 1, "w2": 2}
    assert all(writer_index[writers[r]] == k for r, k in zip(rows_tr, d.train_client))
    assert all(writer_index[writers[r]] == k for r, k in zip(rows_te, d.test_client))


def test_hub_unreachable_error_names_dataset_and_dirs(tmp_path, monkeypatch):
    def offline(*args, **kw):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(FileNotFoundError, match="cifar100") as info:
        load_dataset("cifar100", str(tmp_path))
    assert str(tmp_path) in str(info.value) and "data-dir" in str(info.value)
