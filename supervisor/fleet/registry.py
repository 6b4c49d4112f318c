"""The fleet's own rows in the desktops' PostgreSQL database: where each desktop is, and which
client commands it has run.

Two tables beside the store's (schema ``aotui``):

- ``fleet_desktops``: one row per desktop the fleet ever started: its state (``running``,
  ``hibernated``), the Ray node it last ran on, when it was last used. A hibernated desktop is
  this row and its store's rows, nothing else.
- ``fleet_commands``: the command ids a desktop actor has taken, ``pending`` from before the call
  reaches the supervisor until its reply is recorded beside it (``done``). A command retried with
  the same id (after Ray said the call "may have executed": the actor's node was lost) is never
  run twice: a ``done`` one is answered with its first reply; a ``pending`` one was cut off by the
  loss, and is answered with an error saying that it may or may not have taken effect.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["DesktopRow", "Registry"]

_SCHEMA = (
    "CREATE SCHEMA IF NOT EXISTS aotui",
    """CREATE TABLE IF NOT EXISTS aotui.fleet_desktops (
        name text PRIMARY KEY, state text NOT NULL, node text NOT NULL DEFAULT '',
        last_use double precision NOT NULL, settings text NOT NULL DEFAULT '{}')""",
    """CREATE TABLE IF NOT EXISTS aotui.fleet_commands (
        desktop text NOT NULL, id text NOT NULL, state text NOT NULL, reply bytea,
        at double precision NOT NULL, PRIMARY KEY (desktop, id))""",
)
#: Serializes making the tables (two routers started at once).
_SCHEMA_LOCK = (0x616F7475, 1)
#: Recorded commands are dropped after a day (a retry comes within seconds).
KEEP_S = 24 * 3600.0


@dataclass(frozen=True)
class DesktopRow:
    """A desktop as the registry last recorded it."""

    name: str
    state: str
    node: str
    last_use: float


class Registry:
    """A connection to the fleet's tables (thread-safe: calls are serialized)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
            with self._conn.transaction():
                self._conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", _SCHEMA_LOCK)
                for statement in _SCHEMA:
                    self._conn.execute(statement)
        except psycopg.Error as exc:
            raise AotuiError(
                ErrorCode.E_IO, f"the fleet cannot use its PostgreSQL database: {exc}"
            ) from None

    def close(self) -> None:
        self._conn.close()

    def _run(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                cursor = self._conn.execute(statement, params)
            except psycopg.OperationalError:
                # A lost connection (the server restarted): once more on a new one.
                self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
                cursor = self._conn.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []

    # --- desktops --------------------------------------------------------------------------------

    def record(self, name: str, state: str, node: str, last_use: float | None = None) -> None:
        """Record where ``name`` is and what it is doing."""
        self._run(
            "INSERT INTO aotui.fleet_desktops VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO "
            "UPDATE SET state = EXCLUDED.state, node = EXCLUDED.node, "
            "last_use = EXCLUDED.last_use",
            (name, state, node, time.time() if last_use is None else last_use),
        )

    def desktop(self, name: str) -> DesktopRow | None:
        rows = self._run(
            "SELECT name, state, node, last_use FROM aotui.fleet_desktops WHERE name = %s",
            (name,),
        )
        return DesktopRow(*rows[0]) if rows else None

    def desktops(self) -> list[DesktopRow]:
        rows = self._run("SELECT name, state, node, last_use FROM aotui.fleet_desktops ORDER BY 1")
        return [DesktopRow(*row) for row in rows]

    # --- commands --------------------------------------------------------------------------------

    def begin(self, desktop: str, command_id: str) -> tuple[str, Any] | None:
        """Take ``command_id`` for a run (``None``); or, when it was taken before, its state and
        its first reply (``("done", reply)``, ``("pending", None)``)."""
        taken = self._run(
            "INSERT INTO aotui.fleet_commands VALUES (%s, %s, 'pending', NULL, %s) "
            "ON CONFLICT (desktop, id) DO NOTHING RETURNING 1",
            (desktop, command_id, time.time()),
        )
        if taken:
            return None
        rows = self._run(
            "SELECT state, reply FROM aotui.fleet_commands WHERE desktop = %s AND id = %s",
            (desktop, command_id),
        )
        state, reply = rows[0]
        return state, None if reply is None else json.loads(bytes(reply))

    def finish(self, desktop: str, command_id: str, reply: Any) -> None:
        """Record the reply ``command_id`` got (JSON-able); old commands are dropped now and
        then."""
        now = time.time()
        self._run(
            "UPDATE aotui.fleet_commands SET state = 'done', reply = %s, at = %s "
            "WHERE desktop = %s AND id = %s",
            (json.dumps(reply).encode(), now, desktop, command_id),
        )
        if int(now * 1000) % 512 == 0:
            self._run(
                "DELETE FROM aotui.fleet_commands WHERE desktop = %s AND at < %s",
                (desktop, now - KEEP_S),
            )
