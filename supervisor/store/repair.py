"""Looking at a store without changing it, and repairing a damaged one (``aotui desktops``).

:func:`describe_store` tells a healthy store from a damaged one, one the disk cannot read, and
one a supervisor holds (naming its pid). :func:`repair` acts only on damage: a healthy store is
never moved, and an I/O failure is refused (repairing cannot help; moving the file could lose
it). A repaired store keeps the desktop's identity, so the next ``aotui up`` loads it as the
same desktop with every salvaged app and the keyed parts of their data (``app_parts``); rows it
salvaged but cannot verify stay as they are and are quarantined when loaded, never dropped.
"""

from __future__ import annotations

import glob
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.store.faults import (
    StoreCorrupt,
    StoreHealth,
    StoreHeld,
    StoreIOError,
    from_sqlite,
)
from aotui.supervisor.store.lock import StoreLock, lock_holder, lock_path
from aotui.supervisor.store.store import DesktopStore, identity_path, read_identity, read_row
from aotui.supervisor.store.wal_check import tail_damage

__all__ = ["aside", "delete", "describe_store", "is_damaged", "repair", "stored_desktops"]


def stored_desktops(folder: Path) -> list[Path]:
    """The store of every desktop in ``folder``: each ``NAME.db``, and each desktop whose
    ``NAME.identity`` says it existed although its file is gone."""
    names = {p.stem for p in folder.glob("*.db")} | {p.stem for p in folder.glob("*.identity")}
    return [folder / f"{name}.db" for name in sorted(names)]


def aside(path: Path, identity: bool = True, why: str = "corrupt") -> Path:
    """Move a store (and its WAL files, and its identity) aside as ``<name>.db.<why>-<time>``;
    returns the new main file. ``why`` is ``corrupt`` for a damaged store, ``replaced`` for a
    store set aside only because a fresh desktop was asked for (``aotui up --fresh``)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{why}-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, f"{target}{suffix}")
    if identity and identity_path(path).exists():
        os.replace(identity_path(path), f"{identity_path(path)}.{why}-{stamp}")
    return target


def is_damaged(path: Path) -> bool:
    """Whether the content of the store at ``path`` is damaged (a disk that cannot read it is
    not damage), read without changing it; its lock may be this process's."""
    if not path.exists() and read_identity(path) is None:
        return False
    return bool(_examine(path)["health"] is StoreHealth.DAMAGED)


def delete(path: Path) -> list[str]:
    """Delete the stored desktop at ``path``: its file, WAL files, identity and lock file;
    returns the paths removed. :class:`StoreHeld` (naming the pid) while a supervisor serves it:
    its lock is taken for the deletion, so no ``aotui up`` can open it half deleted."""
    lock = StoreLock.acquire(path)
    removed: list[str] = []
    try:
        for doomed in (*(Path(f"{path}{s}") for s in ("", "-wal", "-shm")), identity_path(path)):
            try:
                doomed.unlink()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StoreIOError(path, "deleted", f"{doomed}: {exc.strerror or exc}") from None
            removed.append(str(doomed))
        lock_path(path).unlink(missing_ok=True)  # held until released below: no one reads it
    finally:
        lock.release()
    return removed


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)


def _examine(path: Path) -> dict[str, Any]:
    """Health, apps and times of a store nobody holds, read without changing it."""
    info: dict[str, Any] = {"created": None, "last_used": None, "apps": None, "quarantined": 0}
    identity = read_identity(path)
    size = path.stat().st_size if path.exists() else None
    if identity is not None and not size:
        what = "missing" if size is None else "empty"
        return {**info, "health": StoreHealth.DAMAGED, "problem": f"the file is {what}"}
    try:
        db = _read_only(path)
        try:
            check = db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreCorrupt(path, f"integrity check failed ({check})")
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            columns = [row[1] for row in db.execute("PRAGMA table_info(apps)")]
            pick = "entry, data, checksum" if "checksum" in columns else "entry, data, NULL"
            rows = db.execute(f"SELECT {pick} FROM apps").fetchall()
        finally:
            db.close()
        info["created"] = float(meta["created"]) if "created" in meta else None
        info["last_used"] = float(meta["last_used"]) if "last_used" in meta else None
    except sqlite3.Error as exc:
        error = from_sqlite(path, exc, "read")
        return {**info, **_health_of(error)}
    except AotuiError as exc:
        return {**info, **_health_of(exc)}
    except ValueError as exc:
        return {**info, "health": StoreHealth.DAMAGED, "problem": f"malformed meta: {exc}"}
    info["apps"] = len(rows)
    info["quarantined"] = sum(read_row(*row)[0] is None for row in rows)
    return {**info, "health": StoreHealth.OK, "problem": None}


def _health_of(error: AotuiError) -> dict[str, Any]:
    if isinstance(error, StoreCorrupt):
        health = StoreHealth.DAMAGED
    elif isinstance(error, StoreHeld):
        health = StoreHealth.HELD
    else:
        health = StoreHealth.IO_ERROR
    detail = error.detail if isinstance(error, StoreIOError) else error.message
    return {"health": health, "problem": detail}


def describe_store(path: Path) -> dict[str, Any]:
    """Name, health, holder, times, apps and size of a store, read without changing it."""
    size = sum(
        Path(f"{path}{s}").stat().st_size for s in ("", "-wal") if Path(f"{path}{s}").exists()
    )
    info: dict[str, Any] = {"desktop": path.stem, "path": str(path), "size_bytes": size}
    holder = lock_holder(path)
    if holder is not None:
        # Its supervisor has the file open exclusively; what is in it is that process's to say.
        identity = read_identity(path) or {}
        found: dict[str, Any] = {
            "health": StoreHealth.HELD,
            "problem": None,
            "created": identity.get("created"),
            "last_used": None,
            "apps": None,
            "quarantined": 0,
        }
    else:
        found = _examine(path)
    found["health"] = found["health"].value
    info.update(found, held_by=holder, healthy=found["health"] in ("ok", "held"))
    info["wal_damage"] = tail_damage(Path(f"{path}-wal")) if holder is None else None
    kept = path.parent.glob(f"{glob.escape(path.name)}-wal.damaged-*")
    info["damaged_wals"] = sorted(
        str(p) for p in kept if not p.name.endswith((".why", ".reported"))
    )
    return info


def repair(path: Path) -> dict[str, Any]:
    """Salvage a damaged store into a fresh one with the same identity, keeping the damaged file.

    A healthy store is left where it is; a store the disk cannot read raises ``E_IO`` and one a
    supervisor holds raises ``E_LOCKED``, both with nothing moved.
    """
    holder = lock_holder(path)
    if holder is not None:
        raise StoreHeld(path, holder)
    if not path.exists() and read_identity(path) is None:
        raise AotuiError(
            ErrorCode.E_NOT_FOUND,
            f"there is no desktop named {path.stem!r} in {path.parent}; `aotui desktops` "
            "lists them",
        )
    found = _examine(path)
    health = found["health"]
    if health is StoreHealth.OK:
        return {
            "path": str(path),
            "repaired": False,
            "detail": "the store is healthy (it passes SQLite's integrity check); nothing moved",
        }
    if health is StoreHealth.IO_ERROR:
        raise StoreIOError(path, "checked", f"{found['problem']}; nothing was moved")
    if health is StoreHealth.HELD:
        raise StoreHeld(path, None)
    had_file = path.exists()
    damaged = aside(path, identity=False)
    salvaged = _salvage(damaged)
    quarantined = sum(read_row(*row[2:5])[0] is None for row in salvaged.apps)
    _write_repaired(path, salvaged)
    detail = found["problem"]
    if salvaged.parts_cut:
        detail = (
            f"{detail}; the keyed-data table was damaged: {len(salvaged.parts)} part(s) were "
            f"read before the damage, later changes of keyed apps may be missing (the damaged "
            f"file is kept)"
        )
    return {
        "path": str(path),
        "repaired": True,
        "kept": str(damaged) if had_file else None,
        "salvaged_apps": len(salvaged.apps),
        "salvaged_parts": len(salvaged.parts),
        "quarantined_apps": quarantined,
        "detail": detail,
    }


@dataclass(frozen=True)
class Salvaged:
    """What could still be read from a damaged store."""

    #: ``key → value`` rows of the meta table.
    meta: dict[str, str]
    #: ``(app, position, entry, data, checksum)`` rows of the apps table.
    apps: list[tuple[Any, ...]]
    #: ``(app, part, data, checksum)`` rows of the keyed-data table (schema 3), each verified
    #: by its checksum when the app loads, like an app row.
    parts: list[tuple[Any, ...]]
    #: Reading the keyed-data table stopped at damage: some parts may be missing.
    parts_cut: bool = False


def _salvage(damaged: Path) -> Salvaged:
    """Every meta, app and keyed-part row still readable in the damaged file."""
    meta: dict[str, str] = {}
    apps: list[tuple[Any, ...]] = []
    parts: list[tuple[Any, ...]] = []
    if not damaged.exists() or damaged.stat().st_size == 0:
        return Salvaged(meta, apps, parts)
    try:
        old = _read_only(damaged)
    except sqlite3.Error:
        return Salvaged(meta, apps, parts)
    parts_cut = False
    try:
        try:
            for key, value in old.execute("SELECT key, value FROM meta"):
                meta[str(key)] = str(value)
        except sqlite3.Error:
            pass  # this table is unreadable from here on; keep what came before the damage
        for pick in ("app, position, entry, data, checksum", "app, position, entry, data, NULL"):
            try:
                for row in old.execute(f"SELECT {pick} FROM apps"):
                    apps.append(tuple(row))
                break
            except sqlite3.OperationalError as exc:
                if "no such column" not in str(exc):
                    break
            except sqlite3.Error:
                break
        try:
            for row in old.execute("SELECT app, part, data, checksum FROM app_parts"):
                parts.append(tuple(row))
        except sqlite3.Error as exc:
            # A store from before schema 3 has no such table; anything else is damage in it.
            parts_cut = "no such table" not in str(exc)
    finally:
        old.close()
    return Salvaged(meta, apps, parts, parts_cut)


def _write_repaired(path: Path, salvaged: Salvaged) -> None:
    """Write the salvaged rows as the desktop's store, with its identity made whole."""
    meta, apps = salvaged.meta, salvaged.apps
    identity = read_identity(path) or {}
    numbers = [int(str(r[0])[4:]) for r in apps if str(r[0])[4:].isdigit()]
    whole = {
        **meta,
        "id": meta.get("id") or str(identity.get("id") or path.stem),
        "created": meta.get("created") or repr(float(identity.get("created") or time.time())),
        "next_app": str(max([int(meta.get("next_app", "0") or 0), *(n + 1 for n in numbers)])),
        # Snapshot ids handed out before must never come back. When the reservation is lost,
        # start past any count a desktop could have reached below 1000 pulls a second.
        "snapshot_ids": meta.get("snapshot_ids") or str(int(time.time()) * 1000),
    }
    whole.pop("schema_version", None)
    building = path.with_name(f"{path.name}.repairing")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{building}{suffix}").unlink(missing_ok=True)
    fresh = DesktopStore(building)
    with fresh._transaction() as db:
        db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", whole.items())
        db.executemany(
            "INSERT OR REPLACE INTO apps (app, position, entry, data, checksum) "
            "VALUES (?, ?, ?, ?, ?)",
            apps,
        )
        # Parts override their app row's data when loaded: without them a keyed app would
        # come back as it was at its last whole write, its later acknowledged changes lost.
        db.executemany(
            "INSERT OR REPLACE INTO app_parts (app, part, data, checksum) VALUES (?, ?, ?, ?)",
            salvaged.parts,
        )
    fresh.close()
    os.replace(building, path)
    if not identity_path(path).exists():
        fresh_identity = DesktopStore(path)
        try:
            state = fresh_identity.load()
            if state is not None:
                fresh_identity.remember_identity(state)
        finally:
            fresh_identity.close()
