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
directory and entry, its temporary directory). Renaming the modules in each worker copied ~1,000
pages the zygote shares (4 MB of the worker's own memory, 10-25 ms of its start), so the zygote
names them once the way every worker will reach them (:func:`preroute`), and a worker whose handles
came out as predicted reroutes only its import paths.

Nothing is widened: a descriptor reaches only a directory the policy grants anyway, and ``..``
from it needs search permission like any other path walk.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import stat
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType

__all__ = [
    "Handles",
    "open_handles",
    "preroute",
    "reachable",
    "real_names",
    "reroute_imports",
    "settle",
]

#: Real directory → the name this process reaches it by (set once, by :func:`reroute_imports`).
_routes: dict[str, str] = {}
#: Set by :func:`preroute` in the zygote: real directory → the name its modules were given.
_prerouted: dict[str, str] = {}
#: The packages whose ``__path__`` a worker still reroutes itself (the zygote imports through it).
_prerouted_packages: list[ModuleType] = []
#: How many modules were imported when the zygote named them.
_prerouted_count = 0
#: The folders the zygote's modules were loaded from (their real names).
_module_folders: list[str] = []
#: The search paths of the zygote's packages, as :func:`_import_locations` finds them.
_package_locations: list[str] = []
#: Import finders a worker dropped from its cache, kept (see :func:`_reroute_search_paths`).
_dropped_finders: list[object] = []


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
    if len(sys.modules) == _prerouted_count:
        # Nothing imported since the zygote looked: walking every module object again would
        # copy the ~340 pages they share with the zygote (1.4 MB of a worker's own memory).
        return list(dict.fromkeys(found + _package_locations))
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


def _others_reach(path: str) -> bool:
    """Whether a uid owning nothing on the way (a per-app uid) may list ``path`` by name."""
    try:
        modes = [os.stat(ancestor).st_mode for ancestor in _ancestors(path)]
        own = os.stat(path).st_mode
    except OSError:
        return False
    readable = stat.S_IROTH | stat.S_IXOTH
    return all(mode & stat.S_IXOTH for mode in modes) and own & readable == readable


def _ancestors(path: str) -> list[str]:
    parts = path.rstrip("/").split("/")[1:-1]
    return ["/"] + ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def preroute(runtime: Iterable[str], first_fd: int = 4) -> None:
    """In the zygote (root): give imported modules the names a worker will reach them by.

    A worker's :func:`open_handles` opens its granted trees, ``runtime`` first, on the lowest free
    descriptors from ``first_fd``, in order; those a per-app uid cannot reach by name it reaches
    as ``/proc/self/fd/N``. Modules under them get those names now, in ``__file__``, spec origins
    and loader paths; ``sys.path`` and ``__path__`` keep the real ones (the zygote imports through
    them). :func:`reroute_imports` checks the prediction and reroutes everything if it missed.
    """
    predicted: dict[str, str] = {}
    seen: set[str] = set()
    fd = first_fd
    for directory in runtime:
        path = os.path.normpath(directory)
        if path in seen or not os.path.isdir(path):
            continue  # as open_handles: no descriptor for it
        seen.add(path)
        if not _others_reach(path):
            predicted[path] = f"/proc/self/fd/{fd}"
        fd += 1
    global _prerouted_count
    _prerouted.clear()
    _prerouted.update(predicted)
    modules = list(sys.modules.values())
    _prerouted_packages[:] = [m for m in modules if isinstance(getattr(m, "__path__", None), list)]
    _prerouted_count = len(sys.modules)
    searched = [entry for package in _prerouted_packages for entry in package.__path__]
    _package_locations[:] = [entry for entry in searched if isinstance(entry, str)]
    files = [getattr(module, "__file__", None) for module in modules]
    folders = {name.rpartition("/")[0] for name in files if isinstance(name, str)}
    _module_folders[:] = sorted(folders)
    if predicted:
        _rename_modules(_folder_names(lambda folder: _translate(folder, predicted)))


def _prediction_held(moved: Mapping[str, str]) -> bool:
    """Whether the zygote named every module as ``moved`` (real → reachable name) would."""
    if any(moved.get(real) != name for real, name in _prerouted.items()):
        return False
    # Other trees moved too (the app's, its temporary directory): none may hold those modules.
    others = [real for real in moved if real not in _prerouted]
    return not any(_ancestor(folder, others) for folder in _module_folders)


def _folder_names(translate: Callable[[str], str]) -> Callable[[str], str]:
    """A file name translator that translates each folder once (modules share a few dozen)."""
    folders: dict[str, str] = {}

    def file_name(path: str) -> str:
        folder, _, name = path.rpartition("/")
        if folder not in folders:
            folders[folder] = translate(folder) if folder else folder
        return f"{folders[folder]}/{name}" if folder else path

    return file_name


def _rename_modules(file_name: Callable[[str], str]) -> None:
    """``__file__``, spec origin and loader path of every imported module through ``file_name``."""
    for module in list(sys.modules.values()):
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


def _reroute_search_paths(packages: Iterable[ModuleType]) -> None:
    """``sys.path`` and the packages' ``__path__`` at reachable names."""
    sys.path[:] = [reachable(entry) if entry else entry for entry in sys.path]
    for package in packages:
        search = getattr(package, "__path__", None)
        if isinstance(search, list):  # in place: it is also the spec's search locations
            search[:] = [reachable(entry) if isinstance(entry, str) else entry for entry in search]
    # Finders cached for the old names would keep failing on them. Kept rather than freed:
    # freeing the zygote's finders and their directory listings copies ~150 pages it shares.
    _dropped_finders.extend(sys.path_importer_cache.values())
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def reroute_imports(routes: Mapping[str, str]) -> bool:
    """Point ``sys.path``, imported packages' ``__path__`` and ``__file__`` at reachable names.

    Returns whether the zygote's names (:func:`preroute`) were right, so only the search paths
    were left to reroute.
    """
    _routes.clear()
    _routes.update(routes)
    moved = {real: name for real, name in routes.items() if name != real}
    if _prerouted and _prediction_held(moved) and len(sys.modules) == _prerouted_count:
        _reroute_search_paths(_prerouted_packages)
        return True
    if not moved and not _prerouted:
        return False
    # The zygote's names, where it gave any, are taken back to the real ones first.
    undo = {name: real for real, name in _prerouted.items()}
    _rename_modules(_folder_names(lambda folder: reachable(_translate(folder, undo))))
    _reroute_search_paths(
        module for module in list(sys.modules.values()) if hasattr(module, "__path__")
    )
    return False
