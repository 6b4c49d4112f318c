"""What a worker holds while its app runs: its uid (as root), its temp dir, how it reads its app.

As root each worker leases a uid of its own on this machine (:mod:`~supervisor.workers.uids`)
and a private temporary directory. An app whose own files that uid may not read is shown to it
through an idmapped mount of its directory (the worker makes it: ``sandbox/fsview.py``), or,
where the filesystem takes none, runs from a copy made race-free for it
(:mod:`~supervisor.workers.app_copy`). All of it is given back when the app's last worker is
discarded. :meth:`WorkerLeases.policy` may walk and copy the app: it runs in a thread.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import WorkerPolicy
from aotui.sandbox.browser import INSTALL_HINT, find_browser
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.paths import DesktopPaths
from aotui.supervisor.workers.app_copy import CopyRefused, copy_app
from aotui.supervisor.workers.app_tmp import forget_base, make_base
from aotui.supervisor.workers.uids import UidAllocator

__all__ = ["WorkerLeases", "remove_tree"]

#: Entries of an app directory :func:`_unreadable_inside` looks at before trusting the rest.
_READABLE_CHECK_LIMIT = 2000
#: How long the check that a filesystem takes idmapped mounts may take.
_IDMAP_PROBE_TIMEOUT_S = 10.0


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
        #: Per running app with a uid: the directory it runs from and the owner its idmapped
        #: mount maps to the uid (``None``: read as it is).
        self._app_dirs: dict[str, tuple[Path, tuple[int, int] | None]] = {}
        #: Per running app whose files its uid cannot read, without an idmapped mount: its copy.
        self._copies: dict[str, Path] = {}
        #: Filesystem (``st_dev``) → why it takes no idmapped mount (``""``: it does).
        self._idmap_refusals: dict[int, str] = {}
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

    def readable_app_dir(self, app: AppRecord, uid: int) -> tuple[Path, tuple[int, int] | None]:
        """As root, how the per-app ``uid`` reads ``app``: its own directory, with the owner an
        idmapped mount maps to ``uid`` (``None``: none needed), or a copy.

        The directories above the app do not matter: the worker's filesystem view reaches it by
        name whatever their modes. Files of the app that ``uid`` may not read (a checkout made
        with umask 077) are shown through an idmapped mount where that makes every one readable
        and the filesystem takes one; else they are copied for it (race-free, bounded:
        :mod:`~supervisor.workers.app_copy`), or opening the app fails with ``E_PERMISSION``
        naming the file and the ``chmod`` that would let it run in place.
        """
        source = app.manifest.app_dir
        blocked = _unreadable_inside(source, uid)
        if blocked is None:
            return source, None
        info = os.stat(source)
        owner = (info.st_uid, info.st_gid)
        refusal = self._idmap_refusal(source, info.st_dev)
        if not refusal and _unreadable_inside(source, uid, owner) is None:
            self.log(
                f"{app.name}: uid {uid} cannot read {blocked} (mode {_mode(blocked)}); the app "
                f"reads its files through an idmapped mount (uid {owner[0]} shown as {uid})."
            )
            return source, owner
        copy = self.tmp_root / f"{app.app_id}-{secrets.token_hex(4)}-app"
        try:
            copy_app(source, copy, uid, uid)
        except (CopyRefused, OSError) as exc:
            remove_tree(copy)
            where = exc.path if isinstance(exc, CopyRefused) else str(blocked)
            raise AotuiError(
                ErrorCode.E_PERMISSION,
                f"{app.app_id} ({app.name}) runs as uid {uid}, which cannot read {blocked} (mode "
                f"{_mode(blocked)}); {refusal or 'an idmapped mount would not do'}, and the app "
                f"cannot be copied for it: {exc} ({where}). Make its files readable by other "
                f"users with chmod -R o+rX {source}",
                {"path": where},
            ) from None
        self._copies[app.app_id] = copy
        self.log(
            f"{app.name}: uid {uid} cannot read {blocked} (mode {_mode(blocked)}); it runs from "
            "a private copy of the app (chmod -R o+rX the app to run it in place)."
        )
        return copy, None

    def _idmap_refusal(self, path: Path, device: int) -> str:
        """Why ``path``'s filesystem takes no idmapped mount (``""``: it does), probed once per
        filesystem in a fresh process (the probe forks; this process has threads)."""
        known = self._idmap_refusals.get(device)
        if known is not None:
            return known
        command = [sys.executable, "-m", "aotui.sandbox.fsview", "--probe-idmap", str(path)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=_IDMAP_PROBE_TIMEOUT_S
            )
            refusal = "" if done.returncode == 0 else done.stdout.strip() or done.stderr[-200:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            refusal = str(exc)
        refusal = f"its filesystem takes no idmapped mount ({refusal})" if refusal else ""
        self._idmap_refusals[device] = refusal
        return refusal

    def policy(self, app: AppRecord) -> WorkerPolicy:
        """The confinement policy of ``app``'s worker; leases its uid and temp dir when new."""
        grants = app.manifest.permissions
        if app.manifest.uses_browser and find_browser() is None:
            raise AotuiError(
                ErrorCode.E_UNAVAILABLE,
                f"{app.manifest.name} runs a headless browser and this machine has none; "
                f"install one: {INSTALL_HINT}",
            )
        uid = self._leased.get(app.app_id)
        if self.uids is not None and uid is None:
            # Keyed by the runtime directory: two live desktops never share one.
            uid = self.uids.allocate(f"{self.paths.root} {app.app_id}")
            self._leased[app.app_id] = uid
        app_dir, owner = app.manifest.app_dir, None
        if uid is not None:
            placed = self._app_dirs.get(app.app_id)
            if placed is None:
                placed = self._app_dirs[app.app_id] = self.readable_app_dir(app, uid)
            app_dir, owner = placed
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
            limits=self.config.app_limits(app.manifest),
            uid=uid,
            strict=self.config.strict_sandbox,
            tmp_dir=str(tmp_dir),
            app_owner=list(owner) if owner else None,
            browser=app.manifest.uses_browser,
        )

    def release(self, app: AppRecord) -> None:
        """Give back what the app's last worker leased: its temp dir, its copy, its uid."""
        self._app_dirs.pop(app.app_id, None)
        for made in (self._tmp_dirs.pop(app.app_id, None), self._copies.pop(app.app_id, None)):
            if made is not None:
                remove_tree(made)
        uid = self._leased.pop(app.app_id, None)
        if uid is not None and self.uids is not None:
            self.uids.release(uid)


def _unreadable_inside(
    app_dir: Path, uid: int, owner: tuple[int, int] | None = None
) -> Path | None:
    """The first file or directory of ``app_dir`` that ``uid`` (its own gid, no groups) cannot
    read or search — with ``owner``'s ids shown as ``uid``'s, as an idmapped mount shows them —
    or ``None``; looks at :data:`_READABLE_CHECK_LIMIT` entries at most."""
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
            file_uid, file_gid = info.st_uid, info.st_gid
            if owner is not None:
                file_uid = uid if file_uid == owner[0] else file_uid
                file_gid = uid if file_gid == owner[1] else file_gid
            if file_uid == uid:
                needed = stat.S_IRUSR | (stat.S_IXUSR if is_dir else 0)
            elif file_gid == uid:
                needed = stat.S_IRGRP | (stat.S_IXGRP if is_dir else 0)
            else:
                needed = stat.S_IROTH | (stat.S_IXOTH if is_dir else 0)
            if info.st_mode & needed != needed:
                return Path(name)
        dirs.sort()
    return None


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
