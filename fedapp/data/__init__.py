"""Data layer: dataset sources, client partitioners and tensor-resident batching."""

from .loader import BatchLoader, crop_flip, prepare
from .partitioners import PARTITIONERS, local_test_split, partition_indices, pfedhn_partitions, split_seen_unseen
from .sources import DATASETS, Dataset, load_dataset

__all__ = [
    "DATASETS",
    "PARTITIONERS",
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
