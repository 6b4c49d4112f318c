"""A full disk, for real: a filler file takes every free byte of a small filesystem.

Only a filesystem of at most :data:`MAX_FILL_BYTES` is filled (the tmpfs ``aotui chaos run``
mounts for the store, or one a test mounts for an app's grant): a plan can never fill a real
disk. Removing the filler frees the space again.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["FILLER_NAME", "MAX_FILL_BYTES", "fill", "unfill"]

#: The largest filesystem a disk_full fault fills.
MAX_FILL_BYTES = 256 << 20
#: The filler file's name in the filled directory.
FILLER_NAME = ".aotui-chaos-filler"


def fill(directory: Path) -> int:
    """Fill ``directory``'s filesystem to the last byte; returns the bytes written."""
    info = os.statvfs(directory)
    total = info.f_blocks * info.f_frsize
    if total > MAX_FILL_BYTES:
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"disk_full: {directory} is on a filesystem of {total >> 20} MiB, over the "
            f"{MAX_FILL_BYTES >> 20} MiB a chaos run may fill; put it on a small tmpfs "
            f"(aotui chaos run mounts one for the store when run as root)",
            {"path": str(directory)},
        )
    written = 0
    fd = os.open(directory / FILLER_NAME, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 64 << 10, 4 << 10, 512, 1):
            chunk = b"\0" * size
            while True:
                try:
                    written += os.write(fd, chunk)
                except OSError as exc:
                    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                        break
                    raise
    finally:
        os.close(fd)
    return written


def unfill(directory: Path) -> None:
    """Remove the filler: the space is free again."""
    with contextlib.suppress(FileNotFoundError):
        (directory / FILLER_NAME).unlink()
