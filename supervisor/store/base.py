"""What a desktop asks of its store: the :class:`Store` protocol, and the store a config names.

Two stores implement it: :class:`~supervisor.store.store.DesktopStore` (the default: one SQLite
file per desktop under ``AOTUI_HOME``) and :class:`~supervisor.store.postgres.PostgresStore`
(``store = "postgresql://…"``: a PostgreSQL database that many desktops can share). Both give the
same guarantees:

- each write is one transaction, committed (durably, for ``synchronous="FULL"``) before it
  returns: an acknowledgement is sent only after its data is in the store;
- a write may carry the :class:`Command` it answers (an id the client chose and the reply it
  gets). The id goes into the store's ``commands`` table in the same transaction as the data, and
  a write whose id is there already changes nothing and returns the command first recorded: a
  command retried after an ambiguous failure (a lost connection, a desktop that moved) is applied
  at most once and answered with its first reply (:meth:`Store.reply_to` looks one up before the
  command runs again);
- a damaged row quarantines its app alone (:attr:`Store.quarantined`), and nothing is written to
  a store before it is loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.store.rows import Quarantined
from aotui.supervisor.store.state import AppEntry, DesktopState

__all__ = [
    "COMMAND_ID_MAX",
    "REPLY_KEEP_S",
    "SNAPSHOT_ID_BLOCK",
    "Command",
    "Store",
    "is_server_store",
    "open_store",
]

#: Snapshot ids are reserved in blocks, so ids from before a crash are never handed out again.
SNAPSHOT_ID_BLOCK = 100_000
#: Recorded replies are kept this long (a retry comes within seconds; a day is ample), then
#: dropped as later commands are recorded.
REPLY_KEEP_S = 24 * 3600.0
#: The longest command id a store records.
COMMAND_ID_MAX = 200


@dataclass(frozen=True)
class Command:
    """A client's command: its id (unique per desktop, chosen by the client) and its reply."""

    id: str
    #: The reply as sent (any plain value: it is stored as a codec frame, bytes included).
    reply: Any
    #: A later write of the same run of the command: its id is recorded already (by this run),
    #: and the write goes ahead, replacing the recorded reply with this one (what the command
    #: has done so far), instead of being refused.
    continues: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not 0 < len(self.id) <= COMMAND_ID_MAX:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"a command id is a string of 1 to {COMMAND_ID_MAX} characters, "
                f"got {self.id!r:.60}",
            )


class Store(Protocol):
    """One desktop's store; every method may be called from a worker thread."""

    #: Where it is, for ``status`` and messages (a path, or a URL without its password).
    location: str
    #: App rows too damaged to load, as of the last :meth:`load` (kept untouched).
    quarantined: list[Quarantined]
    #: Damage found after a crash that the desktop reports once (SQLite's WAL tail), or ``None``.
    wal_damage: str | None

    def load(self) -> DesktopState | None:
        """The saved desktop, or ``None`` for a new store; damaged app rows are quarantined."""
        ...

    def save_desktop(self, state: DesktopState) -> None:
        """Write the whole desktop in one transaction (quarantined rows stay as they are)."""
        ...

    def save_apps(
        self,
        state: DesktopState,
        entries: list[AppEntry],
        positions: Mapping[str, int] | None = None,
        command: Command | None = None,
    ) -> Command | None:
        """Write some apps and the desktop's own fields in one transaction; with ``command``,
        only if its id is not recorded yet: else nothing is written and the first one returned."""
        ...

    def save_parts(
        self,
        state: DesktopState,
        entry: AppEntry,
        changes: dict[str, Any],
        position: int | None = None,
        command: Command | None = None,
    ) -> Command | None:
        """Write the changed parts of ``entry``'s keyed data (``None``: a part gone); ``command``
        as for :meth:`save_apps`."""
        ...

    def delete_app(self, app: str, command: Command | None = None) -> Command | None:
        """Forget an uninstalled app; ``command`` as for :meth:`save_apps`."""
        ...

    def reply_to(self, command_id: str) -> Command | None:
        """The command recorded under ``command_id`` (with its first reply), or ``None``."""
        ...

    def record_reply(self, command: Command) -> Command | None:
        """Record ``command`` alone (a command that wrote nothing, or its final reply after
        writes that recorded what it had done so far); ``continues`` as for a write."""
        ...

    def reserve_snapshot_ids(self, count: int = SNAPSHOT_ID_BLOCK) -> int:
        """The first of ``count`` fresh snapshot ids, durably never handed out again."""
        ...

    def space_problem(self, needed: int) -> str | None:
        """Why a write of about ``needed`` bytes would not fit, when that can be known before."""
        ...

    def remember_identity(self, state: DesktopState) -> None:
        """Record that this desktop exists, so a lost store is never taken for a new one."""
        ...

    def wal_damage_reported(self) -> None:
        """The desktop has reported :attr:`wal_damage`."""
        ...

    def close(self) -> None:
        """Release the store (its file, its connection, its lock)."""
        ...


def is_server_store(location: str) -> bool:
    """Whether a config's ``store`` names a PostgreSQL server (else the SQLite default)."""
    return location.startswith(("postgresql://", "postgres://"))


def open_store(location: str, desktop: str, path: Path, synchronous: str = "FULL") -> Store:
    """The store a config's ``store`` names for ``desktop``: ``""`` the SQLite file ``path``,
    ``postgresql://…`` a PostgreSQL database (the ``postgres`` extra: psycopg 3)."""
    if is_server_store(location):
        try:
            from aotui.supervisor.store.postgres import PostgresStore
        except ImportError:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                "store = 'postgresql://…' needs psycopg 3: pip install 'aotui[postgres]' "
                "(or 'psycopg[binary]') in aotui's environment",
            ) from None
        return PostgresStore(location, desktop, synchronous)
    from aotui.supervisor.store.store import DesktopStore

    return DesktopStore(path, synchronous)
