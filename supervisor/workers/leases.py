"""What a worker holds while its app runs: its uid (as root), its temp dir, a copy of its app.

As root each worker leases a uid of its own on this machine (:mod:`~supervisor.workers.uids`)
and a private temporary directory; an app whose files that uid may not read runs from a copy
handed over to it. All of it is given back when the app's last worker is discarded.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import WorkerPolicy
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.workers.app_tmp import forget_base, make_base
from aotui.supervisor.workers.uids import UidAllocator

__all__ = ["WorkerLeases", "remove_tree"]

#: Entries of an app directory :func:`_unreadable_inside` looks at before trusting the rest.
_READABLE_CHECK_LIMIT = 2000
#: The largest app copied for a per-app uid that cannot read the app's own files.
_COPY_LIMIT_BYTES = 64 * 2**20


class WorkerLeases:
    """Per running app: its leased uid, its private temp dir, and the copy it runs from."""

    def __init__(
        self, config: DesktopConfig, paths: DesktopPaths, log: Callable[..., None]
    ) -> None:
        self.config = config
        self.paths = paths
        self.log = log
        # As root each worker leases a uid of its own on this machine (see workers/uids.py).
        self.uids = UidAllocator() if os.geteuid() == 0 else None
        self._leased: dict[str, int] = {}
        self._tmp_dirs: dict[str, Path] = {}
        #: Per running app whose files its uid cannot read: the copy it runs from.
        self._copies: dict[str, Path] = {}
        #: Where the apps' private temporary directories go (set by :meth:`prepare`).
        self.app_tmp_root = self.tmp_root

    @property
    def tmp_root(self) -> Path:
        """The desktop's private scratch space (app copies): ``<runtime>/tmp/``."""
        return self.paths.root / "tmp"

    def prepare(self) -> None:
        """Make the scratch space afresh, clearing what a desktop killed before could not."""
        if self.tmp_root.is_dir():
            forget_base(self.tmp_root)
        remove_tree(self.tmp_root)
        self.tmp_root.mkdir(mode=0o700)
        # Per-app uids reach their temp dirs by name there (workers/app_tmp.py: SQLite needs it).
        self.app_tmp_root = make_base(self.tmp_root) if self.uids is not None else self.tmp_root

    def clear(self) -> None:
        """Remove the scratch space (every worker is gone)."""
        forget_base(self.tmp_root)
        remove_tree(self.tmp_root)

    def readable_app_dir(self, app: AppRecord, uid: int) -> Path:
        """As root, the directory the per-app ``uid`` runs ``app`` from: its own, or a copy.

        The directories above the app do not matter: the worker reaches the app's directory
        through a descriptor opened before its uid drop (``sandbox/handles.py``). Files of the app
        that ``uid`` may not read (a checkout made with umask 077) are copied for it instead, into
        the app's private area, owned by ``uid``; an app over :data:`_COPY_LIMIT_BYTES` is
        refused, naming the file and the ``chmod`` that would let it run in place.
        """
        source = app.manifest.app_dir
        blocked = _unreadable_inside(source, uid)
        if blocked is None:
            return source
        size = _tree_size(source)
        if size > _COPY_LIMIT_BYTES:
            raise AotuiError(
                ErrorCode.E_PERMISSION,
                f"{app.app_id} ({app.name}) runs as uid {uid}, which cannot read {blocked} (mode "
                f"{_mode(blocked)}), and at {size // 2**20} MiB the app is too big to copy for it "
                f"(limit {_COPY_LIMIT_BYTES // 2**20} MiB): make its files readable by other "
                f"users with chmod -R o+rX {source}",
                {"path": str(blocked)},
            )
        copy = self.tmp_root / f"{app.app_id}-{secrets.token_hex(4)}-app"
        shutil.copytree(source, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        _hand_over(copy, uid)
        self._copies[app.app_id] = copy
        self.log(
            f"{app.name}: uid {uid} cannot read {blocked} (mode {_mode(blocked)}); it runs from "
            "a private copy of the app (chmod -R o+rX the app to run it in place)."
        )
        return copy

    def policy(self, app: AppRecord) -> WorkerPolicy:
        """The confinement policy of ``app``'s worker; leases its uid and temp dir when new."""
        grants = app.manifest.permissions
        uid = self._leased.get(app.app_id)
        if self.uids is not None and uid is None:
            # Keyed by the runtime directory: two live desktops never share one.
            uid = self.uids.allocate(f"{self.paths.root} {app.app_id}")
            self._leased[app.app_id] = uid
        app_dir = app.manifest.app_dir
        if uid is not None:
            app_dir = self._copies.get(app.app_id) or self.readable_app_dir(app, uid)
        tmp_dir = self._tmp_dirs.get(app.app_id)
        if tmp_dir is None:
            tmp_dir = self.app_tmp_root / f"{app.app_id}-{secrets.token_hex(4)}"
            tmp_dir.mkdir(mode=0o700)
            self._tmp_dirs[app.app_id] = tmp_dir
            if uid is not None:
                os.chown(tmp_dir, uid, uid)
        return WorkerPolicy(
            app=app.app_id,
            app_dir=str(app_dir),
            fs_read=[p.scope for p in grants if p.resource == "fs" and p.action == "read"],
            fs_write=[p.scope for p in grants if p.resource == "fs" and p.action == "write"],
            limits={**vars(self.config.limits), **app.manifest.limits},
            uid=uid,
            strict=self.config.strict_sandbox,
            tmp_dir=str(tmp_dir),
        )

    def release(self, app: AppRecord) -> None:
        """Give back what the app's last worker leased: its temp dir, its copy, its uid."""
        for made in (self._tmp_dirs.pop(app.app_id, None), self._copies.pop(app.app_id, None)):
            if made is not None:
                remove_tree(made)
        uid = self._leased.pop(app.app_id, None)
        if uid is not None and self.uids is not None:
            self.uids.release(uid)


def _unreadable_inside(app_dir: Path, uid: int) -> Path | None:
    """The first file or directory of ``app_dir`` that ``uid`` (its own gid, no groups) cannot
    read or search, or ``None``; looks at :data:`_READABLE_CHECK_LIMIT` entries at most."""
    seen = 0
    for directory, dirs, files in os.walk(app_dir):
        entries = [(directory, True)] + [(os.path.join(directory, f), False) for f in files]
        for name, is_dir in entries:
            seen += 1
            if seen > _READABLE_CHECK_LIMIT:
                return None
            try:
                info = os.stat(name)
            except OSError:
                return Path(name)
            if info.st_uid == uid:
                needed = stat.S_IRUSR | (stat.S_IXUSR if is_dir else 0)
            elif info.st_gid == uid:
                needed = stat.S_IRGRP | (stat.S_IXGRP if is_dir else 0)
            else:
                needed = stat.S_IROTH | (stat.S_IXOTH if is_dir else 0)
            if info.st_mode & needed != needed:
                return Path(name)
        dirs.sort()
    return None


def _tree_size(root: Path) -> int:
    """The bytes of the files below ``root`` (what a copy would take), symlinks not followed."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def _hand_over(copy: Path, uid: int) -> None:
    """Make ``copy`` readable by ``uid`` alone: owned by it, read-only, searchable."""
    for directory, _dirs, files in os.walk(copy):
        for name in files:
            path = os.path.join(directory, name)
            os.lchown(path, uid, uid)
            if not os.path.islink(path):
                os.chmod(path, 0o400)
        os.chown(directory, uid, uid)
        os.chmod(directory, 0o500)


def _mode(path: Path) -> str:
    with contextlib.suppress(OSError):
        return stat.filemode(path.stat().st_mode)
    return "unknown"


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything in it, even directories the app made unwritable."""

    def retry(function: Any, name: str, error: Any) -> None:
        # An unprivileged supervisor shares the app's uid: mkdir(mode=0o500) inside its temp
        # dir would otherwise keep the tree; root removes anything anyway.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            function(name)

    if path.exists():
        shutil.rmtree(path, onerror=retry)
