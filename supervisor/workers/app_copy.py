"""A private copy of an app for a per-app uid that cannot read it, made without a path walk.

Only an app whose own files its per-app uid cannot read, on a filesystem that takes no idmapped
mount (``sandbox/fsview.py``), is copied. Its author owns the directory and may change it while
root copies it, so the copy trusts no name twice:

- every directory is entered by descriptor (``openat`` with ``O_DIRECTORY | O_NOFOLLOW``), so a
  directory swapped for a symlink halfway is refused, never followed;
- every entry is opened ``O_PATH | O_NOFOLLOW`` and its type taken from ``fstat`` of that very
  descriptor; a regular file is then read through it (``/proc/self/fd/N``), so what was checked
  is what is read. A symlink is copied as a symlink (it reaches only what the worker's view and
  Landlock allow); device nodes, FIFOs and sockets are refused, never opened;
- it is bounded in bytes and in entries, checked before each one is copied;
- it runs in a thread, never on the supervisor's event loop.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CopyRefused", "copy_app"]

#: The largest app copied, in bytes.
COPY_LIMIT_BYTES = 64 * 2**20
#: The most entries (files, directories, symlinks) copied.
COPY_LIMIT_ENTRIES = 10_000
#: Not copied: the app does not need its repository.
SKIPPED = frozenset({".git"})
_CHUNK = 1 << 20


class CopyRefused(Exception):
    """The app cannot be copied; ``path`` names the entry, the message what to do."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


@dataclass
class _Budget:
    bytes_left: int
    entries_left: int

    def charge(self, path: str, size: int) -> None:
        self.entries_left -= 1
        self.bytes_left -= size
        if self.entries_left < 0:
            raise CopyRefused(path, f"it has more than {COPY_LIMIT_ENTRIES:,} files")
        if self.bytes_left < 0:
            raise CopyRefused(path, f"it is larger than {COPY_LIMIT_BYTES // 2**20} MiB")


_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def copy_app(source: Path, copy: Path, uid: int, gid: int) -> None:
    """Copy ``source`` into the new directory ``copy``, owned by ``uid``/``gid``, read-only
    (directories 0500, files 0400); raises :class:`CopyRefused` naming what stopped it (the
    partial copy is left for the caller to remove)."""
    budget = _Budget(COPY_LIMIT_BYTES, COPY_LIMIT_ENTRIES)
    src = os.open(source, _DIRECTORY)
    try:
        os.mkdir(copy, 0o700)
        dst = os.open(copy, _DIRECTORY)
        try:
            _copy_dir(src, dst, str(source), budget, uid, gid)
            _hand_over(dst, uid, gid, 0o500)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _hand_over(fd: int, uid: int, gid: int, mode: int) -> None:
    """Give the copied entry ``fd`` to the app's ids, read-only (directories searchable)."""
    os.fchown(fd, uid, gid)
    os.fchmod(fd, mode)


def _copy_dir(src: int, dst: int, name: str, budget: _Budget, uid: int, gid: int) -> None:
    with os.scandir(src) as entries:
        names = sorted(entry.name for entry in entries)
    for entry in names:
        if entry in SKIPPED:
            continue
        path = f"{name}/{entry}"
        try:
            handle = os.open(entry, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
        except FileNotFoundError:
            continue  # removed while we copied: not part of the app any more
        try:
            info = os.fstat(handle)
            if stat.S_ISLNK(info.st_mode):
                budget.charge(path, 0)
                os.symlink(os.readlink(entry, dir_fd=src), entry, dir_fd=dst)
                os.chown(entry, uid, gid, dir_fd=dst, follow_symlinks=False)
            elif stat.S_ISDIR(info.st_mode):
                budget.charge(path, 0)
                try:
                    inner = os.open(entry, _DIRECTORY, dir_fd=src)
                except (FileNotFoundError, NotADirectoryError) as exc:
                    raise CopyRefused(path, "it changed while it was being copied") from exc
                except OSError as exc:
                    if exc.errno != errno.ELOOP:  # a symlink swapped in: O_NOFOLLOW refused it
                        raise
                    raise CopyRefused(path, "it changed while it was being copied") from exc
                try:
                    if os.fstat(inner)[:2] != info[:2]:  # swapped since the O_PATH open
                        raise CopyRefused(path, "it changed while it was being copied")
                    os.mkdir(entry, 0o700, dir_fd=dst)
                    out = os.open(entry, _DIRECTORY, dir_fd=dst)
                    try:
                        _copy_dir(inner, out, path, budget, uid, gid)
                        _hand_over(out, uid, gid, 0o500)
                    finally:
                        os.close(out)
                finally:
                    os.close(inner)
            elif stat.S_ISREG(info.st_mode):
                budget.charge(path, info.st_size)
                _copy_file(handle, entry, dst, path, budget, uid, gid)
            else:
                device = stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                kind = "a device node" if device else "a FIFO or a socket"
                raise CopyRefused(path, f"it holds {kind}, which is never copied")
        finally:
            os.close(handle)


def _copy_file(
    handle: int, entry: str, dst: int, path: str, budget: _Budget, uid: int, gid: int
) -> None:
    """Read the regular file ``handle`` (an ``O_PATH`` descriptor) into ``entry`` of ``dst``."""
    # Reopening the descriptor's own inode through /proc: no name is looked up again.
    reader = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(reader).st_mode):
            raise CopyRefused(path, "it changed while it was being copied")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        writer = os.open(entry, flags, 0o600, dir_fd=dst)
        try:
            declared = os.fstat(reader).st_size
            copied = 0
            while chunk := os.read(reader, _CHUNK):
                copied += len(chunk)
                if copied > declared:  # it grows while we read: charged as it comes
                    budget.charge(path, len(chunk))
                    budget.entries_left += 1
                os.write(writer, chunk)
            _hand_over(writer, uid, gid, 0o400)
        finally:
            os.close(writer)
    finally:
        os.close(reader)
