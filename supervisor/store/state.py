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
from dataclasses import asdict, dataclass, field
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
        """Plain data with the format marker and version."""
        return {"format": FORMAT, "version": VERSION, **asdict(self)}

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
            apps = [AppEntry(**entry) for entry in data["apps"]]
            return cls(
                id=str(data["id"]),
                created=float(data["created"]),
                last_used=float(data["last_used"]),
                next_app=int(data["next_app"]),
                apps=apps,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(f"desktop state is malformed: {exc}") from None


def _bad(message: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, message)
