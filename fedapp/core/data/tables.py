"""Tabular and text datasets from the user's own files (``dataset = "table"``) and from the Hugging Face
hub (``dataset = "hf:<hub id>"``), as the same tensors as every other source.

Columns: ``label-column`` is the label (classes: the sorted distinct values of both splits),
``client-column`` a row's natural client, ``text-column`` raw text (character ids, see ``text.py``),
``feature-columns`` the features (default: every other column). Numeric features are standardised
with the training split's mean and standard deviation (a missing value becomes the mean, 0);
categorical ones (strings, booleans) are one-hot encoded over the training split's values (a value
only the test split has is all zeros).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .indices import local_test_split
from .text import text_arrays

SUFFIXES = (".csv", ".parquet")


class ColumnError(ValueError):
    """A column key names no column (or none can be inferred): one line that names the run-config key,
    which the preflight reports as it is."""


def table_files(path: Path) -> tuple[Path, Path | None]:
    """(train file, test file or None) in the folder ``path``."""
    found = {split: next((path / f"{split}{s}" for s in SUFFIXES if (path / f"{split}{s}").is_file()), None)
             for split in ("train", "test")}
    if found["train"] is None:
        raise FileNotFoundError(f"no train.csv or train.parquet in {path}")
    return found["train"], found["test"]


def read_table(file: Path):
    """The file as a pandas DataFrame; a file that cannot be parsed is a ValueError naming it (and
    the line, where the parser says)."""
    import pandas as pd

    try:
        frame = pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
    except (ValueError, OSError, UnicodeDecodeError, pd.errors.ParserError) as err:  # pyarrow's errors too
        raise ValueError(f"cannot parse {file}: {' '.join(str(err).split())}") from None
    if frame.empty:
        raise ValueError(f"cannot parse {file}: it holds no rows")
    return frame


def _column(frame, key: str, options: Mapping, where: str) -> str | None:
    name = options.get(key, "")
    if name and name not in frame.columns:
        raise ColumnError(f"run config '{key}' = {name!r} is not a column of {where} (its columns: "
                          f"{', '.join(map(str, frame.columns))})")
    return name or None


def frame_arrays(train, test, options: Mapping, where: str, test_where: str | None = None) -> dict:
    """The tensors of ``load_dataset`` from a training and a test DataFrame (``test`` None: hold out
    ``global-test-fraction`` of the training rows); ``where`` and ``test_where`` name them in errors.
    A row without a label (empty or NaN) is refused: it is no class."""
    options = {"label-column": "label", **options}
    label = _column(train, "label-column", options, where)
    if label is None:
        raise ColumnError(f"run config 'label-column' = '' is invalid for {where}: name its label column")
    client = _column(train, "client-column", options, where)
    text = _column(train, "text-column", options, where)
    features = [] if text else feature_columns(train, options, (label, client), where)
    for frame, name in ((train, where), (test, test_where or f"the test split beside {where}")):
        if frame is not None and label in frame.columns and (missing := int(frame[label].isna().sum())):
            raise ColumnError(f"run config 'label-column' = {label!r}: {missing} of the {len(frame)} rows of {name} "
                              "have no label (empty or NaN); fill or drop them")
    if test is None:
        tr, te = local_test_split(np.arange(len(train)), options.get("global-test-fraction", 0.2), seed=0)
        train, test = train.iloc[np.sort(tr)], train.iloc[np.sort(te)]
    elif missing := [c for c in (label, client, text, *features) if c and c not in test.columns]:
        raise ColumnError(f"run config 'data-dir': the test split beside {where} lacks the column(s) "
                          f"{', '.join(map(str, missing))} of its training split")
    classes = sorted(set(train[label].tolist()) | set(test[label].tolist()), key=lambda v: (str(type(v)), v))
    index = {c: i for i, c in enumerate(classes)}
    arrays: dict = {"num_classes": len(classes), "classes": [str(c) for c in classes], "mean": [], "std": []}
    for split, frame in (("train", train), ("test", test)):
        arrays[f"{split}_y"] = torch.tensor([index[v] for v in frame[label].tolist()], dtype=torch.int64)
    if text:
        arrays.update(text_arrays(train[text].astype(str).tolist(), test[text].astype(str).tolist(),
                                  int(options.get("seq-len", 0))))
    else:
        arrays["train_x"], arrays["test_x"] = encode_features(train[features], test[features])
    if client is not None:  # natural client ids: the sorted distinct values of the training split
        ids = {c: i for i, c in enumerate(sorted(set(train[client].astype(str))))}
        for split, frame in (("train", train), ("test", test)):
            arrays[f"{split}_client"] = torch.tensor([ids.get(v, -1) for v in frame[client].astype(str)])
    else:
        arrays.update(train_client=None, test_client=None)
    return arrays


def feature_columns(train, options: Mapping, others: tuple, where: str) -> list[str]:
    """``feature-columns``, each checked, or every column but the label and client ones."""
    named = [c.strip() for c in options.get("feature-columns", "").split(",") if c.strip()]
    for c in named:
        _column(train, "feature-columns", {"feature-columns": c}, where)
    features = named or [c for c in train.columns if c not in others]
    if not features:
        raise ColumnError(f"run config 'feature-columns': {where} has no feature column beside the label")
    return features


def encode_features(train, test) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 (N, D) features of both splits: numeric columns standardised by the training split,
    the others one-hot over the training split's values."""
    import pandas as pd

    blocks: list[tuple[np.ndarray, np.ndarray]] = []
    for name in train.columns:
        a, b = train[name], test[name]
        if pd.api.types.is_numeric_dtype(a) and not pd.api.types.is_bool_dtype(a):
            a, b = a.astype("float64"), pd.to_numeric(b, errors="coerce").astype("float64")
            mean, std = a.mean(), a.std(ddof=0)
            mean = 0.0 if np.isnan(mean) else mean
            std = 1.0 if not std or np.isnan(std) else std
            blocks.append(tuple(((s - mean) / std).fillna(0.0).to_numpy()[:, None] for s in (a, b)))
        else:
            values = sorted(set(a.astype(str)))
            blocks.append(tuple((s.astype(str).to_numpy()[:, None] == np.array(values)[None]).astype(np.float64)
                                for s in (a, b)))
    return tuple(torch.from_numpy(np.concatenate([blk[i] for blk in blocks], 1)).float() for i in (0, 1))


def read_table_dir(path: Path, options: Mapping) -> dict:
    """``dataset = "table"``: train.csv / train.parquet (and test.csv / test.parquet) in ``path``."""
    train_file, test_file = table_files(path)
    test = read_table(test_file) if test_file else None
    return frame_arrays(read_table(train_file), test, options, str(train_file), test_file and str(test_file))


# --------------------------------------------------------------------------- Hugging Face hub


def infer_columns(features: Mapping, options: Mapping, where: str) -> dict:
    """Which hub columns are label, features, text and client: the configured ones, else inferred
    where unambiguous (the one ``ClassLabel`` is the label; the one ``Image`` column, or the one
    string column, is the input; otherwise every other numeric or string column is a feature).
    Returns the options with the columns filled in, and ``image`` naming an image column or ''."""
    import datasets

    names = list(features)
    out = dict(options)
    label = options.get("label-column", "")
    if label not in names:
        labels = [n for n, f in features.items() if isinstance(f, datasets.ClassLabel)]
        if len(labels) != 1:
            raise ColumnError(f"run config 'label-column' = {label!r} is not a column of {where} and its label "
                              f"cannot be inferred ({len(labels)} class-label columns); columns: {', '.join(names)}")
        label = labels[0]
    out["label-column"] = label
    for key in ("client-column", "text-column"):
        if options.get(key) and options[key] not in names:
            raise ColumnError(f"run config '{key}' = {options[key]!r} is not a column of {where} (its columns: "
                              f"{', '.join(names)})")
    rest = [n for n in names if n not in (label, options.get("client-column"))]
    images = [n for n in rest if isinstance(features[n], datasets.Image)]
    strings = [n for n in rest if isinstance(features[n], datasets.Value) and features[n].dtype in ("string", "large_string")]
    out["image"] = ""
    if options.get("text-column") or options.get("feature-columns"):
        return out
    if len(images) == 1:
        out["image"] = images[0]
    elif len(strings) == 1 and len(rest) == 1:
        out["text-column"] = strings[0]
    elif images:
        raise ColumnError(f"run config 'feature-columns': {where} has several image columns ({', '.join(images)}); "
                          "name the one to use")
    return out


def load_hub(hub_id: str, options: Mapping, reachable) -> tuple:
    """``dataset = "hf:<hub id>"`` through flwr-datasets' ``FederatedDataset``: (the ``hf-split``
    rows, the ``hf-test-split`` rows or None where there is no such split, the options with the
    columns inferred)."""
    where = f"hub dataset {hub_id!r}"
    if not reachable():  # offline the hub client retries for tens of seconds before it fails
        raise ConnectionError(f"{where} cannot be loaded: the Hugging Face hub cannot be reached (hf: datasets "
                              "are online only; offline, save the data as train.csv and use dataset='table')")
    from flwr_datasets import FederatedDataset

    split, test_split = options.get("hf-split", "train"), options.get("hf-test-split", "test")
    fds = FederatedDataset(dataset=hub_id, partitioners={split: 1})
    train = fds.load_split(split)
    try:
        test = fds.load_split(test_split) if test_split else None
    except ValueError:  # no such split: the fraction is held out
        test = None
    return train, test, infer_columns(train.features, options, where)
