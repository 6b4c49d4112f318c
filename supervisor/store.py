"""The embedded default store: one SQLite file (WAL) per named desktop under ``AOTUI_HOME``.

``AOTUI_HOME/desktops/<name>.db`` holds the desktop's :class:`~supervisor.state.DesktopState`:
a ``meta`` table (format version, id, times, next ``app_N``, the snapshot-id reservation) and an
``apps`` table (one row per installed app; the app's own data is stored as a codec frame, so bytes
and every plain value survive exactly). Durability is the caller's choice per write:
``synchronous=FULL`` makes a commit durable before it returns (per-ack mode).

A file that cannot be read is never reset silently: opening it raises ``E_INTERNAL`` naming the
file and the two ways out (``aotui desktops --repair NAME``, or ``aotui up --fresh``, which keeps
the old file beside the new one).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import AppState
from aotui.supervisor.state import VERSION, AppEntry, DesktopState

__all__ = ["SCHEMA_VERSION", "DesktopStore", "StoreCorrupt", "aside", "describe_store", "repair"]

#: Version of the SQLite schema (the DesktopState inside has its own version).
SCHEMA_VERSION = 1
#: Snapshot ids are reserved in blocks, so ids from before a crash are never handed out again.
SNAPSHOT_ID_BLOCK = 100_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS apps (
    app TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    entry TEXT NOT NULL,
    data BLOB
);
"""


class StoreCorrupt(AotuiError):
    """The desktop's store cannot be read; the message says how to get out."""

    def __init__(self, path: Path, detail: str) -> None:
        name = path.stem
        super().__init__(
            ErrorCode.E_INTERNAL,
            f"the store of desktop {name!r} ({path}) cannot be read: {detail}. Nothing was "
            f"changed. Try `aotui desktops --repair {name}` (salvages what it can and keeps the "
            f"damaged file), or `aotui up --desktop {name} --fresh` (starts empty and keeps the "
            f"old file as {path.name}.corrupt-<time>).",
            {"path": str(path)},
        )


class DesktopStore:
    """Reads and writes one desktop's state; safe to call from worker threads."""

    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreCorrupt(path, f"integrity check failed ({check})")
            self._db.executescript(_SCHEMA)
            found = self._meta("schema_version")
            if found is None:
                self._set_meta({"schema_version": str(SCHEMA_VERSION)})
            elif int(found) > SCHEMA_VERSION:
                raise StoreCorrupt(path, f"schema {found} is newer than this aotui ({VERSION})")
        except sqlite3.DatabaseError as exc:
            raise StoreCorrupt(path, str(exc)) from None

    def close(self) -> None:
        """Close the database (checkpointing the WAL)."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, values: dict[str, str]) -> None:
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", values.items())

    # --- the desktop ----------------------------------------------------------------------------

    def load(self) -> DesktopState | None:
        """The saved desktop, or ``None`` for a new store."""
        try:
            with self._lock:
                meta: dict[str, str] = dict(
                    self._db.execute("SELECT key, value FROM meta").fetchall()
                )
                rows = self._db.execute("SELECT entry, data FROM apps ORDER BY position").fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreCorrupt(self.path, str(exc)) from None
        if "id" not in meta:
            return None
        apps = []
        for entry_text, data in rows:
            try:
                entry = AppEntry(**json.loads(entry_text))
            except (ValueError, TypeError) as exc:
                raise StoreCorrupt(self.path, f"an app row is malformed: {exc}") from None
            if data is not None:
                frame = codec.decode(bytes(data))
                entry.data = frame.data if isinstance(frame, AppState) else None
            apps.append(entry)
        return DesktopState.from_dict(
            {
                "format": "aotui.desktop",
                "version": int(meta.get("state_version", VERSION)),
                "id": meta["id"],
                "created": float(meta["created"]),
                "last_used": float(meta.get("last_used") or meta["created"]),
                "next_app": int(meta.get("next_app", len(apps))),
                "apps": [asdict(a) for a in apps],
            }
        )

    def save_desktop(self, state: DesktopState) -> None:
        """Write the whole desktop (meta and every app) in one transaction."""
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", _meta_rows(state).items())
            db.execute("DELETE FROM apps")
            for position, entry in enumerate(state.apps):
                db.execute("INSERT INTO apps VALUES (?, ?, ?, ?)", _app_row(position, entry))

    def save_apps(self, state: DesktopState, entries: list[AppEntry]) -> None:
        """Write some apps (and the desktop's meta) in one durable transaction."""
        positions = {entry.app: i for i, entry in enumerate(state.apps)}
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", _meta_rows(state).items())
            for entry in entries:
                db.execute(
                    "INSERT OR REPLACE INTO apps VALUES (?, ?, ?, ?)",
                    _app_row(positions.get(entry.app, len(positions)), entry),
                )

    def delete_app(self, app: str) -> None:
        """Forget an uninstalled app."""
        with self._transaction() as db:
            db.execute("DELETE FROM apps WHERE app = ?", (app,))

    def reserve_snapshot_ids(self) -> int:
        """The first id of a fresh block of snapshot ids, never handed out before."""
        with self._lock:
            start = int(self._meta("snapshot_ids") or 0) + 1
        self._set_meta({"snapshot_ids": str(start + SNAPSHOT_ID_BLOCK - 1)})
        return start


def _meta_rows(state: DesktopState) -> dict[str, str]:
    return {
        "state_version": str(VERSION),
        "id": state.id,
        "created": repr(state.created),
        "last_used": repr(time.time()),
        "next_app": str(state.next_app),
    }


def _app_row(position: int, entry: AppEntry) -> tuple[str, int, str, bytes | None]:
    fields = asdict(entry)
    data = fields.pop("data")
    blob = None if data is None else codec.encode(AppState(request_id=0, data=data))
    return (entry.app, position, json.dumps(fields), blob)


def aside(path: Path) -> Path:
    """Move a damaged store (and its WAL files) aside; returns the new name of the main file."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{target}{suffix}")
    return target


def repair(path: Path) -> dict[str, Any]:
    """Salvage what can be read into a fresh store, keeping the damaged file aside."""
    try:
        DesktopStore(path).close()
        return {"path": str(path), "repaired": False, "detail": "the store is healthy"}
    except StoreCorrupt as exc:
        problem = exc.message
    damaged = aside(path)
    salvaged: dict[str, list[tuple[Any, ...]]] = {"meta": [], "apps": []}
    try:
        old = sqlite3.connect(f"file:{damaged}?mode=ro", uri=True)
        for table in salvaged:
            try:
                for row in old.execute(f"SELECT * FROM {table}"):
                    salvaged[table].append(tuple(row))
            except sqlite3.DatabaseError:
                continue  # this table is unreadable; keep what came before the damage
        old.close()
    except sqlite3.DatabaseError:
        pass
    fresh = DesktopStore(path)
    with fresh._transaction() as db:
        db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", salvaged["meta"])
        db.executemany("INSERT OR REPLACE INTO apps VALUES (?, ?, ?, ?)", salvaged["apps"])
    fresh.close()
    return {
        "path": str(path),
        "repaired": True,
        "kept": str(damaged),
        "salvaged_apps": len(salvaged["apps"]),
        "detail": problem,
    }


def describe_store(path: Path) -> dict[str, Any]:
    """Name, created and last-used times and size of a store, read without changing it."""
    size = sum(
        Path(f"{path}{s}").stat().st_size for s in ("", "-wal") if Path(f"{path}{s}").exists()
    )
    info: dict[str, Any] = {"desktop": path.stem, "path": str(path), "size_bytes": size}
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
        info["apps"] = db.execute("SELECT count(*) FROM apps").fetchone()[0]
        db.close()
        info["created"] = float(meta["created"]) if "created" in meta else None
        info["last_used"] = float(meta["last_used"]) if "last_used" in meta else None
        info["healthy"] = True
    except (sqlite3.DatabaseError, ValueError) as exc:
        info.update(created=None, last_used=None, apps=None, healthy=False, problem=str(exc))
    return info
