"""Where a desktop's endpoints live (CONTRACT §8).

``$XDG_RUNTIME_DIR/aotui/`` or, without it, ``/tmp/aotui-$UID/``: a 0700 directory owned by the
user and not a symlink (checked, so another user cannot plant one in ``/tmp``). ``--socket`` or
``AOTUI_SOCKET`` overrides the base directory. Each desktop gets ``<base>/<desktop>/`` holding
``control.sock`` (client requests), ``signals.sock`` (PUB), ``workers/`` (one channel per worker),
``supervisor.pid`` and ``supervisor.log``.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["DesktopPaths", "app_log_dir", "base_dir", "data_home", "secure_dir", "store_path"]

_DESKTOP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def secure_dir(path: Path) -> Path:
    """Create ``path`` as a 0700 directory, or check an existing one is ours and not a symlink."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = path.lstat()
    except OSError as exc:
        raise AotuiError(
            ErrorCode.E_INTERNAL, f"cannot create runtime directory {path}: {exc}"
        ) from exc
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise AotuiError(
            ErrorCode.E_PERMISSION, f"{path} is a symlink or not a directory; refusing"
        )
    if info.st_uid != os.getuid():
        raise AotuiError(ErrorCode.E_PERMISSION, f"{path} belongs to uid {info.st_uid}; refusing")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def base_dir(override: str | None = None) -> Path:
    """The base runtime directory: ``override``, ``AOTUI_SOCKET``, XDG, or ``/tmp/aotui-UID``."""
    chosen = override or os.environ.get("AOTUI_SOCKET")
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "aotui"
    return Path(f"/tmp/aotui-{os.getuid()}")


def data_home() -> Path:
    """Where desktops are stored: ``AOTUI_HOME``, else ``$XDG_DATA_HOME/aotui``, else
    ``~/.local/share/aotui``."""
    chosen = os.environ.get("AOTUI_HOME")
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_DATA_HOME")
    return Path(xdg) / "aotui" if xdg else Path.home() / ".local" / "share" / "aotui"


def store_path(desktop: str) -> Path:
    """The SQLite file of a named desktop."""
    return data_home() / "desktops" / f"{desktop}.db"


def app_log_dir(desktop: str) -> Path:
    """Where a desktop's per-app stdout/stderr logs rotate."""
    return data_home() / "logs" / desktop


@dataclass(frozen=True)
class DesktopPaths:
    """The files of one desktop's runtime directory."""

    root: Path

    @classmethod
    def for_desktop(cls, desktop: str = "default", override: str | None = None) -> DesktopPaths:
        """Paths for ``desktop`` under the base directory (not created)."""
        if not _DESKTOP_NAME.fullmatch(desktop):
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"desktop name {desktop!r} must be letters, digits, '.', '_' or '-'",
            )
        return cls(base_dir(override) / desktop)

    def create(self) -> DesktopPaths:
        """Create the directories with safe permissions."""
        secure_dir(self.root.parent)
        secure_dir(self.root)
        secure_dir(self.workers)
        return self

    @property
    def control(self) -> str:
        """Endpoint for client requests."""
        return f"ipc://{self.root / 'control.sock'}"

    @property
    def signals(self) -> str:
        """Endpoint of the signal PUB socket."""
        return f"ipc://{self.root / 'signals.sock'}"

    @property
    def workers(self) -> Path:
        """Directory of the per-worker channels."""
        return self.root / "workers"

    @property
    def pidfile(self) -> Path:
        """The running supervisor's pid."""
        return self.root / "supervisor.pid"

    @property
    def log(self) -> Path:
        """The supervisor's log (and its workers' stdout/stderr)."""
        return self.root / "supervisor.log"
