"""How a desktop's state reaches its store: one strategy per durability mode.

:class:`~supervisor.desktop.desktop.Desktop` keeps the commands over apps; what it asks of its
store is this seam (issue 25 puts a second store behind it):

- :class:`Unstored` — ``durability = "off"``: a null object; an acknowledged state is adopted in
  memory and nothing is written (a crashed desktop starts empty).
- :class:`Acknowledged` — ``"ack"``: an effect is committed (fsync) before its acknowledgement;
  a store that refuses a write makes state changes ``E_IO`` until a retry writes the whole
  desktop again.
- :class:`Batched` — ``"batch"``: acknowledged at once, the changed apps written every
  ``durability_batch_ms`` (a crash may lose that much).

Each also holds the desktop's :class:`~supervisor.store.budget.DataBudget` (what each app's
keyed data may grow to) and builds the stored form of the desktop (:func:`desktop_state`).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Protocol

from aotui.protocol.api import AppStatus
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.errors import Outcome as ReplyOutcome
from aotui.supervisor.config import DesktopConfig, Durability
from aotui.supervisor.desktop.command_ids import REMEMBERED, RUNNING
from aotui.supervisor.paths import store_path
from aotui.supervisor.store.base import Command, Store, open_store
from aotui.supervisor.store.budget import DataBudget
from aotui.supervisor.store.faults import StoreIOError
from aotui.supervisor.store.lock import StoreLock
from aotui.supervisor.store.state import AppEntry, DesktopState

if TYPE_CHECKING:
    from aotui.supervisor.desktop.app_record import AppRecord
    from aotui.supervisor.store.rows import Quarantined

__all__ = [
    "STORE_MIN_FREE_BYTES",
    "STORE_RETRY_S",
    "Acknowledged",
    "Batched",
    "Persistence",
    "Stored",
    "Unstored",
    "app_entry",
    "desktop_state",
    "persistence_for",
]

#: How often a desktop whose store refuses writes tries again.
STORE_RETRY_S = 0.5
#: Below this much free space on the store's disk, state changes are refused before they run.
STORE_MIN_FREE_BYTES = 256 << 10

#: The status an app is stored with (it is opened again in it).
_STORED_STATUS = {
    AppStatus.RUNNING: "running",
    AppStatus.STARTING: "running",
    AppStatus.RESTARTING: "running",
    AppStatus.COLLAPSED: "collapsed",
    AppStatus.FAILED: "failed",
}


class Stored(Protocol):
    """What of a desktop is stored, and where it says what happened to its store."""

    desktop_id: str
    created: float
    next_app: int
    apps: list[AppRecord]

    def log(self, text: str, owner: str | None = None) -> None:
        """A line in System Logs."""


def app_entry(app: AppRecord) -> AppEntry:
    """``app`` as it is stored: ids, mounted views, status and acknowledged data."""
    mounted = app.views.mounted_keys() if app.is_live else list(app.restore_views)
    return AppEntry(
        app=app.app_id,
        manifest_id=app.manifest.id,
        app_dir=str(app.manifest.app_dir),
        status=_STORED_STATUS.get(app.status, "not running"),
        mounted=mounted,
        hidden=sorted(app.views.hidden),
        view_ids=dict(app.views.ids),
        data=app.saved_state,
        restarts=app.restarts,
        last_exit=app.last_exit,
    )


def desktop_state(desktop: Stored) -> DesktopState:
    """The desktop as a :class:`DesktopState` (seed 000 §9)."""
    entries = [app_entry(app) for app in desktop.apps]
    return DesktopState(desktop.desktop_id, desktop.created, time.time(), desktop.next_app, entries)


def _header(desktop: Stored) -> tuple[DesktopState, dict[str, int]]:
    """The desktop's own fields without app entries, and each app's place among them.

    What a write of some apps needs besides their entries: building every app's entry (its view
    ids, mounted views, data) for each acknowledgement cost every operation time in proportion
    to the whole desktop.
    """
    state = DesktopState(desktop.desktop_id, desktop.created, time.time(), desktop.next_app, [])
    return state, {app.app_id: i for i, app in enumerate(desktop.apps)}


def _merged(app: AppRecord, changes: dict[str, Any]) -> dict[str, Any]:
    """The app's keyed data with ``changes`` (``None``: a part gone).

    A new dict, never the old one changed in place: a write of the whole desktop may be
    encoding the old one in a thread right now. (A copy of the keys, not of the values.)
    """
    state = app.saved_state
    assert isinstance(state, dict)
    merged = {**state, **changes}
    for part, value in changes.items():
        if value is None:
            del merged[part]
    return merged


class Persistence:
    """A desktop's store under one durability mode: what :class:`Desktop` asks of it. This base
    stores nothing; each mode is a subclass."""

    mode = Durability.OFF

    def __init__(self, desktop: Stored, config: DesktopConfig) -> None:
        self.desktop = desktop
        self.config = config
        #: What each app's keyed data is held to (store/budget.py).
        self.budget = DataBudget()
        #: True once the stored desktop is loaded: only then may anything be written to it.
        self.loaded = False
        #: Replies to commands with ids, when the store does not record them (newest last).
        self._replies: OrderedDict[str, Command] = OrderedDict()

    @property
    def quarantined(self) -> list[Quarantined]:
        """Rows of the store too damaged to load (their apps stay out)."""
        return []

    def open(self) -> DesktopState | None:
        """Lock and read the store (nothing is written before this returns)."""
        return None

    async def started(self) -> None:
        """The desktop has loaded and opened its apps: write it whole, begin any flushing."""
        self.loaded = True

    async def stop(self) -> None:
        """Write what is not yet written and release the store."""

    async def persist(self, *apps: AppRecord) -> None:
        """Store ``apps`` (and the desktop's own fields)."""

    async def commit(self, app: AppRecord, state: Any) -> None:
        """Make ``state`` the app's acknowledged state."""
        app.adopt_state(state)

    async def commit_parts(self, app: AppRecord, changes: dict[str, Any]) -> None:
        """Like :meth:`commit` for keyed data: only the changed parts."""
        state = _merged(app, changes)
        app.adopt_state(state)
        self.budget.adopted(app.app_id, state)

    async def forget(self, app: AppRecord) -> None:
        """``app`` was uninstalled."""
        self.budget.forget(app.app_id)

    def require_writable(self) -> None:
        """``E_IO`` before a state-changing command while the store refuses writes."""

    async def reply_to(self, command_id: str) -> Command | None:
        """The command recorded under ``command_id`` (desktop/command_ids.py), or ``None``."""
        return self._replies.get(command_id)

    async def record_reply(self, command: Command) -> None:
        """Record a command's reply (its id too, if no write of its run recorded it)."""
        self._replies[command.id] = command
        self._replies.move_to_end(command.id)
        while len(self._replies) > REMEMBERED:
            self._replies.popitem(last=False)

    def reserve_ids(self, count: int) -> int:  # pragma: no cover - the registry never asks
        """A durable block of snapshot ids: none without a store."""
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        """The store's state for ``status``: ``ok``, ``failing`` (with why) or ``off``."""
        return {"state": "off"}


class Unstored(Persistence):
    """``off``: nothing is stored; an acknowledged state is only adopted in memory."""


class Acknowledged(Persistence):
    """``ack``: each acknowledged effect is in the store before its acknowledgement."""

    mode = Durability.ACK
    #: SQLite's ``synchronous`` for this mode (PostgreSQL: ``synchronous_commit`` on, else off).
    SYNCHRONOUS = "FULL"

    #: Command ids go into the store with their command's effects (desktop/command_ids.py).
    RECORDS_COMMANDS = True

    def __init__(self, desktop: Stored, config: DesktopConfig) -> None:
        super().__init__(desktop, config)
        path = store_path(config.desktop)
        self.path = path
        #: The SQLite file, or the database ``config.store`` names (supervisor/store/base.py).
        self.store: Store | None = None
        self.lock: StoreLock | None = None
        #: Why the store refuses writes, while it does (state-changing commands get ``E_IO``).
        self.problem: str | None = None
        self._recovery: asyncio.Task[None] | None = None

    @property
    def quarantined(self) -> list[Quarantined]:
        return self.store.quarantined if self.store is not None else []

    def open(self) -> DesktopState | None:
        self.lock = StoreLock.acquire(self.path)  # one store, one supervisor, for our whole life
        self.store = open_store(self.config.store, self.config.desktop, self.path, self.SYNCHRONOUS)
        saved = self.store.load()
        if self.store.wal_damage:
            self.desktop.log(
                f"The desktop store was damaged after a crash: {self.store.wal_damage}."
            )
            self.store.wal_damage_reported()
        for row in self.store.quarantined:
            self.desktop.log(
                f"{row.app} ({row.manifest_id or 'unknown app'}) is quarantined: its stored row "
                f"is damaged ({row.problem}). The other apps loaded; its row is kept untouched "
                f"in {self.store.location} and its app_N is never reused."
            )
        return saved

    async def started(self) -> None:
        await super().started()
        try:
            await self._write_whole()
        except (StoreIOError, OSError) as exc:
            self.failed(exc)

    async def stop(self) -> None:
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.gather(self._recovery, return_exceptions=True)
        if self.store is None:
            return
        if self.loaded:
            # Only a desktop that finished loading may write: a failed start leaves its store
            # as it found it.
            try:
                await asyncio.to_thread(self.store.save_desktop, desktop_state(self.desktop))
            except (AotuiError, OSError) as exc:
                self.desktop.log(f"Could not write the desktop store at shutdown: {exc}")
        self.store.close()

    async def _write_whole(self) -> None:
        assert self.store is not None
        await asyncio.to_thread(self.store.save_desktop, desktop_state(self.desktop))
        await asyncio.to_thread(self.store.remember_identity, desktop_state(self.desktop))

    def _carry(self) -> Command | None:
        """The client's command this write records, when one with an id runs in this task."""
        run = RUNNING.get()
        return run.carry() if run is not None and self.RECORDS_COMMANDS else None

    def _carried(self, command: Command | None, earlier: Command | None) -> None:
        """After a write that carried ``command``: the run has recorded what it did so far."""
        if earlier is not None:  # only a second supervisor on one store could get here
            raise AotuiError(
                ErrorCode.E_INTERNAL,
                f"command {earlier.id!r} was recorded by another run while this one ran; "
                f"nothing of this run was stored",
                {"outcome": ReplyOutcome.NOT_APPLIED},
            )
        run = RUNNING.get()
        if command is not None and run is not None:
            run.recorded, run.wrote = command.reply, True

    async def reply_to(self, command_id: str) -> Command | None:
        if not self.RECORDS_COMMANDS:
            return await super().reply_to(command_id)
        assert self.store is not None
        try:
            return await asyncio.to_thread(self.store.reply_to, command_id)
        except StoreIOError as exc:
            raise AotuiError(
                ErrorCode.E_IO,
                f"the desktop's store could not be read to look command {command_id!r} up "
                f"({exc.detail}); nothing was run. Send it again with the same id.",
                {"outcome": ReplyOutcome.NOT_APPLIED},
            ) from None

    async def record_reply(self, command: Command) -> None:
        if not self.RECORDS_COMMANDS:
            return await super().record_reply(command)
        assert self.store is not None
        try:
            await asyncio.to_thread(self.store.record_reply, command)
        except StoreIOError as exc:
            # The command's effects are stored (with what it had done so far); only its last
            # reply is not: a retry is told what the store holds.
            self.failed(exc)

    async def persist(self, *apps: AppRecord) -> None:
        assert self.store is not None
        entries = [app_entry(app) for app in apps]
        header, positions = _header(self.desktop)
        command = self._carry()
        try:
            earlier = await asyncio.to_thread(
                self.store.save_apps, header, entries, positions, command
            )
        except StoreIOError as exc:
            self.failed(exc)
            raise AotuiError(
                ErrorCode.E_IO,
                f"the change took effect, but the desktop's store could not record it "
                f"({exc.detail}); it is kept in memory and written when the store can be written "
                f"again. Until then state-changing commands are refused; snapshots and status "
                f"still work.",
                {"store": "failing"},
            ) from None
        self._carried(command, earlier)

    async def commit(self, app: AppRecord, state: Any) -> None:
        """Stored first, then adopted."""
        assert self.store is not None
        entry = app_entry(app)
        entry.data = state
        header, positions = _header(self.desktop)
        command = self._carry()
        app.storing_begins()  # a worker started meanwhile starts from this data (wait_stored)
        try:
            earlier = await asyncio.to_thread(
                self.store.save_apps, header, [entry], positions, command
            )
            self._carried(command, earlier)
            app.adopt_state(state)
        except StoreIOError as exc:
            self.failed(exc)
            raise
        finally:
            app.storing_ends()

    async def commit_parts(self, app: AppRecord, changes: dict[str, Any]) -> None:
        """Only the changed parts are written, then adopted."""
        assert self.store is not None
        app.storing_begins()  # a worker started meanwhile starts from this data (wait_stored)
        try:
            entry = app_entry(app)  # its data: the parts as they were, before ``changes``
            header, positions = _header(self.desktop)
            command = self._carry()
            try:
                earlier = await asyncio.to_thread(
                    self.store.save_parts, header, entry, changes, positions[app.app_id], command
                )
            except StoreIOError as exc:
                self.failed(exc)
                raise
            self._carried(command, earlier)
            state = _merged(app, changes)
            app.adopt_state(state)
        finally:
            app.storing_ends()
        self.budget.adopted(app.app_id, state)

    async def forget(self, app: AppRecord) -> None:
        await super().forget(app)
        assert self.store is not None
        command = self._carry()
        try:
            earlier = await asyncio.to_thread(self.store.delete_app, app.app_id, command)
        except StoreIOError as exc:
            self.failed(exc)
            raise AotuiError(
                ErrorCode.E_IO,
                f"{app.app_id} was uninstalled, but the store could not record it "
                f"({exc.detail}); it is written when the store can be written again.",
                {"store": "failing"},
            ) from None
        self._carried(command, earlier)

    def reserve_ids(self, count: int) -> int:
        """A durable block of snapshot ids (a small write, once per ``count`` pulls)."""
        assert self.store is not None
        try:
            return self.store.reserve_snapshot_ids(count)
        except StoreIOError as exc:
            self.failed(exc)
            raise

    def require_writable(self) -> None:
        if self.store is not None and self.problem is None:
            # A full disk is seen before the effect, not after (one statvfs, microseconds).
            full = self.store.space_problem(STORE_MIN_FREE_BYTES)
            if full is not None:
                self.failed(full)
        if self.problem is not None:
            raise AotuiError(
                ErrorCode.E_IO,
                f"the desktop's store cannot be written ({self.problem}); state-changing "
                f"commands are refused until it can, and nothing was changed. Snapshots and "
                f"status still work; the desktop retries every {STORE_RETRY_S} s by itself "
                f"(free disk space or fix the disk).",
                {"store": "failing"},
            )

    def status(self) -> dict[str, Any]:
        if self.store is None:
            return {"state": "off"}
        return {
            "state": "failing" if self.problem else "ok",
            "problem": self.problem,
            "path": self.store.location,
            "quarantined": [q.app for q in self.store.quarantined],
            "wal_damage": self.store.wal_damage,
        }

    def failed(self, exc: Exception | str) -> None:
        """The store refused a write (why): refuse state changes until a retry succeeds."""
        detail = exc.detail if isinstance(exc, StoreIOError) else str(exc)
        if self.problem is None:
            self.desktop.log(
                f"The desktop store cannot be written ({detail}); state-changing commands are "
                f"refused until it can. Snapshots still work."
            )
        self.problem = detail
        if self._recovery is None or self._recovery.done():
            self._recovery = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """Retry until the whole desktop is written again, then accept state changes."""
        assert self.store is not None
        while self.problem is not None:
            await asyncio.sleep(STORE_RETRY_S)
            full = self.store.space_problem(STORE_MIN_FREE_BYTES)
            if full is not None:
                self.problem = full
                continue
            try:
                await self._write_whole()
            except (AotuiError, OSError) as exc:
                self._unwritten()
                self.problem = exc.detail if isinstance(exc, StoreIOError) else str(exc)
                continue
            self.problem = None
            self.desktop.log(
                "The desktop store can be written again; state-changing commands work."
            )

    def _unwritten(self) -> None:
        """A whole write failed: what was waiting to be written still waits (batch mode)."""


class Batched(Acknowledged):
    """``batch``: acknowledged at once; the changed apps are written every
    ``durability_batch_ms``."""

    mode = Durability.BATCH
    SYNCHRONOUS = "NORMAL"
    #: Effects are written after their acknowledgement: ids are remembered in memory only.
    RECORDS_COMMANDS = False

    def __init__(self, desktop: Stored, config: DesktopConfig) -> None:
        super().__init__(desktop, config)
        self._dirty: set[str] = set()
        self._writing: set[str] = set()
        self._flusher: asyncio.Task[None] | None = None

    async def started(self) -> None:
        await super().started()
        self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await super().stop()

    async def persist(self, *apps: AppRecord) -> None:
        self._dirty.update(app.app_id for app in apps)

    async def commit(self, app: AppRecord, state: Any) -> None:
        app.adopt_state(state)
        await self.persist(app)

    async def commit_parts(self, app: AppRecord, changes: dict[str, Any]) -> None:
        state = _merged(app, changes)
        app.adopt_state(state)
        self.budget.adopted(app.app_id, state)
        await self.persist(app)

    async def _write_whole(self) -> None:
        # Everything dirty goes with the whole desktop; if the write fails it stays dirty.
        self._writing, self._dirty = self._dirty, set()
        await super()._write_whole()
        self._writing = set()

    def _unwritten(self) -> None:
        self._dirty |= self._writing
        self._writing = set()

    async def _flush(self) -> None:
        assert self.store is not None
        while True:
            await asyncio.sleep(self.config.durability_batch_ms / 1000)
            if not self._dirty:
                continue
            dirty, self._dirty = self._dirty, set()
            entries = [app_entry(app) for app in self.desktop.apps if app.app_id in dirty]
            header, positions = _header(self.desktop)
            try:
                await asyncio.to_thread(self.store.save_apps, header, entries, positions)
            except (AotuiError, OSError) as exc:
                self._dirty |= dirty
                self.failed(exc)


def persistence_for(desktop: Stored, config: DesktopConfig) -> Persistence:
    """The strategy of ``config.durability``."""
    kinds: dict[Durability, type[Persistence]] = {
        Durability.OFF: Unstored,
        Durability.ACK: Acknowledged,
        Durability.BATCH: Batched,
    }
    return kinds[Durability(config.durability)](desktop, config)
