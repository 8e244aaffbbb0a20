"""Replies kept on disk from their arrival until they are aggregated.

A server holds a round's replies together until it aggregates them: with FedSMOO on ResNet-18-GN
a reply carries two model-sized arrays (89 MB), so 25 clients a round took 177 MiB each (the
message and its decoded arrays), memory that grows with the clients per round. Folding each
reply into the aggregate as it arrives would change the results (a mean needs all weights and a
fixed order to give the same floats, and the robust screen needs every reply's norm), so instead
a reply's arrays go to a file as it arrives, and the aggregation reads each tensor back when it
uses it: the same bytes, decoded by the same function, so the results are bit-identical and the
memory is bounded by the model instead of the number of replies.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping

import torch
from flwr.app import Array, ArrayRecord, RecordDict

from fedapp.core.records import Payload, array_numpy


class _File:
    """An anonymous file (unlinked at creation, so it goes when the last reader does, even after
    a crash); read with ``pread``."""

    def __init__(self, directory: str | None):
        if directory:
            os.makedirs(directory, exist_ok=True)
        self.file = tempfile.TemporaryFile(prefix="fedapp-reply-", dir=directory or None)
        self.size = 0

    def append(self, data: bytes) -> int:
        offset = self.size
        self.file.write(data)
        self.size += len(data)
        return offset

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self.file.fileno(), length, offset)


class SpilledTensors(Mapping[str, torch.Tensor]):
    """One ArrayRecord's tensors, each read from the file when it is used (a fresh tensor every
    time, as ``fedapp.core.records.from_record`` would decode it); a tensor set here (the robust
    clipping's) is kept in memory. Pickled (checkpoints) as the plain dict of its tensors."""

    def __init__(self, file: _File, index: dict[str, tuple[int, int, str, tuple[int, ...], str]]):
        self._file, self._index, self._set = file, index, {}

    def array(self, key: str) -> Array:
        offset, length, dtype, shape, stype = self._index[key]
        return Array(dtype, shape, stype, self._file.read(offset, length))

    def __getitem__(self, key: str) -> torch.Tensor:
        if key in self._set:
            return self._set[key]
        return torch.from_numpy(array_numpy(self.array(key)))

    def __setitem__(self, key: str, value: torch.Tensor) -> None:
        if key not in self._index:
            raise KeyError(key)
        self._set[key] = value

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self._index)

    def __reduce__(self):
        return dict, (dict(self),)


class SpilledContent:
    """A reply's ArrayRecords written to an anonymous file in ``directory`` (None: the system's temp dir)."""

    def __init__(self, content: RecordDict, directory: str | None = None):
        self._file = _File(directory)
        self.records: dict[str, SpilledTensors] = {}
        for name, rec in content.array_records.items():
            index = {}
            for k, a in rec.items():
                index[k] = (self._file.append(a.data), len(a.data), a.dtype, tuple(a.shape), a.stype)
            self.records[name] = SpilledTensors(self._file, index)
        self._file.file.flush()

    def content(self, light: RecordDict) -> RecordDict:
        """The reply's whole content again: ``light`` (its records other than arrays) and the arrays."""
        out = RecordDict()
        for name, tensors in self.records.items():
            out[name] = ArrayRecord({k: tensors.array(k) for k in tensors})
        for name, rec in light.items():
            out[name] = rec
        return out

    def payload(self) -> Payload:
        """``fedapp.core.records.payload_of`` of the content, each tensor read when it is used."""
        return dict(self.records)


def spill(content: RecordDict, directory: str | None = None) -> tuple[RecordDict, SpilledContent]:
    """(the content without its ArrayRecords, the arrays on disk)."""
    spilled = SpilledContent(content, directory)
    light = RecordDict()
    for name, rec in content.items():
        if name not in spilled.records:
            light[name] = rec
    return light, spilled
