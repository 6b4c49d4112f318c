"""Where a desktop's endpoints live (CONTRACT §8).

``$XDG_RUNTIME_DIR/aotui/`` or, without it, ``/tmp/aotui-$UID/``: a 0700 directory owned by the
user and not a symlink (checked, so another user cannot plant one in ``/tmp``). ``--socket`` or
``AOTUI_SOCKET`` overrides the base directory: one that exists may be shared (``/tmp``), so its
mode is never changed; it is refused only when another user could replace what is made in it.
Each desktop gets ``<base>/<desktop>/`` (0700, the user's own, not a symlink) holding
``control.sock`` (client requests), ``signals.sock`` (PUB), ``rpc.sock`` (JSON-RPC 2.0),
``workers/`` (one channel per worker), ``supervisor.pid`` and ``supervisor.log``.

A socket path longer than ``sun_path`` allows (107 bytes: a long ``$XDG_RUNTIME_DIR``, a
64-character desktop name) is bound and connected through an ``O_PATH`` descriptor of its
directory, ``/proc/self/fd/N/control.sock``: the same file in the same directory, so the endpoints
stay where CONTRACT §8 puts them and nothing is left elsewhere (see :func:`unix_address`).
"""

from __future__ import annotations

# `aotui snapshot|exec|status` import this module on every call: socket, threading and
# dataclasses (~2.5, ~1.5 and ~6 ms with what they pull in) are not loaded for it.
import contextlib
import os
import re
import stat
from _thread import allocate_lock
from pathlib import Path

from aotui.protocol.errors import AotuiError, ErrorCode

TYPE_CHECKING = False  # typing's, without importing typing (~2 ms of every CLI call)
if TYPE_CHECKING:
    from typing import NamedTuple

    class _Root(NamedTuple):
        root: Path

else:
    from collections import namedtuple

    _Root = namedtuple("_Root", ["root"])  # typing.NamedTuple's class, as the CLI can afford

__all__ = [
    "SUN_PATH_MAX",
    "DesktopPaths",
    "app_log_dir",
    "base_dir",
    "data_home",
    "is_listening",
    "secure_dir",
    "shared_dir",
    "store_path",
    "unix_address",
]

_DESKTOP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: A character a shell word must be quoted for (``shlex``'s; compiled only when a hint is made).
_SHELL_UNSAFE = r"(?a)[^\w@%+=:,./-]"

#: The longest path ``bind``/``connect`` take on an AF_UNIX socket (``sun_path`` less its NUL).
SUN_PATH_MAX = 107

# Directory descriptors behind the short addresses, one per directory for the process's life:
# a ZeroMQ socket reconnects through its address at any time, so the descriptor must outlive it.
_directory_fds: dict[Path, int] = {}
_directory_fds_lock = allocate_lock()  # threading.Lock() itself


def unix_address(path: Path) -> str:
    """An address for ``path`` that AF_UNIX ``bind``/``connect`` (and ZeroMQ ``ipc://``) accept.

    ``path`` itself when it fits in ``sun_path``; else ``/proc/self/fd/N/<name>`` where ``N`` is
    an ``O_PATH`` descriptor of its directory held by this process. Raises ``OSError`` when the
    directory does not exist.
    """
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        return str(path)
    return f"/proc/self/fd/{_directory_fd(path.parent)}/{path.name}"


def is_listening(path: Path) -> bool:
    """Whether a process listens on the socket file ``path`` (answers at once, never waits).

    A socket file outlives a process that was killed; connecting to it is refused at once, so
    this tells a dead desktop from a live one without waiting for a reply.
    """
    import socket  # here: only a desktop that does not answer on rpc.sock is probed

    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.setblocking(False)
    try:
        probe.connect(unix_address(path))
    except BlockingIOError:
        return True  # its backlog is full: busy, but someone listens
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _directory_fd(directory: Path) -> int:
    with _directory_fds_lock:
        now = os.stat(directory)
        held = _directory_fds.get(directory)
        if held is not None:
            try:
                then = os.fstat(held)
            except OSError:
                then = None
            if then is not None and (then.st_dev, then.st_ino) == (now.st_dev, now.st_ino):
                return held
            # The directory was removed and made again (a desktop went down and came up). Close
            # the old descriptor only if it still is ours: its number may have been reused.
            _directory_fds.pop(directory)
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/self/fd/{held}") == f"{directory} (deleted)":
                    os.close(held)
        fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        _directory_fds[directory] = fd
        return fd


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
        raise AotuiError(
            ErrorCode.E_PERMISSION,
            f"{path} belongs to uid {info.st_uid}, not to this user (uid {os.getuid()}); "
            "refusing to put a desktop's sockets there: remove it or choose another --socket",
        )
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def shared_dir(path: Path) -> Path:
    """Create ``path`` as a 0700 directory, or check an existing one, which may be shared
    (``--socket /tmp``) and keeps its mode, cannot be made to lose what is made in it.

    A directory owned by another user (root aside), or writable by others without the sticky
    bit, lets them rename the desktop's directory away and put their own in its place.
    """
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    except OSError as exc:
        raise AotuiError(
            ErrorCode.E_INTERNAL, f"cannot create runtime directory {path}: {exc}"
        ) from exc
    else:
        return secure_dir(path)  # made just now: ours
    try:
        info = path.lstat()
    except OSError as exc:
        raise AotuiError(
            ErrorCode.E_INTERNAL, f"cannot read runtime directory {path}: {exc}"
        ) from exc
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise AotuiError(
            ErrorCode.E_PERMISSION, f"{path} is a symlink or not a directory; refusing"
        )
    if info.st_uid not in (os.getuid(), 0):
        why = f"belongs to uid {info.st_uid}, who"
    elif info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
        why = "is writable by others and not sticky (chmod +t), so they"
    else:
        return path
    raise AotuiError(
        ErrorCode.E_PERMISSION,
        f"{path} {why} could replace a desktop's directory in it; refusing: choose a directory "
        "of your own for --socket (or leave it out)",
    )


def _default_base() -> Path:
    """aotui's own base runtime directory: XDG's ``aotui``, else ``/tmp/aotui-UID``."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "aotui"
    return Path(f"/tmp/aotui-{os.getuid()}")


def base_dir(override: str | None = None) -> Path:
    """The base runtime directory: ``override``, ``AOTUI_SOCKET``, XDG, or ``/tmp/aotui-UID``."""
    chosen = override or os.environ.get("AOTUI_SOCKET")
    return Path(chosen) if chosen else _default_base()


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


class DesktopPaths(_Root):
    """The files of one desktop's runtime directory (immutable, like a frozen dataclass)."""

    __slots__ = ()

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
        """Create the directories with safe permissions; a base given by ``--socket`` that
        exists keeps its mode (:func:`shared_dir`)."""
        base = self.root.parent
        if base == _default_base():
            secure_dir(base)
        else:
            shared_dir(base)
        secure_dir(self.root)
        secure_dir(self.workers)
        return self

    @property
    def control_file(self) -> Path:
        """The socket file of client requests."""
        return self.root / "control.sock"

    @property
    def signals_file(self) -> Path:
        """The socket file of the signal PUB socket."""
        return self.root / "signals.sock"

    @property
    def rpc_file(self) -> Path:
        """The socket file of the JSON-RPC 2.0 face (newline-delimited JSON; CONTRACT §9)."""
        return self.root / "rpc.sock"

    @property
    def control(self) -> str:
        """Endpoint for client requests (``OSError`` if the directory is missing)."""
        return f"ipc://{unix_address(self.control_file)}"

    @property
    def signals(self) -> str:
        """Endpoint of the signal PUB socket (``OSError`` if the directory is missing)."""
        return f"ipc://{unix_address(self.signals_file)}"

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

    def command(self, words: str) -> str:
        """``aotui WORDS`` for this desktop as a user pastes it into a shell: with ``--desktop``
        and ``--socket`` when they are not what a bare ``aotui WORDS`` would reach."""
        named = [f"aotui {words}"]
        if self.root.name != "default":
            named.append(f"--desktop {self.root.name}")
        if self.root.parent != base_dir():
            named.append(f"--socket {_shell_word(str(self.root.parent))}")
        return " ".join(named)


def _shell_word(text: str) -> str:
    """``text`` as one shell word (``shlex.quote``'s rule, without importing shlex)."""
    if text and not re.search(_SHELL_UNSAFE, text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"
