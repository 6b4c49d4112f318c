"""``DesktopState``: a desktop serialized (seed 000 §9), versioned, as plain JSON-able data.

What is saved: the desktop's id and times, the next ``app_N`` number, and per installed app its
id, manifest id and directory, status (running / collapsed / not running / failed), mounted and
hidden views, the ``view_N`` ids it has handed out, and the app's own data from its
``serialize()`` hook as of its last acknowledged operation. What is not: fragments (a restored
worker renders again), snapshot ids (ids from before a restore answer ``E_STALE_STATE``), logs.

Format ``{"format": "aotui.desktop", "version": 1, …}``. :func:`from_dict` upgrades older
versions through :data:`MIGRATIONS` and refuses newer or unknown ones with a message saying so.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["FORMAT", "MIGRATIONS", "VERSION", "AppEntry", "DesktopState"]

FORMAT = "aotui.desktop"
VERSION = 1

#: ``from_version → function`` turning a dict of that version into the next one.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


@dataclass
class AppEntry:
    """One installed app as saved."""

    app: str
    manifest_id: str
    app_dir: str
    #: ``running``, ``collapsed``, ``not running`` or ``failed``.
    status: str
    mounted: list[str] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    #: View key → ``view_N``, so ids survive a restore.
    view_ids: dict[str, str] = field(default_factory=dict)
    #: The app's serialized data (from its ``serialize()`` hook).
    data: Any = None
    restarts: int = 0
    last_exit: str = ""


@dataclass
class DesktopState:
    """A whole desktop, ready to be written anywhere and restored."""

    id: str
    created: float
    last_used: float
    next_app: int
    apps: list[AppEntry] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain data with the format marker and version.

        Built field by field, not by ``dataclasses.asdict``: that copies each app's data by
        recursion (600 levels of it raised ``RecursionError``). The values are the entries' own,
        shared: the desktop builds new entries each time and replaces an app's data, never
        changes it in place.
        """
        return {
            "format": FORMAT,
            "version": VERSION,
            "id": self.id,
            "created": self.created,
            "last_used": self.last_used,
            "next_app": self.next_app,
            "apps": [
                {f.name: getattr(entry, f.name) for f in fields(entry)} for entry in self.apps
            ],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> DesktopState:
        """Read (and upgrade) a serialized desktop; ``E_INVALID_CMD`` naming what is wrong."""
        if not isinstance(raw, Mapping) or raw.get("format") != FORMAT:
            raise _bad("this is not a serialized aotui desktop (no format marker)")
        version = raw.get("version")
        if not isinstance(version, int) or version < 1:
            raise _bad(f"desktop state version {version!r} is not a version number")
        if version > VERSION:
            raise _bad(
                f"desktop state version {version} is newer than this aotui understands "
                f"(up to {VERSION}); upgrade aotui to restore it"
            )
        data = dict(raw)
        while data["version"] < VERSION:
            step = MIGRATIONS.get(data["version"])
            if step is None:
                raise _bad(f"no upgrade path from desktop state version {data['version']}")
            data = step(data)
        try:
            apps = data["apps"]
            if type(apps) is not list:
                raise TypeError(f"apps is a {type(apps).__name__}, not a list")
            state = cls(
                id=data["id"],
                created=data["created"],
                last_used=data["last_used"],
                next_app=data["next_app"],
                apps=[AppEntry(**entry) for entry in apps],
            )
            _check_types(state)
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(f"desktop state is malformed: {str(exc)[:200]}") from None
        return state


def _check_types(state: DesktopState) -> None:
    """``TypeError`` naming the first field of the wrong type; looks one level deep only.

    The state may be anyone's (an import): a list where a string belongs would otherwise fail
    later, in the middle of changing the desktop, or recurse in ``str()``.
    """
    _expect("id", state.id, str)
    _expect("created", state.created, (int, float))
    _expect("last_used", state.last_used, (int, float))
    _expect("next_app", state.next_app, int)
    for i, entry in enumerate(state.apps):
        where = f"apps[{i}]"
        for name in ("app", "manifest_id", "app_dir", "status", "last_exit"):
            _expect(f"{where}.{name}", getattr(entry, name), str)
        _expect(f"{where}.restarts", entry.restarts, int)
        for name in ("mounted", "hidden"):
            views = getattr(entry, name)
            _expect(f"{where}.{name}", views, list)
            if not all(type(view) is str for view in views):
                raise TypeError(f"{where}.{name} holds a value that is not a string")
        _expect(f"{where}.view_ids", entry.view_ids, dict)
        if not all(type(k) is str and type(v) is str for k, v in entry.view_ids.items()):
            raise TypeError(f"{where}.view_ids maps a view key to a view id, both strings")


def _expect(name: str, value: Any, kinds: type | tuple[type, ...]) -> None:
    accepted = kinds if isinstance(kinds, tuple) else (kinds,)
    if type(value) not in accepted:
        wanted = " or ".join(kind.__name__ for kind in accepted)
        raise TypeError(f"{name} is a {type(value).__name__}, not a {wanted}")


def _bad(message: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, message)
