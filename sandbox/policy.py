"""The confinement policy of one worker: the supervisor's ``WorkerPolicy`` as a mapping, checked.

Keys (all optional; a missing limit takes :data:`DEFAULT_LIMITS`):

``app_dir``       the app's directory, granted read-only
``app``           the name of the worker's cgroups (default: the app directory's name)
``fs_read``       trees the app may read (``fs:read:``); ``"*"`` means ``/``
``fs_write``      trees the app may read and write (``fs:write:``)
``runtime_read``  what the interpreter needs (default: :func:`default_runtime_read`, computed in
                  the zygote, which runs the very interpreter the worker does)
``limits``        ``memory_mb``, ``cpu_percent``, ``pids``, ``open_files``, ``file_size_mb``
``uid``/``gid``   the per-app ids a root worker drops to (``gid`` defaults to ``uid``)
``strict``        refuse to run when a required layer is missing
``tmp_dir``       the app's private temporary directory: granted read-write, ``TMPDIR`` in the
                  worker (the supervisor creates it, owned by the per-app uid, and removes it)
``env``           variables added to the minimal environment
``app_owner``     ``[uid, gid]`` of the app directory's owner, shown as the worker's own ids
                  through an idmapped mount (root; an app its per-app uid could not read)
``browser``       the worker runs a headless browser (a web app): its install directory, fonts
                  and certificates are granted read-only, it and the ELF loader executable,
                  ``/proc`` is in the view, no ``RLIMIT_AS``, and seccomp's browser profile
"""

from __future__ import annotations

import os
import site
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aotui.sandbox import browser, landlock

__all__ = ["DEFAULT_LIMITS", "Policy", "default_runtime_read"]

#: Limits for keys the policy leaves out (the desktop config's defaults, plus a file size).
DEFAULT_LIMITS: Mapping[str, int] = {
    "memory_mb": 256,
    "cpu_percent": 50,
    "pids": 32,
    "open_files": 256,
    "file_size_mb": 256,
}

_KEYS = {
    "app", "app_dir", "fs_read", "fs_write", "runtime_read", "limits", "uid", "gid", "strict",
    "env", "tmp_dir", "app_owner", "browser",
}  # fmt: skip

#: What a worker may read besides the interpreter's trees: shared libraries, the loader cache,
#: time zones, a few devices (``/dev/null`` is writable too) and the CPU count glibc reads.
_RUNTIME_FILES = (
    "/usr/lib", "/lib", "/lib64", "/usr/lib64", "/etc/ld.so.cache", "/etc/localtime",
    "/usr/share/zoneinfo", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random",
    "/sys/devices/system/cpu/online", "/sys/devices/system/cpu/possible",
)  # fmt: skip


def _runtime_read() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    # The stdlib and site-packages trees, not the prefixes: a distribution's prefix is /usr.
    trees = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")]
    # Only sandbox/ and protocol/ of the aotui tree: a checkout also holds configs, tests, .git.
    source = Path(__file__).resolve().parent
    trees += [str(source), str(source.parent / "protocol"), *site.getsitepackages()]
    return tuple(dict.fromkeys([*trees, *_RUNTIME_FILES]))


# Computed at import, in the zygote: sysconfig imports a module lazily, and a worker that has
# dropped its uid may no longer be able to read the standard library.
_DEFAULT_RUNTIME_READ = _runtime_read()


def default_runtime_read() -> list[str]:
    """What the interpreter needs to read after the fork: stdlib, site-packages, aotui, libs."""
    return list(_DEFAULT_RUNTIME_READ)


def _paths(raw: Any, key: str) -> tuple[str, ...]:
    if not isinstance(raw, list | tuple) or not all(isinstance(p, str) for p in raw):
        raise ValueError(f"policy {key} must be a list of absolute paths")
    resolved = tuple("/" if p == "*" else p for p in raw)
    for path in resolved:
        if not os.path.isabs(path):
            raise ValueError(f"policy {key} has a relative path {path!r}")
    return resolved


def _id(raw: Mapping[str, Any], key: str) -> int | None:
    value = raw.get(key)
    # 0 would be no drop at all; 2**32 - 1 is the kernel's "no id".
    if value is not None and (type(value) is not int or not 0 < value < 2**32 - 1):
        raise ValueError(f"policy {key} must be a positive id, not {value!r}")
    return value


@dataclass(frozen=True)
class Policy:
    """What one worker is confined to (see the module docstring for each key)."""

    app_dir: str | None = None
    app: str = "app"
    fs_read: tuple[str, ...] = ()
    fs_write: tuple[str, ...] = ()
    runtime_read: tuple[str, ...] = _DEFAULT_RUNTIME_READ
    limits: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_LIMITS))
    uid: int | None = None
    gid: int | None = None
    strict: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    tmp_dir: str | None = None
    app_owner: tuple[int, int] | None = None
    browser: bool = False

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Policy:
        """Validate the supervisor's dict; raises ``ValueError`` naming the bad key."""
        unknown = set(raw) - _KEYS
        if unknown:
            raise ValueError(f"unknown policy keys: {', '.join(sorted(unknown))}")
        limits = dict(DEFAULT_LIMITS)
        for name, value in dict(raw.get("limits") or {}).items():
            if name not in DEFAULT_LIMITS or type(value) is not int or value <= 0:
                raise ValueError(f"policy limits.{name} must be a known, positive integer")
            limits[name] = value
        app_dir = raw.get("app_dir")
        if app_dir is not None:
            (app_dir,) = _paths([app_dir], "app_dir")
        runtime = raw.get("runtime_read")
        tmp_dir = raw.get("tmp_dir")
        if tmp_dir is not None:
            (tmp_dir,) = _paths([tmp_dir], "tmp_dir")
        uid, gid = _id(raw, "uid"), _id(raw, "gid")
        owner = raw.get("app_owner")
        if owner is not None:
            if (
                not isinstance(owner, list | tuple)
                or len(owner) != 2
                or not all(type(i) is int and 0 <= i < 2**32 - 1 for i in owner)
            ):
                raise ValueError(f"policy app_owner must be [uid, gid], not {owner!r}")
            owner = (owner[0], owner[1])
        return cls(
            app_dir=app_dir,
            app=str(raw.get("app") or os.path.basename(app_dir or "") or "app"),
            fs_read=_paths(raw.get("fs_read", []), "fs_read"),
            fs_write=_paths(raw.get("fs_write", []), "fs_write"),
            runtime_read=_DEFAULT_RUNTIME_READ if runtime is None else _paths(runtime, "runtime"),
            limits=limits,
            uid=uid,
            gid=uid if gid is None else gid,
            strict=bool(raw.get("strict", False)),
            env={str(k): str(v) for k, v in dict(raw.get("env") or {}).items()},
            tmp_dir=tmp_dir,
            app_owner=owner,
            browser=bool(raw.get("browser", False)),
        )

    def grants(self) -> dict[str, int]:
        """Landlock grants, path → rights; a tree granted twice gets the union."""
        grants: dict[str, int] = {}
        reads = [*self.runtime_read, *self.fs_read, *([self.app_dir] if self.app_dir else [])]
        for path in reads:
            grants[path] = grants.get(path, 0) | landlock.READ
        for path in [*self.fs_write, *([self.tmp_dir] if self.tmp_dir else [])]:
            grants[path] = grants.get(path, 0) | landlock.READ_WRITE
        grants["/dev/null"] = grants.get("/dev/null", 0) | landlock.READ | landlock.WRITE_FILE
        if self.browser:
            for path in [*browser.read_paths(), "/proc"]:
                grants[path] = grants.get(path, 0) | landlock.READ
            # The only executable files of any worker: the browser's own and the ELF loader.
            for path in browser.executables():
                grants[path] = grants.get(path, 0) | landlock.EXECUTE
        return grants
