"""Conversions between torch tensors and Flower records, and byte accounting.

A *payload* is ``{record name: {tensor name: tensor}}``: the ArrayRecords of one
message. Byte counts are taken from the records as they are sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedapp.core.compat import NUMPY_STYPE

Tensors = dict[str, torch.Tensor]
Payload = dict[str, Tensors]


def to_record(tensors: Mapping[str, torch.Tensor]) -> ArrayRecord:
    return ArrayRecord({k: v.detach().cpu() for k, v in tensors.items()})


@dataclass(frozen=True)
class Shared:
    """A payload entry that names arrays of its exchange's ``RecordStore`` instead of holding them."""

    name: str


class RecordStore:
    """The arrays several clients of one exchange receive, each under a name the strategy gives it.
    Payload entries name them (``Shared(name)``); each is converted to one ArrayRecord, on first use,
    which every message naming it carries."""

    def __init__(self, entries: Mapping[str, Mapping[str, torch.Tensor]] | None = None):
        self.entries = dict(entries or {})
        self.records: dict[str, ArrayRecord] = {}

    def tensors(self, entry: Mapping[str, torch.Tensor] | Shared) -> Mapping[str, torch.Tensor]:
        """A payload entry's arrays: its own, or those of the store entry it names."""
        if not isinstance(entry, Shared):
            return entry
        if entry.name not in self.entries:
            raise KeyError(f"a payload names shared arrays '{entry.name}', which this exchange's shared "
                           f"payloads {sorted(self.entries)} lack")
        return self.entries[entry.name]

    def record(self, entry: Mapping[str, torch.Tensor] | Shared) -> ArrayRecord:
        """A payload entry as an ArrayRecord: a named entry converted once per exchange."""
        if not isinstance(entry, Shared):
            return to_record(entry)
        if entry.name not in self.records:
            self.records[entry.name] = to_record(self.tensors(entry))
        return self.records[entry.name]


def array_numpy(a: Array) -> np.ndarray:
    """``a.numpy()`` without ``np.load``'s header parsing (a ``literal_eval`` per array, most of
    the decoding time of a small model): in a C-order .npy buffer the data is the last
    ``nbytes``. Copied, so the result is writable; other layouts take ``a.numpy()``."""
    dtype = np.dtype(a.dtype) if a.stype == NUMPY_STYPE and a.data[:8] == b"\x93NUMPY\x01\x00" else None
    if dtype is None or dtype.hasobject:
        return a.numpy()
    header = a.data[10:10 + int.from_bytes(a.data[8:10], "little")]
    if b"'fortran_order': False" not in header or repr(dtype.str).encode() not in header:
        return a.numpy()
    count = math.prod(a.shape)
    return np.frombuffer(a.data, dtype, count, len(a.data) - count * dtype.itemsize).reshape(a.shape).copy()


def from_record(record: ArrayRecord) -> Tensors:
    return {k: torch.from_numpy(array_numpy(v)) for k, v in record.items()}


def make_content(payload: Mapping[str, Mapping[str, torch.Tensor] | ArrayRecord],
                 config: Mapping | None = None, metrics: Mapping | None = None) -> RecordDict:
    """A RecordDict holding each payload entry as an ArrayRecord (reused when already one)."""
    content = RecordDict()
    for name, tensors in payload.items():
        content[name] = tensors if isinstance(tensors, ArrayRecord) else to_record(tensors)
    if config is not None:
        content["config"] = ConfigRecord(dict(config))
    if metrics is not None:
        content["metrics"] = MetricRecord(dict(metrics))
    return content


def payload_of(content: RecordDict) -> Payload:
    return {name: from_record(rec) for name, rec in content.array_records.items()}


def content_bytes(content: RecordDict) -> tuple[int, int]:
    """(bytes, parameters) of the arrays in one message's content."""
    nbytes = params = 0
    for rec in content.array_records.values():
        nbytes += rec.count_bytes()
        params += sum(_numel(a.shape) for a in rec.values())  # from the metadata: nothing decoded
    return nbytes, params


#: bytes an Array may hold beyond its data: the .npy header (64-byte aligned; 128 for any array
#: of fewer than about 20 dimensions)
ARRAY_HEADER_SLACK = 4096


def declared_bytes(a: Array) -> int:
    """The data bytes an Array's metadata (shape, dtype) declares; 0 for a dtype numpy does not know."""
    try:
        return _numel(a.shape) * np.dtype(a.dtype).itemsize
    except TypeError:
        return 0


def oversize(content: RecordDict, bound: int) -> str | None:
    """Why ``content``'s arrays are larger than they may be, read from the records' metadata and
    byte lengths alone (nothing decoded), or None: an array holding more bytes than its shape and
    dtype declare (plus ``ARRAY_HEADER_SLACK``), or arrays declaring more than ``bound`` bytes in all."""
    total = 0
    for name, rec in content.array_records.items():
        for k, a in rec.items():
            declared = declared_bytes(a)
            if len(a.data) > declared + ARRAY_HEADER_SLACK:
                return (f"{name}/{k} holds {len(a.data)} bytes, its shape {tuple(a.shape)} and dtype {a.dtype} "
                        f"declare {declared}")
            total += declared
    if total > bound:
        return f"arrays declaring {total} bytes > {bound} expected"
    return None


def spec_bytes(spec: Mapping[str, Mapping[str, tuple[tuple[int, ...], torch.dtype]]]) -> int:
    """The data bytes of the arrays a reply spec (names -> shapes, dtypes) asks for."""
    return sum(_numel(shape) * dtype.itemsize for keys in spec.values() for shape, dtype in keys.values())


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
