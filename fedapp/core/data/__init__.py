"""Data layer: dataset sources, client partitioners and tensor-resident batching."""

from .loader import BatchLoader, crop_flip, prepare
from .indices import PARTITION_NAMES, local_test_split, split_seen_unseen
from .sources import DATASETS, Dataset, load_dataset

__all__ = [
    "DATASETS",
    "PARTITIONERS",
    "PARTITION_NAMES",
    "BatchLoader",
    "Dataset",
    "crop_flip",
    "load_dataset",
    "local_test_split",
    "partition_indices",
    "pfedhn_partitions",
    "prepare",
    "split_seen_unseen",
]


def __getattr__(name: str):
    """The partitioners when first used: they bring Hugging Face datasets and flwr-datasets (pandas,
    matplotlib), which a client process does not need (``indices.py``)."""
    if name in ("PARTITIONERS", "partition_indices", "pfedhn_partitions"):
        from . import partitioners

        return getattr(partitioners, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
