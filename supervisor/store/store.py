"""The embedded default store: one SQLite file (WAL) per named desktop under ``AOTUI_HOME``.

``AOTUI_HOME/desktops/<name>.db`` holds the desktop's :class:`~supervisor.store.state.DesktopState`:
a ``meta`` table (format version, id, times, next ``app_N``, the snapshot-id reservation) and an
``apps`` table (one row per installed app; the app's own data is stored as a codec frame, so
bytes and every plain value survive exactly, and each row carries a checksum of its content) and
an ``app_parts`` table: for an app whose data is keyed (a dict of parts), an acknowledged
operation writes only the parts it changed (:meth:`DesktopStore.save_parts`), which override the
app row's data when loaded; writing the whole app row again drops them (keyed data too large for
one frame is then written as an empty row and all of its parts).
Durability is the caller's choice per write: ``synchronous=FULL`` makes a commit durable before
it returns (per-ack mode). The file is opened in SQLite's exclusive locking mode: one process at
a time (the supervisor, which also holds :mod:`~supervisor.store.lock`), and no shared-memory
index that a full disk could turn into a SIGBUS.

Nothing is invented and nothing is reset silently:

- a file that cannot be read because it is damaged raises :class:`StoreCorrupt`; one the disk
  refuses raises :class:`StoreIOError` (``E_IO``) — see :mod:`~supervisor.store.faults`;
- a missing or empty file of a desktop that existed (its ``<name>.identity`` says so) is damage,
  not a new desktop;
- a damaged app row is quarantined: the other apps load, the row is kept as it is and reported
  (:attr:`DesktopStore.quarantined`), and no later save overwrites or deletes it;
- damage at the WAL's tail is reported (:attr:`DesktopStore.wal_damage`) and the WAL is kept
  aside before SQLite drops it (:mod:`~supervisor.store.wal_check`).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError
from aotui.protocol.messages import AppState
from aotui.supervisor.store.base import REPLY_KEEP_S, SNAPSHOT_ID_BLOCK, Command
from aotui.supervisor.store.faults import StoreCorrupt, StoreHeld, StoreIOError, from_sqlite
from aotui.supervisor.store.lock import lock_holder
from aotui.supervisor.store.rows import (
    Malformed,
    Quarantined,
    app_rows,
    assemble,
    merged_parts,
    meta_rows,
    part_row,
    read_row,
    row_checksum,
)
from aotui.supervisor.store.state import VERSION, AppEntry, DesktopState
from aotui.supervisor.store.wal_check import tail_damage

__all__ = [
    "SCHEMA_VERSION",
    "SNAPSHOT_ID_BLOCK",
    "DesktopStore",
    "Quarantined",
    "identity_path",
    "read_identity",
    "read_row",
    "row_checksum",
]

#: Version of the SQLite schema (the DesktopState inside has its own version). 3 added
#: ``app_parts``, 4 ``commands`` (command id → first reply), each created (like every table) at
#: the first write.
SCHEMA_VERSION = 4

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS apps (
    app TEXT PRIMARY KEY,
    position INTEGER NOT NULL,
    entry TEXT NOT NULL,
    data BLOB,
    checksum TEXT
);
CREATE TABLE IF NOT EXISTS app_parts (
    app TEXT NOT NULL,
    part TEXT NOT NULL,
    data BLOB,
    checksum TEXT NOT NULL,
    PRIMARY KEY (app, part)
);
CREATE TABLE IF NOT EXISTS commands (id TEXT PRIMARY KEY, reply BLOB NOT NULL, at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS commands_at ON commands (at);
"""
#: Old replies are dropped once every this many recorded commands.
_PRUNE_EVERY = 1024


def identity_path(path: Path) -> Path:
    """The small file that says a desktop exists (``<name>.identity`` beside ``<name>.db``)."""
    return path.with_name(f"{path.stem}.identity")


def read_identity(path: Path) -> dict[str, Any] | None:
    """The desktop's recorded identity (``id``, ``created``), or ``None`` if none was recorded."""
    try:
        raw = json.loads(identity_path(path).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"id": path.stem, "created": None}  # it existed, even if the note is unreadable
    return raw if isinstance(raw, dict) else {"id": path.stem, "created": None}


class DesktopStore:
    """Reads and writes one desktop's state; safe to call from worker threads."""

    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self.path = path
        self.location = str(path)
        self._recorded = 0
        self._lock = threading.Lock()
        self.quarantined: list[Quarantined] = []
        self.wal_damage: str | None = None
        self._missing_check()
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StoreIOError(path, "created", exc.strerror or str(exc)) from None
        self._keep_damaged_wal()
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise from_sqlite(path, exc, "opened") from None
        try:
            # Exclusive before the first WAL access: no shared-memory index is ever created.
            self._db.execute("PRAGMA locking_mode=EXCLUSIVE")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            check = self._db.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise StoreCorrupt(path, f"integrity check failed ({check})")
            self._inspect_schema()
        except sqlite3.Error as exc:
            self._db.close()
            error = from_sqlite(path, exc, "read")
            if isinstance(error, StoreHeld):
                error = StoreHeld(path, lock_holder(path))  # name the supervisor that has it
            raise error from None
        except AotuiError:
            self._db.close()
            raise

    def _missing_check(self) -> None:
        """A desktop that existed has a store: its absence is damage, not a fresh start."""
        identity = read_identity(self.path)
        if identity is None:
            return
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            raise StoreCorrupt(self.path, "the file is missing, but this desktop existed") from None
        except OSError as exc:
            raise StoreIOError(self.path, "read", exc.strerror or str(exc)) from None
        wal = Path(f"{self.path}-wal")
        if size == 0 and not (wal.exists() and wal.stat().st_size > 0):
            raise StoreCorrupt(self.path, "the file is empty, but this desktop existed")

    def _keep_damaged_wal(self) -> None:
        """Copy a WAL whose tail SQLite would drop, before SQLite opens (and drops) it.

        The finding is written beside the copy (``.why``) and reported by every open until the
        desktop has told its user (:meth:`wal_damage_reported`): a quick look at the store (the
        check ``aotui up`` makes first) must not swallow it.
        """
        wal = Path(f"{self.path}-wal")
        found = tail_damage(wal)
        reports = []
        if found is not None:
            kept = wal.with_name(f"{wal.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
            try:
                shutil.copy2(wal, kept)
                Path(f"{kept}.why").write_text(f"{found}; the WAL as it was is kept as {kept}")
            except OSError as exc:
                reports.append(f"{found}; it could not be kept aside ({exc.strerror})")
        notes = sorted(self.path.parent.glob(f"{glob.escape(wal.name)}.damaged-*.why"))
        reports += [note.read_text(errors="replace") for note in notes]
        self.wal_damage = "; ".join(reports) or None

    def wal_damage_reported(self) -> None:
        """The desktop has reported :attr:`wal_damage`: later opens need not repeat it."""
        wal = f"{self.path.name}-wal"
        for note in self.path.parent.glob(f"{glob.escape(wal)}.damaged-*.why"):
            with contextlib.suppress(OSError):
                note.rename(f"{note}.reported")

    def _inspect_schema(self) -> None:
        """Check the tables and their version by reading only: nothing is written on open."""
        tables = {
            str(row[0])
            for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        #: Whether the tables exist (a new store has none until its first write).
        self._tables = bool(tables)
        #: Whether ``app_parts`` exists (schema 2 stores get it at their first write).
        self._parts = "app_parts" in tables
        #: Whether ``commands`` exists (schema 3 stores get it at their first write).
        self._commands = "commands" in tables
        if tables and not {"meta", "apps"} <= tables:
            found = ", ".join(sorted(tables))[:200]
            raise StoreCorrupt(self.path, f"its tables are not aotui's (found: {found})")
        columns = [row[1] for row in self._db.execute("PRAGMA table_info(apps)")]
        self._checksums = "checksum" in columns or not tables
        text = self._meta("schema_version") if tables else None
        found_version = int(text) if text is not None and text.isdigit() else None
        if text is not None and found_version is None:
            raise StoreCorrupt(self.path, f"schema version {text!r:.40} is not a number")
        if found_version is not None and found_version > SCHEMA_VERSION:
            raise StoreCorrupt(
                self.path, f"schema {found_version} is newer than this aotui ({VERSION})"
            )
        self._ready = bool(tables) and found_version == SCHEMA_VERSION and self._checksums

    def _prepare(self) -> None:
        """Before the first write: WAL mode, the tables, the upgrade from schema 1."""
        db = self._db
        db.execute("PRAGMA journal_mode=WAL")
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                db.execute(statement)
        if not self._checksums:
            # Schema 1 had no row checksums: its rows load unchecked until written again.
            db.execute("ALTER TABLE apps ADD COLUMN checksum TEXT")
        db.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        self._tables = self._checksums = self._ready = self._parts = self._commands = True

    def close(self) -> None:
        """Close the database (checkpointing the WAL)."""
        with self._lock, contextlib.suppress(sqlite3.Error):
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                if not self._ready:
                    self._prepare()
                self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                self._db.execute("COMMIT")
            except BaseException as exc:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise from_sqlite(self.path, exc, "written") from None
                raise

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    # --- the desktop ----------------------------------------------------------------------------

    def load(self) -> DesktopState | None:
        """The saved desktop, or ``None`` for a new store; damaged app rows are quarantined."""
        if not self._tables:
            return None
        checksum = "checksum" if self._checksums else "NULL"
        try:
            with self._lock:
                meta: dict[str, str] = dict(
                    self._db.execute("SELECT key, value FROM meta").fetchall()
                )
                rows = self._db.execute(
                    f"SELECT app, entry, data, {checksum} FROM apps ORDER BY position"
                ).fetchall()
                part_rows = (
                    self._db.execute("SELECT app, part, data, checksum FROM app_parts").fetchall()
                    if self._parts
                    else []
                )
        except sqlite3.Error as exc:
            raise from_sqlite(self.path, exc, "read") from None
        try:
            state, self.quarantined = assemble(meta, rows, part_rows)
        except Malformed as exc:
            raise StoreCorrupt(self.path, str(exc)) from None
        return state

    def save_desktop(self, state: DesktopState) -> None:
        """Write the whole desktop (meta and every app) in one transaction.

        Rows of uninstalled apps go; quarantined rows stay exactly as they are.
        """
        keep = [entry.app for entry in state.apps] + [q.app for q in self.quarantined]
        with self._transaction() as db:
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta_rows(state).items())
            marks = ", ".join("?" * len(keep))
            db.execute(f"DELETE FROM apps WHERE app NOT IN ({marks})", keep)
            db.execute(f"DELETE FROM app_parts WHERE app NOT IN ({marks})", keep)
            for position, entry in enumerate(state.apps):
                _write_app(db, position, entry)

    def save_apps(
        self,
        state: DesktopState,
        entries: list[AppEntry],
        positions: Mapping[str, int] | None = None,
        command: Command | None = None,
    ) -> Command | None:
        """Write some apps (and the desktop's meta) in one durable transaction.

        ``positions`` gives each app's place in the desktop; without it, ``state.apps`` does.
        With ``command``, it is recorded in the same transaction; if its id already was, nothing
        is written and the command first recorded is returned.
        """
        if positions is None:
            positions = {entry.app: i for i, entry in enumerate(state.apps)}
        with self._transaction() as db:
            earlier = self._record(db, command)
            if earlier is not None:
                return earlier
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta_rows(state).items())
            for entry in entries:
                _write_app(db, positions.get(entry.app, len(positions)), entry)
        return None

    def save_parts(
        self,
        state: DesktopState,
        entry: AppEntry,
        changes: dict[str, Any],
        position: int | None = None,
        command: Command | None = None,
    ) -> Command | None:
        """Write the parts of ``entry``'s keyed data that changed, in one durable transaction.

        ``entry.data`` is the data before ``changes``, which maps a part to its new value
        (``None``: the part is gone). When the store has no row for the app yet, the row is
        written whole instead, so parts always have a base; at ``position`` in the desktop, or
        where ``state.apps`` has it. ``command`` as for :meth:`save_apps`.
        """
        with self._transaction() as db:
            earlier = self._record(db, command)
            if earlier is not None:
                return earlier
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", meta_rows(state).items())
            known = db.execute("SELECT 1 FROM apps WHERE app = ?", (entry.app,)).fetchone()
            if known is None:
                if position is None:
                    position = next(
                        (i for i, e in enumerate(state.apps) if e.app == entry.app),
                        len(state.apps),
                    )
                _write_app(db, position, merged_parts(entry, changes))
                return None
            db.executemany(
                "INSERT OR REPLACE INTO app_parts VALUES (?, ?, ?, ?)",
                [part_row(entry.app, part, value) for part, value in changes.items()],
            )
        return None

    def delete_app(self, app: str, command: Command | None = None) -> Command | None:
        """Forget an uninstalled app; ``command`` as for :meth:`save_apps`."""
        with self._transaction() as db:
            earlier = self._record(db, command)
            if earlier is not None:
                return earlier
            db.execute("DELETE FROM apps WHERE app = ?", (app,))
            db.execute("DELETE FROM app_parts WHERE app = ?", (app,))
        return None

    def reply_to(self, command_id: str) -> Command | None:
        """The command recorded under ``command_id``, with its first reply, or ``None``."""
        if not self._commands:
            return None
        try:
            with self._lock:
                row = self._db.execute(
                    "SELECT reply FROM commands WHERE id = ?", (command_id,)
                ).fetchone()
        except sqlite3.Error as exc:
            raise from_sqlite(self.path, exc, "read") from None
        return None if row is None else Command(command_id, _reply(row[0]))

    def record_reply(self, command: Command) -> Command | None:
        """Record ``command`` in a transaction of its own (see :meth:`Store.record_reply`)."""
        with self._transaction() as db:
            return self._record(db, command)

    def _record(self, db: sqlite3.Connection, command: Command | None) -> Command | None:
        """Record ``command`` in this transaction; the earlier one if its id was recorded
        (unless ``command.continues``: then its reply replaces the recorded one)."""
        if command is None:
            return None
        row = db.execute("SELECT reply FROM commands WHERE id = ?", (command.id,)).fetchone()
        now = time.time()
        frame = codec.encode(AppState(request_id=0, data=command.reply))
        if row is not None:
            if not command.continues:
                return Command(command.id, _reply(row[0]))
            db.execute("UPDATE commands SET reply = ? WHERE id = ?", (frame, command.id))
            return None
        db.execute("INSERT INTO commands VALUES (?, ?, ?)", (command.id, frame, now))
        self._recorded += 1
        if self._recorded % _PRUNE_EVERY == 0:
            db.execute("DELETE FROM commands WHERE at < ?", (now - REPLY_KEEP_S,))
        return None

    def reserve_snapshot_ids(self, count: int = SNAPSHOT_ID_BLOCK) -> int:
        """The first of ``count`` fresh snapshot ids, durably never handed out again."""
        with self._transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'snapshot_ids'").fetchone()
            start = int(row[0] if row else 0) + 1
            db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('snapshot_ids', ?)", (str(start + count - 1),)
            )
        return start

    def space_problem(self, needed: int) -> str | None:
        """Why a write of about ``needed`` bytes would not fit on the store's disk, or ``None``."""
        try:
            disk = os.statvfs(self.path.parent)
        except OSError:
            return None  # cannot tell: the write itself will say
        blocks = disk.f_bfree if os.geteuid() == 0 else disk.f_bavail  # root may use the reserve
        free = blocks * disk.f_frsize
        if free >= needed:
            return None
        return f"the disk holding {self.path.parent} is full ({free // 1024} KiB free)"

    def remember_identity(self, state: DesktopState) -> None:
        """Record that this desktop exists (once), so a lost store is never taken for a new one."""
        target = identity_path(self.path)
        if target.exists():
            return
        text = json.dumps({"id": state.id, "created": state.created})
        temporary = target.with_name(f".{target.name}.tmp")
        with open(temporary, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)


def _write_app(db: sqlite3.Connection, position: int, entry: AppEntry) -> None:
    """Write ``entry``'s row whole; keyed data too large for one frame goes in as its parts."""
    row, parts = app_rows(position, entry)
    db.execute("INSERT OR REPLACE INTO apps VALUES (?, ?, ?, ?, ?)", row)
    # The row holds the whole data now (or the parts below do): older parts are in it.
    db.execute("DELETE FROM app_parts WHERE app = ?", (entry.app,))
    db.executemany("INSERT OR REPLACE INTO app_parts VALUES (?, ?, ?, ?)", parts)


def _reply(frame: Any) -> Any:
    """A recorded reply, as it was recorded."""
    decoded = codec.decode(bytes(frame))
    assert isinstance(decoded, AppState)
    return decoded.data
