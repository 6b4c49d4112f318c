"""Directory handles that carry a worker's read grants across the uid drop.

As root a worker drops to a per-app uid, which can read a directory only if it may also search
every directory above it. A Python under ``/root`` (pyenv), a checkout in a ``mktemp -d``
directory or a home directory of mode 0700 would then hide the standard library, site-packages
or the app itself, although Landlock grants them.

So, still root, the worker opens an ``O_PATH`` descriptor of every granted directory
(:func:`open_handles`). After the drop, a directory the new uid can still reach by name keeps its
name; any other is reached through ``/proc/self/fd/N`` (:func:`settle`): the kernel jumps from
that magic link straight to the directory, without searching its ancestors, while Landlock still
checks each file against the real hierarchy below its grants, and the file's own mode bits still
apply. :func:`reroute_imports` points ``sys.path``, the packages already imported and their
``__file__`` at the reachable names, and :func:`reachable` translates any other path (the app's
directory and entry, its temporary directory).

Nothing is widened: a descriptor reaches only a directory the policy grants anyway, and ``..``
from it needs search permission like any other path walk.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Handles", "open_handles", "reachable", "real_names", "reroute_imports", "settle"]

#: Real directory → the name this process reaches it by (set once, by :func:`reroute_imports`).
_routes: dict[str, str] = {}


@dataclass(frozen=True)
class Handles:
    """Descriptors of granted directories, and import locations that are aliases of them."""

    #: Granted directory (as the policy names it) → its ``O_PATH`` descriptor.
    fds: Mapping[str, int]
    #: An import location reached through a symlink → the same place under a granted name.
    aliases: Mapping[str, str]


def _import_locations() -> list[str]:
    """``sys.path`` and the search paths of the packages already imported."""
    found = [entry for entry in sys.path if entry]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):
            found += [entry for entry in search if isinstance(entry, str)]
    return list(dict.fromkeys(found))


def open_handles(directories: Iterable[str]) -> Handles:
    """Open an ``O_PATH`` descriptor of each existing directory; call before the uid drop."""
    fds: dict[str, int] = {}
    for directory in directories:
        path = os.path.normpath(directory)
        if path in fds:
            continue
        try:
            fds[path] = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:  # missing, or not a directory: Landlock skips it too
            continue
    # Symlinks resolve only while every directory on the way is searchable: now, as root.
    real = {os.path.realpath(path): path for path in fds}
    aliases: dict[str, str] = {}
    for entry in _import_locations():
        if _ancestor(entry, fds) is not None:
            continue  # named under a granted directory already
        resolved = os.path.realpath(entry)
        under = _translate(resolved, real)
        if under != resolved:
            aliases[entry] = under
    return Handles(fds, aliases)


def settle(handles: Handles) -> dict[str, str]:
    """After the drop: each directory's reachable name; closes the descriptors not needed."""
    routes: dict[str, str] = {}
    for path, fd in handles.fds.items():
        if os.access(path, os.R_OK | os.X_OK):
            os.close(fd)  # the uid reaches it by name: keep names as they are
            routes[path] = path
        else:
            routes[path] = f"/proc/self/fd/{fd}"
    # An alias is rerouted like the granted path it stands for (to that path's own route).
    for alias, granted in handles.aliases.items():
        routes[alias] = _translate(granted, routes)
    return routes


def _ancestor(path: str, roots: Iterable[str]) -> str | None:
    """The longest of ``roots`` that is ``path`` or one of its ancestors."""
    found = [r for r in roots if path == r or path.startswith(r.rstrip("/") + "/")]
    return max(found, key=len, default=None)


def _translate(path: str, routes: Mapping[str, str]) -> str:
    """``path`` with its longest routed ancestor replaced by that ancestor's route."""
    root = _ancestor(path, routes)
    return path if root is None else routes[root] + path[len(root) :]


def reachable(path: str) -> str:
    """The name this process reaches ``path`` by after :func:`reroute_imports`."""
    return _translate(os.path.normpath(path), _routes) if _routes else path


def real_names(text: str) -> str:
    """``text`` (a traceback) with every reachable name turned back into the real path, so logs
    and System Logs name the app's own files, not ``/proc/self/fd/N``."""
    for real, route in sorted(_routes.items(), key=lambda item: -len(item[1])):
        if route != real:
            text = text.replace(route.rstrip("/") + "/", real.rstrip("/") + "/")
    return text


def reroute_imports(routes: Mapping[str, str]) -> None:
    """Point ``sys.path``, imported packages' ``__path__`` and ``__file__`` at reachable names."""
    _routes.clear()
    _routes.update(routes)
    if all(real == name for real, name in routes.items()):
        return
    folders: dict[str, str] = {}

    def file_name(path: str) -> str:
        # Hundreds of modules share a few dozen folders: translate each folder once.
        folder, _, name = path.rpartition("/")
        if folder not in folders:
            folders[folder] = reachable(folder) if folder else folder
        return f"{folders[folder]}/{name}" if folder else path

    sys.path[:] = [reachable(entry) if entry else entry for entry in sys.path]
    for module in list(sys.modules.values()):
        search = getattr(module, "__path__", None)
        if isinstance(search, list):  # in place: it is also the spec's search locations
            search[:] = [reachable(entry) if isinstance(entry, str) else entry for entry in search]
        filename = getattr(module, "__file__", None)
        if isinstance(filename, str):
            # Modules that read data next to themselves later (importlib.resources, __file__).
            with contextlib.suppress(AttributeError, TypeError):  # a read-only module object
                module.__file__ = file_name(filename)
        spec = getattr(module, "__spec__", None)
        if spec is not None and isinstance(spec.origin, str) and spec.has_location:
            spec.origin = file_name(spec.origin)
        # A file loader reads resources and traceback source through its own path.
        loader = getattr(spec, "loader", None)
        if isinstance(getattr(loader, "path", None), str):
            with contextlib.suppress(AttributeError):
                loader.path = file_name(loader.path)  # type: ignore[union-attr]
    # Finders cached for the old names would keep failing on them.
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()
