"""Where the apps' private temporary directories live.

With per-app uids the temporary directories go in a directory of their own in the system's
temporary directory, searchable by anyone (``0711``: nobody can list it), each app's own inside
it ``0700`` and owned by its uid; each worker's filesystem view attaches only its own, at that
path (``sandbox/fsview.py``). The base's path is recorded in the runtime directory, so a desktop
killed before it could clean up has it removed at its next start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

__all__ = ["PREFIX", "forget_base", "make_base", "reachable_by_others"]

#: The name of a desktop's base directory of app temporary directories starts with this.
PREFIX = "aotui-apps-"
#: The file in the runtime's ``tmp/`` that records where the base directory is.
RECORD = "apps-tmp"


def reachable_by_others(path: str) -> bool:
    """Whether a uid owning none of ``path``'s ancestors may search down to it by name."""
    current = os.path.abspath(path)
    while True:
        try:
            mode = os.stat(current).st_mode
        except OSError:
            return False
        if not mode & stat.S_IXOTH:
            return False
        parent = os.path.dirname(current)
        if parent == current:
            return True
        current = parent


def make_base(runtime_tmp: Path) -> Path:
    """A fresh base directory for the apps' temporary directories, recorded in ``runtime_tmp``.

    ``runtime_tmp`` itself when no system temporary directory is reachable by other uids.
    """
    forget_base(runtime_tmp)
    for parent in dict.fromkeys([tempfile.gettempdir(), "/tmp", "/var/tmp"]):
        if not (os.path.isdir(parent) and reachable_by_others(parent)):
            continue
        try:
            base = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
            base.chmod(0o711)  # searchable, not listable: an app finds no other app's name
            (runtime_tmp / RECORD).write_text(str(base))
        except OSError:
            continue  # a full or read-only disk: the next, or the runtime's (apps still run)
        return base
    return runtime_tmp


def forget_base(runtime_tmp: Path) -> None:
    """Remove the base directory recorded in ``runtime_tmp`` (only one this desktop made)."""
    record = runtime_tmp / RECORD
    try:
        base = Path(record.read_text().strip())
    except (OSError, ValueError):
        return
    with contextlib.suppress(OSError):
        info = base.lstat()
        # Only a real directory of ours with our prefix: never follow what the record names.
        ours = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()
        if ours and base.name.startswith(PREFIX) and base.is_absolute():
            _remove(base)
    with contextlib.suppress(OSError):
        record.unlink()


def _remove(path: Path) -> None:
    def retry(function: object, name: str, error: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            function(name)  # type: ignore[operator]

    shutil.rmtree(path, onerror=retry)
