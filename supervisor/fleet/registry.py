"""The fleet's own rows in the desktops' PostgreSQL database: where each desktop is.

One table beside the store's (schema ``aotui``), ``fleet_desktops``: one row per desktop the fleet
ever started: its state (``running``, ``hibernated``), the Ray node it last ran on, when it was
last used. A hibernated desktop is this row and its store's rows, nothing else. (Which commands a
desktop has run is the store's: each supervisor keeps its clients' command ids with their
effects, desktop/command_ids.py.)
"""

from __future__ import annotations

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
)
#: Serializes making the tables (two routers started at once).
_SCHEMA_LOCK = (0x616F7475, 1)


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
