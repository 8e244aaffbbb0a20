"""Atomic file writes: a reader never sees a half-written results, checkpoint or state file."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path


class DiskFull(OSError):
    """A write failed for lack of space; the message names the file and the space left."""


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, rename it over ``path``.

    A write that fails leaves ``path`` as it was and removes the temporary file (which would
    otherwise keep a full disk full); lack of space raises :class:`DiskFull` naming the file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            free = shutil.disk_usage(path.parent).free
            raise DiskFull(err.errno, f"no space left to write {path} ({len(data):,} bytes; {free:,} bytes free "
                                      "there)") from err
        raise
