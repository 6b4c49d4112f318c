"""One installed app as the desktop tracks it: its state machine, views, logs and worker.

This module is the one owner of an app's record: every other module reads its fields and changes
them only through its methods (``tests/test_app_record_owner.py`` holds the rest of the tree to
that), so each change of an app's state is one named step, found in one place.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aotui.protocol.api import AppStatus
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.structure import sanitize
from aotui.supervisor.desktop.view_tree import ViewTree
from aotui.supervisor.manifest import Manifest
from aotui.supervisor.workers.restart import RestartTracker

if TYPE_CHECKING:
    from aotui.supervisor.store.state import AppEntry
    from aotui.supervisor.workers.exits import ExitReason
    from aotui.supervisor.workers.handle import WorkerHandle

__all__ = ["TRANSITIONS", "AppRecord", "AppStatus"]


#: Allowed transitions; :meth:`AppRecord.transition` refuses anything else.
TRANSITIONS: dict[AppStatus, frozenset[AppStatus]] = {
    AppStatus.NOT_RUNNING: frozenset({AppStatus.STARTING}),
    AppStatus.STARTING: frozenset(
        {AppStatus.RUNNING, AppStatus.NOT_RUNNING, AppStatus.FAILED, AppStatus.RESTARTING}
    ),
    AppStatus.RUNNING: frozenset(
        {AppStatus.COLLAPSED, AppStatus.STOPPING, AppStatus.RESTARTING, AppStatus.FAILED}
    ),
    AppStatus.COLLAPSED: frozenset(
        {AppStatus.RUNNING, AppStatus.STOPPING, AppStatus.RESTARTING, AppStatus.FAILED}
    ),
    AppStatus.RESTARTING: frozenset({AppStatus.STARTING, AppStatus.FAILED, AppStatus.NOT_RUNNING}),
    AppStatus.FAILED: frozenset({AppStatus.STARTING}),
    AppStatus.STOPPING: frozenset({AppStatus.NOT_RUNNING}),
}


@dataclass
class AppRecord:
    """An installed app: identity, state, views, operation log and crash history.

    Its fields are read anywhere and written only by its methods (the module docstring says why).
    """

    app_id: str
    manifest: Manifest
    log_entries: int = 50
    status: AppStatus = AppStatus.NOT_RUNNING
    views: ViewTree = field(default_factory=ViewTree)
    worker: WorkerHandle | None = None
    #: The app's serialized data as of its last acknowledged operation.
    saved_state: Any = None
    #: View keys to mount again when a restarted worker starts.
    restore_views: list[str] = field(default_factory=list)
    restarts: int = 0
    #: Why the last worker ended: ``exit 1``, ``signal 9``, ``timeout``…
    last_exit: str = ""
    #: Applies the app's restart policy to its exits.
    restart_tracker: RestartTracker = field(default_factory=RestartTracker)
    #: Why the supervisor is killing the worker (``memory limit``…), until its exit is reported.
    kill_reason: str = ""
    op_log: deque[tuple[float, str]] = field(init=False)
    on_transition: Callable[[AppRecord, AppStatus, AppStatus], None] | None = None
    #: Set at the next status change, then replaced: what a wait for a status awaits.
    _moved: asyncio.Event = field(
        default_factory=asyncio.Event, init=False, repr=False, compare=False
    )
    #: Acknowledged data still being written to the store (it is adopted once written).
    storing: int = field(default=0, init=False)
    #: Set while nothing is being stored: what a worker's start waits for (wait_stored).
    _stored: asyncio.Event = field(
        default_factory=asyncio.Event, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        self.op_log = deque(maxlen=self.log_entries)
        self._stored.set()

    @property
    def name(self) -> str:
        """The app's display name, sanitized: it is quoted in logs and error messages."""
        return sanitize(self.manifest.name, limit=64)

    @property
    def is_live(self) -> bool:
        """Whether a worker serves the app (running or collapsed)."""
        return self.status in (AppStatus.RUNNING, AppStatus.COLLAPSED)

    def transition(self, new: AppStatus) -> None:
        """Move to ``new`` if the table allows it, telling ``on_transition``."""
        old = self.status
        if new is old:
            return
        if new not in TRANSITIONS[old]:
            raise AotuiError(
                ErrorCode.E_INTERNAL, f"{self.app_id}: illegal transition {old.value} → {new.value}"
            )
        self.status = new
        self._moved.set()
        self._moved = asyncio.Event()
        if self.on_transition is not None:
            self.on_transition(self, old, new)

    async def changed(self) -> None:
        """Return at the next status change."""
        await self._moved.wait()

    async def wait_while(self, *statuses: AppStatus) -> None:
        """Return once the status is none of ``statuses``: woken by each change, never polled."""
        while self.status in statuses:
            await self._moved.wait()

    # --- the changes other modules make, each one named ----------------------------------------

    def restore(self, entry: AppEntry) -> None:
        """Take back what a stored desktop kept of this app (ids, hidden views, data, history)."""
        self.views.restore_ids(entry.view_ids)
        self.views.hidden = set(entry.hidden)
        self.saved_state = entry.data
        self.restore_views = list(entry.mounted)
        self.restarts, self.last_exit = entry.restarts, entry.last_exit
        if entry.status == "failed" and not self.manifest.system:
            self.status = AppStatus.FAILED  # stays failed, with its reason, until opened

    def adopt_state(self, state: Any) -> None:
        """Make ``state`` the app's acknowledged data (stored, or imported, already)."""
        self.saved_state = state

    def storing_begins(self) -> None:
        """An operation's data is being written to the store; it is adopted once written."""
        self.storing += 1
        self._stored.clear()

    def storing_ends(self) -> None:
        """That write ended (adopted, or failed and undone)."""
        self.storing -= 1
        if not self.storing:
            self._stored.set()

    async def wait_stored(self) -> None:
        """Return once no acknowledged data of this app is still being written.

        A worker started meanwhile (the old one was killed after it acknowledged) would start
        from the data before that write, and lose an operation the agent is told took effect.
        """
        while self.storing:
            await self._stored.wait()

    def forget_state(self) -> None:
        """Drop the saved data and the views to mount again (``open --fresh``)."""
        self.saved_state = None
        self.restore_views = []

    def attach(self, worker: WorkerHandle) -> None:
        """``worker`` now serves the app: its fragments start afresh, no kill is pending."""
        self.worker = worker
        self.views.reset_fragments()
        self.kill_reason = ""

    def detach(self) -> WorkerHandle | None:
        """Forget the app's worker; returns it (to be closed) or ``None``."""
        worker, self.worker = self.worker, None
        return worker

    def blame(self, reason: ExitReason, overrule: bool = False) -> None:
        """Record why the supervisor is ending the worker; the first reason stands unless
        ``overrule`` (the zygote died: no earlier reason explains the exit as well)."""
        if overrule or not self.kill_reason:
            self.kill_reason = reason.value  # plain data: stored and sent as is

    def ended(self, how: str) -> None:
        """Record how the last worker ended (``last_exit``)."""
        self.last_exit = how

    def start_failed(self, reason: str) -> None:
        """A start failed for ``reason``: the app is failed until opened again."""
        self.last_exit = reason
        self.transition(AppStatus.FAILED)

    def restarting(self, mounted: list[str]) -> None:
        """A crashed worker is being replaced; ``mounted`` are the views to mount again."""
        self.transition(AppStatus.RESTARTING)
        self.restarts += 1
        self.restore_views = mounted

    def closed(self) -> None:
        """The worker is gone for good: views start afresh, the data stays (opening restores it)."""
        self.views = ViewTree()
        self.restore_views = []
        self.transition(AppStatus.NOT_RUNNING)

    def log_operation(self, text: str) -> None:
        """Add a line to the app's Operation Log."""
        self.op_log.append((time.time(), text))

    def require_live(self) -> None:
        """``E_INVALID_CMD`` telling the agent to open the app first, unless it is live."""
        if not self.is_live:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"{self.app_id} ({self.name}) is {self.status.value}; open it first: "
                f"<context>open --application {self.app_id}</context>",
            )
