"""What can be wrong with a desktop's store, told apart: damage, an I/O failure, another holder.

The three call for opposite actions, so they are never confused::

    AotuiError
    ├── StoreCorrupt   E_INTERNAL  the file's content is damaged: repair salvages it (never reset)
    ├── StoreIOError   E_IO        the disk refused a read or write (full, read-only, gone): the
    │                              file is fine; fix the disk, nothing to repair
    └── StoreHeld      E_LOCKED    another supervisor (pid N) serves this desktop

:func:`from_sqlite` maps a ``sqlite3`` error to one of them by SQLite's result code; only the
codes that mean "the content is damaged" become :class:`StoreCorrupt` — anything else is I/O, so
a full disk is never answered with "repair it".
"""

from __future__ import annotations

import enum
import sqlite3
from pathlib import Path

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["StoreCorrupt", "StoreHealth", "StoreHeld", "StoreIOError", "from_sqlite"]

# SQLite primary result codes (https://sqlite.org/rescode.html).
_SQLITE_ERROR, _SQLITE_BUSY, _SQLITE_LOCKED = 1, 5, 6
_SQLITE_CORRUPT, _SQLITE_FORMAT, _SQLITE_NOTADB = 11, 24, 26
_DAMAGE = {_SQLITE_CORRUPT, _SQLITE_FORMAT, _SQLITE_NOTADB}


class StoreHealth(enum.Enum):
    """What ``aotui desktops`` says about a store."""

    #: Readable and passes SQLite's integrity check.
    OK = "ok"
    #: The content is damaged (or the file of a desktop that existed is empty or gone).
    DAMAGED = "damaged"
    #: The disk refused to read or write it; the content may well be intact.
    IO_ERROR = "io error"
    #: A supervisor holds it (its pid is named).
    HELD = "held"


class StoreCorrupt(AotuiError):
    """The desktop's store is damaged; the message says how to get out."""

    def __init__(self, path: Path, detail: str) -> None:
        name = path.stem
        super().__init__(
            ErrorCode.E_INTERNAL,
            f"the store of desktop {name!r} ({path}) cannot be read: it is damaged ({detail}). "
            f"Nothing was changed. Try `aotui desktops --repair {name}` (salvages what it can "
            f"and keeps the damaged file), or `aotui up --desktop {name} --fresh` (starts empty "
            f"and keeps the old file as {path.name}.corrupt-<time>).",
            {"path": str(path), "store": StoreHealth.DAMAGED.value},
        )


class StoreIOError(AotuiError):
    """The disk refused a read or a write of the store; nothing was changed."""

    def __init__(self, path: Path, doing: str, detail: str) -> None:
        super().__init__(
            ErrorCode.E_IO,
            f"the store of desktop {path.stem!r} ({path}) cannot be {doing}: {detail}. Nothing "
            f"was changed and the file is not damaged; free disk space or fix the disk or the "
            f"file's permissions, then retry (no repair needed).",
            {"path": str(path), "store": StoreHealth.IO_ERROR.value},
        )
        self.detail = detail


class StoreHeld(AotuiError):
    """Another supervisor serves this desktop (one store, one supervisor)."""

    def __init__(self, path: Path, pid: int | None, down: str | None = None) -> None:
        # ``down``: the command that stops it, as the caller knows it (with its --socket).
        holder = f"pid {pid}" if pid else "another process"
        super().__init__(
            ErrorCode.E_LOCKED,
            f"desktop {path.stem!r} is already served by {holder} (its store {path} is locked "
            f"by it); stop it with `{down or f'aotui down --desktop {path.stem}'}`"
            + (f", or `kill {pid}` if it does not answer" if pid else ""),
            {"path": str(path), "pid": pid, "store": StoreHealth.HELD.value},
        )
        self.pid = pid


def from_sqlite(path: Path, exc: sqlite3.Error, doing: str) -> AotuiError:
    """Our error for a ``sqlite3`` error met while ``doing`` (``read``, ``written``)."""
    code = getattr(exc, "sqlite_errorcode", None)
    primary = code & 0xFF if isinstance(code, int) else None
    if primary in _DAMAGE:
        return StoreCorrupt(path, str(exc))
    if primary == _SQLITE_ERROR and str(exc).startswith(("no such table", "no such column")):
        return StoreCorrupt(path, f"its tables are not aotui's ({exc})")
    if primary in (_SQLITE_BUSY, _SQLITE_LOCKED):
        return StoreHeld(path, None)
    return StoreIOError(path, doing, str(exc))
