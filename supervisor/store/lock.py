"""One store, one supervisor: an exclusive lock held for the supervisor's whole life.

``<name>.lock`` beside the store carries a POSIX record lock (``fcntl`` ``F_SETLK``) taken by the
supervisor before it reads the store and released by the kernel when that process ends, however
it ends (kill -9 included). POSIX locks belong to a process and are not inherited across fork, so
the zygote and the workers never hold it; and ``F_GETLK`` names the holder's pid without taking
the lock, so ``aotui up`` and ``aotui desktops`` can say "held by pid N" — also when that process
is frozen and answers nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from pathlib import Path

from aotui.supervisor.store.faults import StoreHeld, StoreIOError

__all__ = ["StoreLock", "lock_holder", "lock_path"]

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid.
_FLOCK = "hhqqi4x"

#: Locks this process holds, by lock file. Closing *any* descriptor of a file drops the process's
#: POSIX locks on it, so :func:`lock_holder` must never open a file this process has locked.
_HELD: dict[Path, StoreLock] = {}


def lock_path(store: Path) -> Path:
    """The lock file of the store at ``store``."""
    return store.with_name(f"{store.stem}.lock")


def lock_holder(store: Path) -> int | None:
    """The pid of the process that holds ``store``'s lock, or ``None`` when it is free."""
    if lock_path(store) in _HELD:
        return os.getpid()
    try:
        fd = os.open(lock_path(store), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # never locked (or unreadable: then no supervisor of ours holds it either)
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        answer = fcntl.fcntl(fd, fcntl.F_GETLK, query)
    finally:
        os.close(fd)
    kind, _whence, _start, _length, pid = struct.unpack(_FLOCK, answer)
    return None if kind == fcntl.F_UNLCK else pid


class StoreLock:
    """The held lock; the kernel releases it when this process ends."""

    def __init__(self, store: Path, fd: int) -> None:
        self.store = store
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, store: Path) -> StoreLock:
        """Take the lock of ``store``; :class:`StoreHeld` naming the holder's pid if taken."""
        path = lock_path(store)
        if path in _HELD:
            return _HELD[path]
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StoreIOError(store, "locked", f"{path}: {exc.strerror or exc}") from None
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise StoreHeld(store, lock_holder(store)) from None
        # The pid in the file is only for people reading it; F_GETLK is what we trust.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        held = _HELD[path] = cls(store, fd)
        return held

    def release(self) -> None:
        """Give the lock up (normally the process just ends holding it)."""
        if self._fd is not None:
            _HELD.pop(lock_path(self.store), None)
            os.close(self._fd)
            self._fd = None
