"""A desktop stored in PostgreSQL (``store = "postgresql://…"``), through psycopg 3.

Same rows, same guarantees as the SQLite default (:mod:`~supervisor.store.base`); one database
holds any number of desktops, each row keyed by the desktop's name, in the schema ``aotui``:

- ``aotui.meta (desktop, key, value)``, ``aotui.apps (desktop, app, position, entry, data,
  checksum)`` and ``aotui.app_parts (desktop, app, part, data, checksum)``: what
  :mod:`~supervisor.store.rows` encodes, checksums included;
- ``aotui.commands (desktop, id, reply, at)``: command id → first reply, written in the
  transaction of the data it acknowledges;
- ``aotui.schema_version``: the schema's version. The tables are created at the first write (under
  a transaction-level advisory lock, so two desktops starting at once on a new database do not
  race), upgraded through :data:`MIGRATIONS`, and a newer schema than this aotui's is refused.

Each write is one transaction; ``synchronous="FULL"`` (``ack``) commits with PostgreSQL's
``synchronous_commit = on`` (the commit is flushed to the server's WAL before it returns),
``"NORMAL"`` (``batch``) with ``off``. One supervisor per desktop: the store holds a session-level
advisory lock on the desktop's name for its life (the server drops it when the connection ends,
a kill -9 included); a second one is refused with ``E_LOCKED``, naming the holder. A lost
connection is opened again at the next write, taking the lock again first.

Errors are mapped in :func:`from_psycopg`: damaged data the server reports (``XX001``,
``XX002``) is damage (``E_INTERNAL``); anything else the server or the connection refuses is
``E_IO`` (the desktop keeps its state in memory and retries, as for a full disk).
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import AppState
from aotui.supervisor.store.base import REPLY_KEEP_S, SNAPSHOT_ID_BLOCK, Command
from aotui.supervisor.store.faults import StoreCorrupt, StoreHealth, StoreHeld, StoreIOError
from aotui.supervisor.store.rows import (
    AppRow,
    Malformed,
    PartRow,
    Quarantined,
    app_rows,
    assemble,
    merged_parts,
    meta_rows,
    part_row,
)
from aotui.supervisor.store.state import AppEntry, DesktopState

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresStore",
    "ServerCorrupt",
    "ServerHeld",
    "ServerIOError",
    "from_psycopg",
    "redacted",
]

#: Version of the ``aotui`` schema.
SCHEMA_VERSION = 1
#: ``from_version → statements`` that take the schema to the next version.
MIGRATIONS: dict[int, tuple[str, ...]] = {}

#: The first key of every advisory lock aotui takes ("aotu"); the second is the desktop's.
_LOCK_SPACE = 0x616F7475
#: Second key of the lock that serializes creating and upgrading the schema.
_SCHEMA_LOCK = 0
#: Old replies are dropped once every this many recorded commands.
_PRUNE_EVERY = 1024
#: Seconds a connection attempt may take before the store is ``E_IO``.
CONNECT_TIMEOUT_S = 10
#: Seconds a new store waits for the desktop's lock before it is ``E_LOCKED``.
LOCK_WAIT_S = 1.0

_SCHEMA = (
    "CREATE SCHEMA IF NOT EXISTS aotui",
    "CREATE TABLE IF NOT EXISTS aotui.schema_version (version integer NOT NULL)",
    """CREATE TABLE IF NOT EXISTS aotui.meta (
        desktop text NOT NULL, key text NOT NULL, value text NOT NULL,
        PRIMARY KEY (desktop, key))""",
    """CREATE TABLE IF NOT EXISTS aotui.apps (
        desktop text NOT NULL, app text NOT NULL, position integer NOT NULL,
        entry text NOT NULL, data bytea, checksum text,
        PRIMARY KEY (desktop, app))""",
    """CREATE TABLE IF NOT EXISTS aotui.app_parts (
        desktop text NOT NULL, app text NOT NULL, part text NOT NULL,
        data bytea, checksum text NOT NULL,
        PRIMARY KEY (desktop, app, part))""",
    """CREATE TABLE IF NOT EXISTS aotui.commands (
        desktop text NOT NULL, id text NOT NULL, reply bytea NOT NULL,
        at double precision NOT NULL,
        PRIMARY KEY (desktop, id))""",
    "CREATE INDEX IF NOT EXISTS commands_at ON aotui.commands (desktop, at)",
)
#: A write's ``meta`` rows (keys, values) and app rows (one array per column) in one statement:
#: the rows are upserted and the older parts of those apps deleted (their rows hold them now).
_WRITE_APPS = """
WITH me AS (SELECT %s::text AS name),
meta AS (
    INSERT INTO aotui.meta SELECT name, unnest(%s::text[]), unnest(%s::text[]) FROM me
    ON CONFLICT (desktop, key) DO UPDATE SET value = EXCLUDED.value
    WHERE aotui.meta.value IS DISTINCT FROM EXCLUDED.value),
rows AS (
    SELECT * FROM unnest(%s::text[], %s::integer[], %s::text[], %s::bytea[], %s::text[])
    AS r(app, position, entry, data, checksum)),
gone AS (
    DELETE FROM aotui.app_parts AS p USING me
    WHERE p.desktop = me.name AND p.app IN (SELECT app FROM rows))
INSERT INTO aotui.apps SELECT me.name, rows.* FROM me, rows
ON CONFLICT (desktop, app) DO UPDATE SET position = EXCLUDED.position, entry = EXCLUDED.entry,
    data = EXCLUDED.data, checksum = EXCLUDED.checksum
"""
#: :data:`_WRITE_APPS` with a new command's id: written only if the id was not recorded yet,
#: all in one statement (one round trip, committed alone); it answers whether it was.
_WRITE_APPS_ONCE = """
WITH me AS (SELECT %s::text AS name),
cmd AS (
    INSERT INTO aotui.commands SELECT name, %s, %s, %s FROM me
    ON CONFLICT (desktop, id) DO NOTHING RETURNING 1),
meta AS (
    INSERT INTO aotui.meta SELECT name, unnest(%s::text[]), unnest(%s::text[]) FROM me
    WHERE EXISTS (SELECT 1 FROM cmd)
    ON CONFLICT (desktop, key) DO UPDATE SET value = EXCLUDED.value
    WHERE aotui.meta.value IS DISTINCT FROM EXCLUDED.value),
rows AS (
    SELECT * FROM unnest(%s::text[], %s::integer[], %s::text[], %s::bytea[], %s::text[])
    AS r(app, position, entry, data, checksum) WHERE EXISTS (SELECT 1 FROM cmd)),
gone AS (
    DELETE FROM aotui.app_parts AS p USING me
    WHERE p.desktop = me.name AND p.app IN (SELECT app FROM rows)),
written AS (
    INSERT INTO aotui.apps SELECT me.name, rows.* FROM me, rows
    ON CONFLICT (desktop, app) DO UPDATE SET position = EXCLUDED.position, entry = EXCLUDED.entry,
        data = EXCLUDED.data, checksum = EXCLUDED.checksum)
SELECT count(*) FROM cmd
"""
_UPSERT_PART = (
    "INSERT INTO aotui.app_parts VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (desktop, app, part) DO UPDATE SET data = EXCLUDED.data, "
    "checksum = EXCLUDED.checksum"
)


def redacted(url: str) -> str:
    """``url`` without its password (``postgresql://user:***@host/db``)."""
    return re.sub(r"(://[^/:@]*):[^/@]*@", r"\1:***@", url)


class ServerIOError(StoreIOError):
    """The server or the connection to it refused a read or a write; nothing was changed."""

    def __init__(self, where: str, doing: str, detail: str) -> None:
        AotuiError.__init__(
            self,
            ErrorCode.E_IO,
            f"the store {where} cannot be {doing}: {detail}. Nothing was changed and nothing is "
            f"damaged; check that the PostgreSQL server is up and reachable and that its role "
            f"may write the schema aotui, then retry (no repair needed).",
            {"store": StoreHealth.IO_ERROR.value, "url": where},
        )
        self.detail = detail


class ServerCorrupt(StoreCorrupt):
    """The server reports the desktop's rows damaged, or they are not aotui's."""

    def __init__(self, where: str, detail: str) -> None:
        AotuiError.__init__(
            self,
            ErrorCode.E_INTERNAL,
            f"the store {where} cannot be read: it is damaged ({detail}). Nothing was changed; "
            f"restore the database from a backup, or start the desktop under another name.",
            {"store": StoreHealth.DAMAGED.value, "url": where},
        )


class ServerHeld(StoreHeld):
    """Another supervisor holds the desktop's advisory lock."""

    def __init__(self, where: str, holder: str | None) -> None:
        AotuiError.__init__(
            self,
            ErrorCode.E_LOCKED,
            f"the desktop {where} is already served by {holder or 'another supervisor'} (it "
            f"holds the desktop's lock on the server); stop that one first",
            {"store": StoreHealth.HELD.value, "url": where, "holder": holder},
        )
        self.pid = None


def from_psycopg(where: str, exc: Exception, doing: str) -> AotuiError:
    """Our error for a psycopg error met while ``doing`` (``read``, ``written``, ``opened``)."""
    detail = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, psycopg.errors.DataCorrupted | psycopg.errors.IndexCorrupted):
        return ServerCorrupt(where, detail)
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return ServerCorrupt(where, f"its tables are not aotui's ({detail})")
    return ServerIOError(where, doing, detail)


class PostgresStore:
    """One desktop's rows in a PostgreSQL database; safe to call from worker threads."""

    def __init__(self, url: str, desktop: str, synchronous: str = "FULL") -> None:
        self.url = url
        self.desktop = desktop
        self.location = f"{redacted(url)}#{desktop}"
        self.synchronous = synchronous
        self.quarantined: list[Quarantined] = []
        #: PostgreSQL recovers its own WAL; nothing is ever reported here.
        self.wal_damage: str | None = None
        self._lock = threading.Lock()
        self._recorded = 0
        self._conn = self._connect()
        try:
            self._inspect_schema()
        except BaseException:
            self._conn.close()
            raise

    # --- the connection -------------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        """A connection holding the desktop's lock (nothing is written)."""
        try:
            conn: psycopg.Connection[Any] = psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name=f"aotui {self.desktop} pid {os.getpid()}"[:63],
            )
        except psycopg.Error as exc:
            raise from_psycopg(self.location, exc, "opened") from None
        try:
            if self.synchronous != "FULL":
                conn.execute("SET synchronous_commit = off")
            # A supervisor just gone (kill -9, a closed connection) holds the lock until the
            # server has ended its session, a few milliseconds later: wait that long for it.
            # (Each success counts: a session lock taken twice is released by two unlocks.)
            deadline = time.monotonic() + LOCK_WAIT_S
            taken = self._try_lock(conn)
            while not taken and time.monotonic() < deadline:
                time.sleep(0.02)
                taken = self._try_lock(conn)
            if not taken:
                holder = self._holder(conn)
                conn.close()
                raise ServerHeld(self.location, holder)
        except psycopg.Error as exc:
            conn.close()
            raise from_psycopg(self.location, exc, "opened") from None
        return conn

    def _try_lock(self, conn: psycopg.Connection[Any]) -> bool:
        taken = conn.execute(
            "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_LOCK_SPACE, self.desktop)
        ).fetchone()
        return bool(taken and taken[0])

    def _holder(self, conn: psycopg.Connection[Any]) -> str | None:
        """Who holds the desktop's lock, as its connection names itself (``aotui NAME pid N``)."""
        row = conn.execute(
            "SELECT a.application_name, a.client_addr::text FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.classid::bigint = %s "
            "AND l.objid::bigint = (hashtext(%s)::bigint + 4294967296) %% 4294967296",
            (_LOCK_SPACE, self.desktop),
        ).fetchone()
        if row is None or not row[0]:
            return None
        return f"{row[0]}" + (f" on {row[1]}" if row[1] else "")

    def _inspect_schema(self) -> None:
        """Read the schema's version (nothing is written on open)."""
        try:
            found = self._conn.execute("SELECT to_regclass('aotui.schema_version')").fetchone()
            version = None
            if found and found[0] is not None:
                row = self._conn.execute("SELECT max(version) FROM aotui.schema_version").fetchone()
                version = row[0] if row else None
        except psycopg.Error as exc:
            raise from_psycopg(self.location, exc, "read") from None
        if version is not None and version > SCHEMA_VERSION:
            raise ServerCorrupt(
                self.location, f"schema {version} is newer than this aotui's ({SCHEMA_VERSION})"
            )
        #: Whether the tables exist (a new database has none until its first write).
        self._tables = version is not None
        self._ready = version == SCHEMA_VERSION

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Before the first write: create or upgrade the schema (inside the write's transaction)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (_LOCK_SPACE, _SCHEMA_LOCK))
        for statement in _SCHEMA:
            conn.execute(statement)
        row = conn.execute("SELECT max(version) FROM aotui.schema_version").fetchone()
        version = row[0] if row and row[0] is not None else None
        if version is None:
            conn.execute("INSERT INTO aotui.schema_version VALUES (%s)", (SCHEMA_VERSION,))
        else:
            while version < SCHEMA_VERSION:
                for statement in MIGRATIONS[version]:
                    conn.execute(statement)
                version += 1
                conn.execute("UPDATE aotui.schema_version SET version = %s", (version,))

    @contextmanager
    def _transaction(self, single: bool = False) -> Iterator[psycopg.Connection[Any]]:
        """A transaction around the block; ``single``: the block runs one statement, which
        commits by itself (the connection is in autocommit) once the schema exists."""
        with self._lock:
            if self._conn.closed or self._conn.broken:
                try:
                    self._conn = self._connect()  # the lock first, again
                except ServerHeld as held:
                    raise ServerIOError(
                        self.location, "written", f"its connection was lost and {held.message}"
                    ) from None
            try:
                if single and self._ready:
                    yield self._conn
                else:
                    with self._conn.transaction():
                        if not self._ready:
                            self._prepare(self._conn)
                        yield self._conn
            except psycopg.Error as exc:
                raise from_psycopg(self.location, exc, "written") from None
            self._tables = self._ready = True

    def close(self) -> None:
        """Release the desktop's lock and close the connection (the server would drop the lock
        with the session, but only once it has noticed the session's end)."""
        with self._lock:
            with contextlib.suppress(psycopg.Error):
                self._conn.execute(
                    "SELECT pg_advisory_unlock(%s, hashtext(%s))", (_LOCK_SPACE, self.desktop)
                )
            self._conn.close()

    # --- the desktop ----------------------------------------------------------------------------

    def load(self) -> DesktopState | None:
        """The saved desktop, or ``None`` for a new one; damaged app rows are quarantined."""
        if not self._tables:
            return None
        try:
            with self._lock, self._conn.transaction():
                meta = dict(
                    self._conn.execute(
                        "SELECT key, value FROM aotui.meta WHERE desktop = %s", (self.desktop,)
                    ).fetchall()
                )
                rows = self._conn.execute(
                    "SELECT app, entry, data, checksum FROM aotui.apps WHERE desktop = %s "
                    "ORDER BY position",
                    (self.desktop,),
                ).fetchall()
                part_rows = self._conn.execute(
                    "SELECT app, part, data, checksum FROM aotui.app_parts WHERE desktop = %s",
                    (self.desktop,),
                ).fetchall()
        except psycopg.Error as exc:
            raise from_psycopg(self.location, exc, "read") from None
        try:
            state, self.quarantined = assemble(meta, rows, part_rows)
        except Malformed as exc:
            raise ServerCorrupt(self.location, str(exc)) from None
        return state

    def save_desktop(self, state: DesktopState) -> None:
        """Write the whole desktop in one transaction; quarantined rows stay as they are."""
        keep = [entry.app for entry in state.apps] + [q.app for q in self.quarantined]
        with self._transaction() as db:
            for table in ("apps", "app_parts"):
                db.execute(
                    f"DELETE FROM aotui.{table} WHERE desktop = %s AND NOT app = ANY(%s)",
                    (self.desktop, keep),
                )
            self._write_apps(db, state, _app_rows(list(enumerate(state.apps))))

    def save_apps(
        self,
        state: DesktopState,
        entries: list[AppEntry],
        positions: Mapping[str, int] | None = None,
        command: Command | None = None,
    ) -> Command | None:
        """Write some apps and the desktop's own fields in one transaction (see
        :meth:`~supervisor.store.base.Store.save_apps`)."""
        if positions is None:
            positions = {entry.app: i for i, entry in enumerate(state.apps)}
        rows = _app_rows([(positions.get(e.app, len(positions)), e) for e in entries])
        if command is not None and not command.continues and not rows[1] and self._ready:
            return self._write_apps_once(state, rows[0], command)
        # The usual acknowledgement is one statement: it commits alone, with no BEGIN and no
        # COMMIT to wait for (3 round trips to the server become 1).
        with self._transaction(single=command is None and not rows[1]) as db:
            earlier = self._record(db, command)
            if earlier is not None:
                return earlier
            self._write_apps(db, state, rows)
        return None

    def _write_apps_once(
        self, state: DesktopState, written: list[AppRow], command: Command
    ) -> Command | None:
        """A new command's first write (the usual acknowledgement of a client's command id):
        its id and the rows in one statement, so one round trip as without an id."""
        meta = meta_rows(state)
        columns = [list(column) for column in zip(*written, strict=True)] or [[]] * 5
        frame = codec.encode(AppState(request_id=0, data=command.reply))
        with self._transaction(single=True) as db:
            recorded = db.execute(
                _WRITE_APPS_ONCE,
                (self.desktop, command.id, frame, time.time(), list(meta), list(meta.values()),
                 *columns),
            ).fetchone()  # fmt: skip
            if recorded is not None and recorded[0] == 1:
                self._recorded_one(db)
                return None
            return self._earlier(db, command.id)

    def save_parts(
        self,
        state: DesktopState,
        entry: AppEntry,
        changes: dict[str, Any],
        position: int | None = None,
        command: Command | None = None,
    ) -> Command | None:
        """Write the changed parts of ``entry``'s keyed data; the whole row when there is none."""
        with self._transaction() as db:
            earlier = self._record(db, command)
            if earlier is not None:
                return earlier
            self._write_apps(db, state)
            known = db.execute(
                "SELECT 1 FROM aotui.apps WHERE desktop = %s AND app = %s",
                (self.desktop, entry.app),
            ).fetchone()
            if known is None:
                if position is None:
                    position = next(
                        (i for i, e in enumerate(state.apps) if e.app == entry.app),
                        len(state.apps),
                    )
                self._write_apps(db, state, _app_rows([(position, merged_parts(entry, changes))]))
                return None
            with db.cursor() as cursor:
                cursor.executemany(
                    _UPSERT_PART,
                    [(self.desktop, *part_row(entry.app, p, v)) for p, v in changes.items()],
                )
        return None

    def delete_app(self, app: str, command: Command | None = None) -> Command | None:
        """Forget an uninstalled app."""
        with self._transaction() as db:
            earlier = self._record(db, command)
            if earlier is not None:
                return earlier
            for table in ("apps", "app_parts"):
                db.execute(
                    f"DELETE FROM aotui.{table} WHERE desktop = %s AND app = %s",
                    (self.desktop, app),
                )
        return None

    def reply_to(self, command_id: str) -> Command | None:
        """The command recorded under ``command_id``, with its first reply, or ``None``."""
        if not self._tables:
            return None
        try:
            with self._lock:
                row = self._conn.execute(
                    "SELECT reply FROM aotui.commands WHERE desktop = %s AND id = %s",
                    (self.desktop, command_id),
                ).fetchone()
        except psycopg.Error as exc:
            raise from_psycopg(self.location, exc, "read") from None
        return None if row is None else Command(command_id, _reply(row[0]))

    def record_reply(self, command: Command) -> Command | None:
        """Record ``command`` in a transaction of its own (see :meth:`Store.record_reply`)."""
        with self._transaction() as db:
            return self._record(db, command)

    def reserve_snapshot_ids(self, count: int = SNAPSHOT_ID_BLOCK) -> int:
        """The first of ``count`` fresh snapshot ids, durably never handed out again."""
        with self._transaction() as db:
            row = db.execute(
                "INSERT INTO aotui.meta VALUES (%s, 'snapshot_ids', %s) "
                "ON CONFLICT (desktop, key) DO UPDATE "
                "SET value = (aotui.meta.value::bigint + %s)::text RETURNING value",
                (self.desktop, str(count), count),
            ).fetchone()
        assert row is not None
        return int(row[0]) - count + 1

    def space_problem(self, needed: int) -> str | None:
        """Never known beforehand: a server whose disk is full refuses the write (``E_IO``)."""
        return None

    def remember_identity(self, state: DesktopState) -> None:
        """Nothing to do: the desktop's own rows say it exists, on the server."""

    def wal_damage_reported(self) -> None:
        """Nothing to do: see :attr:`wal_damage`."""

    # --- rows -----------------------------------------------------------------------------------

    def _record(self, db: psycopg.Connection[Any], command: Command | None) -> Command | None:
        """Record ``command`` in this transaction; the earlier one if its id was recorded
        (unless ``command.continues``: then its reply replaces the recorded one)."""
        if command is None:
            return None
        now = time.time()
        frame = codec.encode(AppState(request_id=0, data=command.reply))
        if command.continues:
            db.execute(
                "INSERT INTO aotui.commands VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (desktop, id) DO UPDATE SET reply = excluded.reply",
                (self.desktop, command.id, frame, now),
            )
            return None
        inserted = db.execute(
            "INSERT INTO aotui.commands VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (desktop, id) DO NOTHING RETURNING 1",
            (self.desktop, command.id, frame, now),
        ).fetchone()
        if inserted is None:
            return self._earlier(db, command.id)
        self._recorded_one(db)
        return None

    def _earlier(self, db: psycopg.Connection[Any], command_id: str) -> Command:
        """The command recorded under ``command_id`` (in this transaction: it is there)."""
        row = db.execute(
            "SELECT reply FROM aotui.commands WHERE desktop = %s AND id = %s",
            (self.desktop, command_id),
        ).fetchone()
        assert row is not None
        return Command(command_id, _reply(row[0]))

    def _recorded_one(self, db: psycopg.Connection[Any]) -> None:
        """A command was recorded: replies older than a day go, once every so many."""
        self._recorded += 1
        if self._recorded % _PRUNE_EVERY == 0:
            db.execute(
                "DELETE FROM aotui.commands WHERE desktop = %s AND at < %s",
                (self.desktop, time.time() - REPLY_KEEP_S),
            )

    def _write_apps(
        self, db: psycopg.Connection[Any], state: DesktopState, rows: _Rows | None = None
    ) -> None:
        """The desktop's ``meta`` rows and the apps' rows whole (:func:`_app_rows`) in one
        statement, one round trip to the server (the apps' older parts go); then the parts of
        keyed data too large for one frame."""
        meta = meta_rows(state)
        written, parts = rows or ([], [])
        columns = [list(column) for column in zip(*written, strict=True)] or [[]] * 5
        db.execute(_WRITE_APPS, (self.desktop, list(meta), list(meta.values()), *columns))
        if parts:
            with db.cursor() as cursor:
                cursor.executemany(_UPSERT_PART, [(self.desktop, *part) for part in parts])


#: App rows, and the part rows written with them (keyed data too large for one frame).
_Rows = tuple[list[AppRow], list[PartRow]]


def _app_rows(placed: list[tuple[int, AppEntry]]) -> _Rows:
    """Each ``(position, entry)`` as its row whole, and the parts written with them."""
    rows, parts = [], []
    for position, entry in placed:
        row, its_parts = app_rows(position, entry)
        rows.append(row)
        parts += its_parts
    return rows, parts


def _reply(frame: Any) -> Any:
    """A recorded reply, as it was recorded."""
    decoded = codec.decode(bytes(frame))
    assert isinstance(decoded, AppState)
    return decoded.data
