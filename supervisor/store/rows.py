"""A desktop's rows, as every store keeps them: encoded, checksummed, read back and assembled.

Both stores (:mod:`~supervisor.store.store`, SQLite; :mod:`~supervisor.store.postgres`) hold the
same three kinds of row — the desktop's ``meta`` (key → text), one ``apps`` row per installed app
(its entry as JSON, its data as a codec frame, a checksum over both) and ``app_parts`` rows (one
part of an app's keyed data each, checksummed) — and read them back through this one module, so
a row damaged in either is quarantined the same way and a desktop loads the same from either.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError
from aotui.protocol.messages import AppState
from aotui.supervisor.store.state import VERSION, AppEntry, DesktopState

__all__ = [
    "AppRow",
    "Malformed",
    "PartRow",
    "Quarantined",
    "app_rows",
    "assemble",
    "merged_parts",
    "meta_rows",
    "part_row",
    "read_row",
    "row_checksum",
]

#: ``(app, position, entry JSON, data frame or None, checksum)``.
AppRow = tuple[str, int, str, bytes | None, str]
#: ``(app, part, data frame or None for a part gone, checksum)``.
PartRow = tuple[str, str, bytes | None, str]


@dataclass(frozen=True)
class Quarantined:
    """An app row that could not be read; it stays in the store untouched."""

    app: str
    #: The manifest id, when the row's entry could still be read.
    manifest_id: str | None
    problem: str


class Malformed(Exception):
    """The desktop's own rows (not one app's) cannot be read; the store says where."""


def row_checksum(entry_text: str, data: bytes | None) -> str:
    """The checksum stored beside an app row (over its entry and data exactly as stored)."""
    digest = hashlib.blake2b(entry_text.encode(), digest_size=16)
    digest.update(b"\x00" if data is None else b"\x01" + data)
    return digest.hexdigest()


def read_row(entry_text: Any, data: Any, checksum: Any) -> tuple[AppEntry | None, str]:
    """One app row as an entry, or ``None`` and what is wrong with it."""
    blob = None if data is None else bytes(data)
    if not isinstance(entry_text, str):
        return None, "its entry is not text"
    if checksum is not None and checksum != row_checksum(entry_text, blob):
        return None, "its content does not match its checksum (the row was damaged on disk)"
    try:
        entry = AppEntry(**json.loads(entry_text))
    except (ValueError, TypeError) as exc:
        return None, f"its entry is malformed ({exc})"
    if blob is not None:
        try:
            frame = codec.decode(blob)
        except AotuiError as exc:
            return None, f"its data cannot be decoded ({exc.message})"
        if not isinstance(frame, AppState):
            return None, f"its data is a {frame.KIND} frame, not app state"
        entry.data = frame.data
    return entry, ""


def meta_rows(state: DesktopState) -> dict[str, str]:
    """The desktop's own fields as ``meta`` rows (``last_used``: now)."""
    return {
        "state_version": str(VERSION),
        "id": state.id,
        "created": repr(state.created),
        "last_used": repr(time.time()),
        "next_app": str(state.next_app),
    }


def _app_row(position: int, entry: AppEntry) -> AppRow:
    fields = asdict(entry)
    data = fields.pop("data")
    blob = None if data is None else codec.encode(AppState(request_id=0, data=data))
    text = json.dumps(fields)
    return (entry.app, position, text, blob, row_checksum(text, blob))


def app_rows(position: int, entry: AppEntry) -> tuple[AppRow, list[PartRow]]:
    """``entry``'s row whole, and the parts it is written with (replacing every older part).

    Keyed data is acknowledged part by part and may outgrow a frame: then the row keeps none of
    it and each part is a row of its own (each within a frame, as its ack was).
    """
    try:
        return _app_row(position, entry), []
    except AotuiError:
        if not isinstance(entry.data, dict):
            raise
    row = _app_row(position, replace(entry, data={}))
    return row, [part_row(entry.app, part, value) for part, value in entry.data.items()]


# A part written as gone (``None``) is stored as NULL data; its checksum still covers the row.
def part_row(app: str, part: str, value: Any) -> PartRow:
    """One part of ``app``'s keyed data as a row (``value`` ``None``: the part is gone)."""
    blob = None if value is None else codec.encode(AppState(request_id=0, data=value))
    return (app, part, blob, row_checksum(f"{app}\x00{part}", blob))


def merged_parts(entry: AppEntry, changes: Mapping[str, Any]) -> AppEntry:
    """``entry`` with ``changes`` laid over its keyed data (``None``: a part gone)."""
    data = dict(entry.data or {})
    for part, value in changes.items():
        if value is None:
            data.pop(part, None)
        else:
            data[part] = value
    return replace(entry, data=data)


def assemble(
    meta: Mapping[str, str], rows: Iterable[Any], part_rows: Iterable[Any]
) -> tuple[DesktopState | None, list[Quarantined]]:
    """The desktop from its rows (``None``: none stored yet); damaged app rows quarantined.

    ``rows`` are ``(app, entry, data, checksum)`` in the desktop's order, ``part_rows``
    ``(app, part, data, checksum)``. Raises :class:`Malformed` when the desktop's own rows are.
    """
    rows = list(rows)
    if "id" not in meta:
        if rows:
            raise Malformed(f"{len(rows)} app row(s) but no desktop identity")
        return None, []
    apps = []
    quarantined = []
    parts = _group_parts(part_rows)
    for app, entry_text, data, checksum in rows:
        entry, problem = read_row(entry_text, data, checksum)
        if entry is not None and str(app) in parts:
            problem = _apply_parts(entry, parts[str(app)])
            entry = None if problem else entry
        if entry is None:
            manifest_id = _peek_manifest_id(entry_text)
            quarantined.append(Quarantined(str(app), manifest_id, problem))
        else:
            apps.append(entry)
    try:
        state = DesktopState.from_dict(
            {
                "format": "aotui.desktop",
                "version": int(meta.get("state_version", VERSION)),
                "id": meta["id"],
                "created": float(meta["created"]),
                "last_used": float(meta.get("last_used") or meta["created"]),
                "next_app": int(meta.get("next_app", len(rows))),
                "apps": [asdict(a) for a in apps],
            }
        )
    except (AotuiError, KeyError, ValueError) as exc:
        raise Malformed(f"the desktop's meta table is malformed: {exc}") from None
    # An app_N must never be handed out twice, even if next_app itself was damaged.
    numbers = [_app_number(app) for app, *_ in rows]
    state.next_app = max([state.next_app, *(n + 1 for n in numbers if n is not None)])
    return state, quarantined


def _peek_manifest_id(entry_text: Any) -> str | None:
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        value = json.loads(entry_text).get("manifest_id")
        return value if isinstance(value, str) else None
    return None


def _app_number(app: Any) -> int | None:
    text = str(app)
    return int(text[4:]) if text.startswith("app_") and text[4:].isdigit() else None


def _group_parts(rows: Iterable[Any]) -> dict[str, list[tuple[Any, Any, Any]]]:
    grouped: dict[str, list[tuple[Any, Any, Any]]] = {}
    for app, part, data, checksum in rows:
        grouped.setdefault(str(app), []).append((part, data, checksum))
    return grouped


def _apply_parts(entry: AppEntry, rows: list[tuple[Any, Any, Any]]) -> str:
    """Lay the stored parts over ``entry.data``; what is wrong with them (``""``: nothing)."""
    data = {} if entry.data is None else entry.data
    if not isinstance(data, dict):
        return "it has stored parts but its data is not keyed"
    for part, raw, checksum in rows:
        blob = None if raw is None else bytes(raw)
        if not isinstance(part, str) or checksum != row_checksum(f"{entry.app}\x00{part}", blob):
            return f"its part {part!r:.60} does not match its checksum (damaged on disk)"
        if blob is None:
            data.pop(part, None)
            continue
        try:
            frame = codec.decode(blob)
        except AotuiError as exc:
            return f"its part {part!r:.60} cannot be decoded ({exc.message})"
        if not isinstance(frame, AppState):
            return f"its part {part!r:.60} is a {frame.KIND} frame, not app state"
        data[part] = frame.data
    entry.data = data
    return ""
