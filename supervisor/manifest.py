"""App manifests (``aoapp.json``, CONTRACT §2): parsed and validated once, at install.

A manifest that breaks any rule is refused with a message naming the field; an unknown permission
string is refused, never ignored. ``name`` and ``description`` are one line of text without control
or format characters (``name`` ≤ :data:`MAX_NAME`, ``description`` ≤ :data:`MAX_DESCRIPTION`
characters): they reach the agent's snapshot, and a line break or a bidi override there could draw
entries that are not the app's. Names are compared by :func:`names_clash` for uniqueness: by
their confusable skeletons (Unicode TR 39, :mod:`supervisor.confusables`), so a name that reads
as another app's ("СhatWіthUser" with a Cyrillic С and і) is that name.

Only the desktop's own apps may be system apps (they cannot be closed or uninstalled): those
bundled in ``apps/system/`` and those its config lists (``system_dirs``); anyone else's
``"system": true`` is refused. Each limit is refused above :class:`LimitCeilings` (the desktop
config's ``[max_limits]``, lowered to what the machine has): a ``pids`` of 10⁹ would lift the
task cgroup and ``RLIMIT_NPROC`` above ``pid_max``, and 2⁶⁴ fails only when the app is opened.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import DEFAULT_IGNORABLE
from aotui.supervisor.confusables import skeleton
from aotui.supervisor.workers.restart import RestartPolicy

__all__ = [
    "BUNDLED_APPS_DIR",
    "MANIFEST_NAME",
    "MAX_DESCRIPTION",
    "MAX_NAME",
    "LimitCeilings",
    "Manifest",
    "Permission",
    "load_manifest",
    "name_keys",
    "names_clash",
    "parse_permission",
]

#: The apps shipped with aotui (``apps/`` at the top of the source tree); those in its
#: ``system/`` folder are the desktop's own system apps.
BUNDLED_APPS_DIR = Path(__file__).resolve().parent.parent / "apps"

MANIFEST_NAME = "aoapp.json"
#: The fewest tasks (``limits.pids``) a web app's browser runs one page with (sandbox/browser.py
#: ``MIN_TASKS``; kept here so that reading a manifest imports nothing of the browser).
MIN_BROWSER_TASKS = 64
#: Longest app name, in characters (CONTRACT §2).
MAX_NAME = 64
#: Longest app description, in characters (CONTRACT §2).
MAX_DESCRIPTION = 300
#: General categories refused in one-line manifest text: controls, formats (bidi overrides, tag
#: characters, zero-width characters), surrogates, private use, unassigned, line and paragraph
#: separators.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})

_APP_ID = re.compile(r"[a-z0-9]+(\.[a-z0-9_-]+)+")
_HOST = re.compile(
    r"(\*|(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)"
)
_FIELDS = {
    "id",
    "name",
    "version",
    "entry",
    "description",
    "system",
    "permissions",
    "limits",
    "restart",
    "browser",
    "view_in_flight",
}
#: The most ``view_in_flight`` may say (the desktop's own ``max_in_flight`` bounds it too).
MAX_VIEW_IN_FLIGHT = 64
_MIB = 1 << 20


@dataclass(frozen=True)
class LimitCeilings:
    """The most a manifest's ``limits`` may ask for (the desktop config's ``[max_limits]``)."""

    #: Memory in MiB (never above the machine's).
    memory_mb: int = 65536
    #: CPU in percent of one core (never above 100 per core of the machine).
    cpu_percent: int = 6400
    #: Tasks (processes and threads; never above ``pid_max``).
    pids: int = 4096
    #: Open file descriptors (never above ``nr_open``).
    open_files: int = 65536
    #: Largest file the app may write, in MiB.
    file_size_mb: int = 65536

    def on_this_machine(self) -> dict[str, tuple[int, str]]:
        """Each limit's ceiling here, with what sets it: the config's, or less if the machine
        has less (its memory, 100 % per core, ``pid_max``, ``nr_open``)."""
        machine: dict[str, tuple[int | None, str]] = {
            "memory_mb": (_physical_memory_mb(), "this machine's memory"),
            "cpu_percent": (100 * (os.cpu_count() or 1), "100 per CPU core of this machine"),
            "pids": (_proc_number("/proc/sys/kernel/pid_max"), "this machine's pid_max"),
            "open_files": (_proc_number("/proc/sys/fs/nr_open"), "this machine's nr_open"),
            "file_size_mb": ((1 << 63) // _MIB - 1, "the largest file size Linux can limit"),
        }
        ceilings: dict[str, tuple[int, str]] = {}
        for limit in fields(self):
            ceiling = (getattr(self, limit.name), f"max_limits.{limit.name} of the desktop config")
            most, why = machine.get(limit.name, (None, ""))
            if most is not None and most < ceiling[0]:
                ceiling = (most, why)
            ceilings[limit.name] = ceiling
        return ceilings


def _physical_memory_mb() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // _MIB
    except (OSError, ValueError):
        return None


def _proc_number(path: str) -> int | None:
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


_LIMITS = {limit.name for limit in fields(LimitCeilings)}


@dataclass(frozen=True)
class Permission:
    """One granted permission: ``fs:read:/srv/notes``, ``net:http:*.example.com``."""

    resource: str
    action: str
    scope: str

    def __str__(self) -> str:
        return f"{self.resource}:{self.action}:{self.scope}"


@dataclass(frozen=True)
class Manifest:
    """A validated ``aoapp.json`` plus the directory it came from."""

    id: str
    name: str
    version: str
    entry: str
    description: str
    system: bool
    permissions: tuple[Permission, ...]
    #: Limits the manifest sets; missing ones come from the desktop config.
    limits: dict[str, int]
    app_dir: Path
    #: Restart policy keys the manifest sets (``mode``, ``max_restarts``, ``period_s``, …).
    restart: dict[str, Any] = field(default_factory=dict)
    #: A Python app that drives a headless browser itself (the Browser app): its worker gets
    #: the browser's confinement and the web limits, as a web app's does.
    browser: bool = False
    #: At most this many operations of one view in flight at once, the rest answered
    #: ``E_RATE_LIMITED`` (the Browser's 2 per tab, seed 004); 0: only the desktop's bound.
    view_in_flight: int = 0

    @property
    def is_web(self) -> bool:
        """A web app: its entry is a page, run in a headless browser (CONTRACT §10)."""
        return self.entry.endswith(".html")

    @property
    def uses_browser(self) -> bool:
        """Its worker runs a headless browser: a web app, or an app that says ``browser``."""
        return self.is_web or self.browser


def _refuse(path: Path, field: str, problem: str) -> AotuiError:
    return AotuiError(
        ErrorCode.E_INVALID_CMD,
        f"{path}: field {field!r} {problem}",
        {"manifest": str(path), "field": field},
    )


def name_keys(name: str) -> tuple[str, str]:
    """What a name reads as: two names that share either key are one name on a desktop.

    Both are confusable skeletons of the NFKC form, whitespace collapsed; case is folded in two
    ways, as TR 39 leaves case alone and each way loses what the other keeps: upper case first
    keeps the capitals' confusables ("СНАТ" in Cyrillic is "CHAT", so is "chat"), lower case
    first the small letters' ("rn" reads as "m" only in lower case; "I" would turn into "l").
    """
    text = unicodedata.normalize("NFKC", name)
    upper = skeleton(text.upper())
    lower = skeleton(text.casefold()).casefold()
    return " ".join(upper.split()), " ".join(lower.split())


def names_clash(one: str, other: str) -> bool:
    """Whether an agent could take one name for the other ("Chat", "chat", "Ｃｈａｔ", "Сhаt")."""
    return any(a == b for a, b in zip(name_keys(one), name_keys(other), strict=True))


def _one_line(path: Path, field: str, value: object, limit: int, required: bool) -> str:
    """A manifest text field checked against the one-line rules; returns it stripped."""
    if not isinstance(value, str) or (required and not value.strip()):
        raise _refuse(
            path,
            field,
            "is required and must be a non-empty string" if required else "must be a string",
        )
    text = value.strip()
    for char in text:
        code = ord(char)
        kind = unicodedata.category(char)
        if kind in _REFUSED_CATEGORIES or any(
            low <= code <= high for low, high in DEFAULT_IGNORABLE
        ):
            what = "a line break" if char in "\r\n\u2028\u2029\x85" else f"U+{code:04X} ({kind})"
            raise _refuse(
                path,
                field,
                f"holds {what}; it must be one line of text without control or format characters",
            )
    if len(text) > limit:
        raise _refuse(path, field, f"is {len(text)} characters long; at most {limit} are allowed")
    return text


def parse_permission(text: str) -> Permission:
    """Parse ``resource:action[:scope]``; raises ``E_INVALID_CMD`` naming what is wrong."""
    if not isinstance(text, str):
        raise ValueError(f"a permission must be a string, got {text!r}")
    parts = text.split(":", 2)
    if len(parts) < 2:
        raise ValueError(f"{text!r} is not resource:action[:scope]")
    resource, action = parts[0], parts[1]
    scope = parts[2] if len(parts) == 3 else ""
    if resource == "fs" and action in ("read", "write"):
        if scope != "*" and not (scope.startswith("/") and ".." not in PurePosixPath(scope).parts):
            raise ValueError(f"{text!r}: fs scope must be an absolute path without '..' or '*'")
        return Permission(resource, action, scope)
    if resource == "net" and action == "http":
        host = scope.lower().rstrip(".")
        if not host or not _HOST.fullmatch(host):
            raise ValueError(f"{text!r}: host must be example.com, *.example.com or *")
        return Permission(resource, action, host)
    raise ValueError(
        f"unknown permission {text!r}; known: fs:read:<path>, fs:write:<path>, net:http:<host>"
    )


def load_manifest(
    app_dir: str | Path,
    *,
    system_dirs: Collection[Path] = (),
    ceilings: LimitCeilings | None = None,
) -> Manifest:
    """Read and validate ``APP_DIR/aoapp.json``.

    ``system_dirs``: app directories the desktop's config lists, which may be system apps
    besides the bundled ones; ``ceilings``: the most each limit may be (default: the defaults
    of :class:`LimitCeilings`, lowered to this machine's).
    """
    directory = Path(app_dir).resolve()
    path = directory / MANIFEST_NAME
    raw = _read_object(directory, path)
    _check_identity(path, raw)
    entry = _entry(directory, path, raw["entry"])
    app_name = _one_line(path, "name", raw["name"], MAX_NAME, required=True)
    description = _one_line(
        path, "description", raw.get("description", ""), MAX_DESCRIPTION, required=False
    )
    system = _system(directory, path, raw.get("system", False), system_dirs)
    permissions = _permissions(path, raw.get("permissions", []))
    limits = _limits(path, raw.get("limits", {}), ceilings or LimitCeilings())
    uses_browser = _flag(path, "browser", raw.get("browser", False))
    uses_browser = uses_browser or entry.suffix == ".html"
    if uses_browser and limits.get("pids", MIN_BROWSER_TASKS) < MIN_BROWSER_TASKS:
        raise _refuse(
            path,
            "limits.pids",
            f"is {limits['pids']}; a web app's browser needs at least {MIN_BROWSER_TASKS} tasks "
            "(about 8 processes and 60 threads for one page)",
        )
    restart = _restart(path, raw.get("restart", {}))
    return Manifest(
        restart=restart,
        id=raw["id"],
        name=app_name,
        version=raw["version"],
        entry=str(entry),
        description=description,
        system=system,
        permissions=permissions,
        limits=limits,
        app_dir=directory,
        browser=bool(raw.get("browser", False)),
        view_in_flight=_view_in_flight(path, raw.get("view_in_flight", 0)),
    )


def _read_object(directory: Path, path: Path) -> dict[str, Any]:
    """The manifest's JSON object, with no key the manifest does not define."""
    try:
        raw: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise AotuiError(
            ErrorCode.E_NOT_FOUND, f"{directory} is not an app: it has no {MANIFEST_NAME}"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AotuiError(ErrorCode.E_INVALID_CMD, f"{path} is not readable JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise AotuiError(ErrorCode.E_INVALID_CMD, f"{path} must hold a JSON object")
    for key in raw:
        if key not in _FIELDS:
            raise _refuse(
                path, key, f"is not a manifest field (known: {', '.join(sorted(_FIELDS))})"
            )
    return raw


def _check_identity(path: Path, raw: dict[str, Any]) -> None:
    """The required strings are there, and the id is reverse-DNS."""
    for key in ("id", "name", "version", "entry"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise _refuse(path, key, "is required and must be a non-empty string")
    if not _APP_ID.fullmatch(raw["id"]):
        raise _refuse(path, "id", "must be reverse-DNS like com.example.notes")


def _entry(directory: Path, path: Path, text: str) -> PurePosixPath:
    """The entry module's path, relative and naming a file inside the app directory."""
    entry = PurePosixPath(text)
    if entry.is_absolute() or ".." in entry.parts:
        raise _refuse(path, "entry", "must be a relative path inside the app directory")
    entry_path = (directory / entry).resolve()
    if not entry_path.is_relative_to(directory) or not entry_path.is_file():
        raise _refuse(path, "entry", f"names {text!r}, which is not a file in the app")
    return entry


def _permissions(path: Path, value: Any) -> tuple[Permission, ...]:
    """The ``permissions`` list, each entry parsed."""
    if not isinstance(value, list):
        raise _refuse(path, "permissions", "must be a list of strings")
    permissions = []
    for item in value:
        try:
            permissions.append(parse_permission(item))
        except ValueError as exc:
            raise _refuse(path, "permissions", str(exc)) from None
    return tuple(permissions)


def _flag(path: Path, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _refuse(path, name, "must be true or false")
    return value


def _view_in_flight(path: Path, value: Any) -> int:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if not whole or not 0 <= value <= MAX_VIEW_IN_FLIGHT:
        raise _refuse(
            path,
            "view_in_flight",
            f"must be a whole number from 1 to {MAX_VIEW_IN_FLIGHT} (or 0, the default: no bound "
            f"per view)",
        )
    return int(value)


def _system(directory: Path, path: Path, value: Any, system_dirs: Collection[Path]) -> bool:
    """``system``: true only for the desktop's own apps (bundled, or listed by its config)."""
    if not isinstance(value, bool):
        raise _refuse(path, "system", "must be true or false")
    bundled = directory.parent == (BUNDLED_APPS_DIR / "system").resolve()
    if value and not bundled and directory not in {Path(d).resolve() for d in system_dirs}:
        raise _refuse(
            path,
            "system",
            "is true, but only the desktop's own apps (bundled in aotui's apps/system/, or "
            "listed in the desktop config's apps) may be system apps, which cannot be closed "
            'or uninstalled: remove "system": true (or list the app in the config\'s apps)',
        )
    return value


def _limits(path: Path, value: Any, ceilings: LimitCeilings) -> dict[str, int]:
    """The ``limits`` object: known limits only, each a positive integer within its ceiling."""
    if not isinstance(value, dict):
        raise _refuse(path, "limits", "must be an object")
    highest = ceilings.on_this_machine() if value else {}
    for name, number in value.items():
        if name not in _LIMITS:
            raise _refuse(
                path, "limits", f"has unknown limit {name!r} (known: {', '.join(sorted(_LIMITS))})"
            )
        if isinstance(number, bool) or not isinstance(number, int) or number <= 0:
            raise _refuse(path, f"limits.{name}", f"must be a positive integer, got {number!r}")
        most, why = highest[name]
        if number > most:
            shown = str(number) if number < 10**18 else f"a {len(str(number))}-digit number"
            raise _refuse(
                path, f"limits.{name}", f"is {shown}; at most {most} is allowed here ({why})"
            )
    return dict(value)


def _restart(path: Path, value: Any) -> dict[str, Any]:
    """The ``restart`` object, checked by the restart policy that will read it."""
    if not isinstance(value, dict):
        raise _refuse(path, "restart", 'must be an object like {"mode": "transient"}')
    try:
        RestartPolicy.from_dict(value)
    except AotuiError as exc:
        raise _refuse(path, str(exc.data.get("field", "restart")), exc.message) from None
    return dict(value)
