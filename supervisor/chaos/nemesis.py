"""The nemesis inside a supervisor started for a chaos run: it records and it injects.

Loaded only when ``AOTUI_CHAOS`` names a run's setup file (``aotui chaos run`` sets it); without
it nothing of this package is imported and the supervisor runs as it always does. Attached, it
takes the ``execute`` method's place (every face — CLI, Python client, MCP, JSON-RPC — reaches
the desktop through that method), so it sees each command before it runs and each reply before
it is sent: it appends both to the history, decides from the plan's seed which faults the command
fires, injects them (:mod:`~supervisor.chaos.injector`), and records a digest of each touched
app's views after the reply. Recoveries are seen through the supervisor's change listeners (the
moment a restarted worker is serving), signals through the one ``chaos`` check in
``Supervisor._publish``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from aotui.protocol.api import ConfirmParams, ExecParams, ExecuteParams, SayParams, SignalReason
from aotui.protocol.commands import Action, Command
from aotui.protocol.errors import AotuiError
from aotui.protocol.grammar import parse_commands
from aotui.supervisor.chaos.history import EventKind, HistoryWriter, Source
from aotui.supervisor.chaos.injector import ON_WORKER, FaultInjector
from aotui.supervisor.chaos.plan import FROM_RUNNER, FaultSpec, Plan, parse_plan
from aotui.supervisor.chaos.views import Perturbation
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.desktop.snapshot import RefTable
from aotui.supervisor.instrument import Fetch, Instrument, Run

if TYPE_CHECKING:
    from aotui.supervisor.server.process import Supervisor
    from aotui.supervisor.workers.handle import WorkerHandle

__all__ = ["CHAOS_ENV", "ChaosSetup", "Nemesis", "attach"]

#: The environment variable naming a chaos run's setup file (JSON of :class:`ChaosSetup`).
CHAOS_ENV = "AOTUI_CHAOS"
#: Seconds between samples of the supervisor's memory, descriptors and processes.
SAMPLE_S = 1.0

#: The command a task is serving (the desktop's ref resolution reports to it).
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("chaos_command", default=None)


@dataclass(frozen=True)
class ChaosSetup:
    """What ``aotui chaos run`` hands the supervisor it starts (as a JSON file)."""

    #: The plan as plain data.
    plan: dict[str, Any]
    #: The history file (appended to; the runner writes the same file).
    history: str
    #: The run's epoch (every ``t`` counts from it, across supervisor restarts).
    epoch: float
    #: The kill_supervisor fault this supervisor is the ``up`` after, if any.
    recovering: str | None = None
    #: When that fault killed the last supervisor (wall clock).
    killed_at: float | None = None
    #: How many supervisors of this run came before this one (0: the first).
    generation: int = 0

    def write(self, path: Path) -> None:
        """Store the setup for a supervisor to read."""
        path.write_text(json.dumps(self.__dict__))

    @classmethod
    def read(cls, path: str) -> ChaosSetup:
        """The setup a runner wrote."""
        return cls(**json.loads(Path(path).read_text()))


def attach(supervisor: Supervisor) -> Nemesis | None:
    """The nemesis for this supervisor, if ``AOTUI_CHAOS`` names a setup; else None."""
    where = os.environ.get(CHAOS_ENV)
    if not where:
        return None
    setup = ChaosSetup.read(where)
    writer = HistoryWriter(setup.history, setup.epoch, Source.SUPERVISOR)
    nemesis = Nemesis(supervisor, parse_plan(setup.plan), writer, setup.generation)
    if setup.recovering:
        nemesis.recovered_supervisor(setup.recovering, setup.killed_at or time.time())
    return nemesis


class Nemesis(FaultInjector, Instrument):
    """Records every command, reply, signal and state of one desktop; injects the plan.

    The desktop's instrument (supervisor/instrument.py): it sees what the desktop consults it
    on, and swaps nothing of the supervisor's."""

    def __init__(
        self, supervisor: Supervisor, plan: Plan, writer: HistoryWriter, generation: int = 0
    ) -> None:
        self.supervisor = supervisor
        self.desktop = supervisor.desktop
        self.plan = plan
        self.writer = writer
        self.faults = [spec for spec in plan.faults if spec.type not in FROM_RUNNER]
        self.matched: dict[str, int] = {}
        self.injected: dict[str, int] = {}
        self.ids = itertools.count(1)
        self.boot = f"{os.getpid():x}"
        # Injections are f1.1, f1.2… (the plan's fault, then its count); a supervisor brought
        # back after a kill counts afresh, so its injections are f1.g1.1…: unique in the run.
        self.prefix = "" if generation == 0 else f"g{generation}."
        self.masks: dict[tuple[str, str], Perturbation] = {}
        #: app_id → (fault id, inject time, the worker that was faulted).
        self.pending: dict[str, tuple[str, float, WorkerHandle | None]] = {}
        self.resolutions: dict[str, dict[str, Any]] = {}
        self.http_armed: dict[str, tuple[str, dict[str, Any], float]] = {}
        self.signal_drop: tuple[str, float, int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Confirmation id → (the command that waits on it, its app).
        self.waiting: dict[str, tuple[str, str]] = {}
        supervisor.services.append(self)

    # --- the instrument's hooks (supervisor/instrument.py) ----------------------------------------

    async def client_call(
        self, method: str, call: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """Every command (``exec``, ``execute``), user message and user answer is recorded."""
        if method == "say":
            return await self.say(call, handler)
        if method == "confirm":
            return await self.confirm(call, handler)
        return await self.execute(call, handler)

    async def command(
        self, command: Command, refs: RefTable | None, deadline: float | None, run: Run
    ) -> Any:
        """Each command of a message is acknowledged on its own: its app's state is taken when
        it returns, since a later command of the same message may find that app restarting."""
        return await self._run_one(command, refs, deadline, run)

    def resolved(self, command: Command, values: dict[str, Any]) -> None:
        self._resolved(command, values)

    def fetch(self, app: AppRecord, fetch: Fetch) -> Fetch:
        return self._http(app, fetch)

    def changed(self, reason: SignalReason) -> None:
        self._changed(reason)

    def signal(self, reason: str, reasons: Sequence[str], apps: Sequence[str]) -> bool:
        return self.on_signal(reason, tuple(reasons), apps)

    async def start(self) -> None:
        """Begin sampling the supervisor's resources."""
        self._spawn(self._sample())

    async def stop(self) -> None:
        """Record each app's final state; stop sampling."""
        for app in self.desktop.apps:
            if app.is_live and app.worker is not None:
                self._state(app, "final")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.writer.close()

    async def _sample(self) -> None:
        me = psutil.Process()
        while True:
            with contextlib.suppress(psutil.Error, AotuiError):
                procs = 1 + len(me.children(recursive=True))
                self.writer.append(
                    EventKind.SAMPLE, rss=me.memory_info().rss, fds=me.num_fds(), procs=procs
                )
            await asyncio.sleep(SAMPLE_S)

    def recovered_supervisor(self, fault_id: str, killed_at: float) -> None:
        """This supervisor is the ``up`` after a kill: it serves; each app shows what it shows."""
        self._write(
            EventKind.RECOVERY,
            fault=fault_id,
            app=None,
            what="supervisor",
            seconds=round(time.time() - killed_at, 4),
            ok=True,
        )
        for app in self.desktop.apps:
            if app.is_live and app.worker is not None:
                self._state(app, "recovered", fault=fault_id)

    async def execute(
        self, params: ExecParams | ExecuteParams, handler: Callable[[Any], Awaitable[Any]]
    ) -> dict[str, Any]:
        """Record the command, inject what it fires, run it, record the reply and states."""
        cid = f"c{self.boot}-{next(self.ids)}"
        commands = _parse(params)
        first = next((c for c in commands if c.action is Action.EXECUTE), None)
        first = first or (commands[0] if commands else None)
        app = self._app_of(first)
        self._record_command(cid, params, first, app)
        fired = self._decide(first, app)
        token = _current.set(cid)
        try:
            await self._before(fired, first, app)
            result: dict[str, Any] = await handler(params)
        except AotuiError as exc:
            self._reply(cid, exc)
            self._settled(cid, commands)
            raise
        finally:
            _current.reset(token)
        waiting = result.get("waiting") if isinstance(result, dict) else None
        self._reply(cid, None, waiting)
        self._after(fired, first, app)
        return result

    async def confirm(self, params: ConfirmParams, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """The user's answer to a command that waited: record what came of it."""
        waited = self.waiting.pop(params.confirmation, None)
        try:
            result = await handler(params)
        except AotuiError:
            if waited is not None:
                self._confirmed(params.confirmation, waited, "failed")
            raise
        if waited is not None:
            verdict = "refused" if params.deny else "ran"
            self._confirmed(params.confirmation, waited, verdict)
        return result

    def _confirmed(self, ident: str, waited: tuple[str, str], verdict: str) -> None:
        cid, app_id = waited
        app = next((a for a in self.desktop.apps if a.app_id == app_id), None)
        if verdict == "ran" and app is not None and app.is_live and app.worker is not None:
            self._state(app, "ack", command=cid)  # its effect is in the app from here on
        with contextlib.suppress(AotuiError):
            self.writer.append(
                EventKind.CONFIRMATION, confirmation=ident, command=cid, app=app_id, verdict=verdict
            )

    async def say(self, params: SayParams, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        """The user's message changes an app too: its state after it is an acknowledged one."""
        result = await handler(params)
        with contextlib.suppress(AotuiError):
            app = self.desktop.app(params.app or "system.chat")
            if app.is_live and app.worker is not None:
                self._state(app, "ack", command=None)
        return result

    def _app_of(self, command: Command | None) -> AppRecord | None:
        if command is None:
            return None
        with contextlib.suppress(AotuiError):
            return self.desktop.app(command.app_id or command.target)
        return None

    def _record_command(
        self,
        cid: str,
        params: ExecParams | ExecuteParams,
        first: Command | None,
        app: AppRecord | None,
    ) -> None:
        session = _session(self.supervisor, params)
        text = params.text if isinstance(params, ExecParams) else None
        snapshot_id = params.snapshot_id or (first.snapshot_id if first else None)
        if not isinstance(snapshot_id, str) and session is not None:
            snapshot_id = self.supervisor.sessions.last(session)
        refs = self._refs_read(first, app, snapshot_id if isinstance(snapshot_id, str) else None)
        executes = first is not None and first.action is Action.EXECUTE
        self._write(
            EventKind.COMMAND,
            id=cid,
            session=session,
            interface=_interface(params, session),
            app=app.app_id if app else (first.app_id if first else None),
            operation=first.target if first is not None and executes else None,
            args={k: v for k, v in first.args.items()} if first is not None else {},
            text=text,
            snapshot_id=snapshot_id if isinstance(snapshot_id, str) else None,
            refs=refs,
        )

    def _refs_read(
        self, command: Command | None, app: AppRecord | None, snapshot_id: str | None
    ) -> dict[str, Any]:
        """Per ref argument, the ref and the value the agent's snapshot showed for it."""
        if command is None or app is None or command.action is not Action.EXECUTE:
            return {}
        fragment = None
        if snapshot_id is not None:
            with contextlib.suppress(AotuiError):
                table = self.desktop.registry.get(snapshot_id)
                fragment = table.get((app.app_id, command.view_id or ""))
        if fragment is None:
            return {}
        lists = {r.split("[", 1)[0] for r in fragment.ref_types if "[" in r}
        read: dict[str, Any] = {}
        for name, value in command.args.items():
            if not isinstance(value, str):
                continue
            key = value
            if value.startswith("list[") and "list" not in lists and len(lists) == 1:
                key = f"{next(iter(lists))}{value[4:]}"
            if key in fragment.ref_types:
                read[name] = {"ref": value, "read": fragment.refs.get(key)}
        return read

    def _resolved(self, command: Command, args: dict[str, Any]) -> None:
        """The desktop resolved ``command``'s refs to ``args`` (called before the app runs it)."""
        cid = _current.get()
        if cid is not None:
            self.resolutions.setdefault(cid, {}).update(args)

    def _reply(
        self, cid: str, error: AotuiError | None, waiting: dict[str, Any] | None = None
    ) -> None:
        resolved = self.resolutions.pop(cid, {})
        if error is None and waiting is not None:
            # Nothing ran: it waits for the user (the confirmation line says what came of it).
            ident = str(waiting.get("confirmation", ""))
            self.waiting[ident] = (cid, str(waiting.get("app", "")))
            self._write(
                EventKind.REPLY,
                id=cid,
                ok=True,
                outcome="waiting",
                confirmation=ident,
                resolved=resolved,
            )
            return
        if error is None:
            self._write(EventKind.REPLY, id=cid, ok=True, outcome="applied", resolved=resolved)
            return
        ran = error.data.get("ran")
        outcome = "unknown" if (isinstance(ran, int) and ran > 0) else "none"
        if error.data.get("outcome") == "unknown":
            outcome = "unknown"
        self._write(
            EventKind.REPLY,
            id=cid,
            ok=False,
            code=error.code.value,
            message=error.message,
            recoverable=error.code.recoverable,
            outcome=outcome,
            resolved=resolved,
        )

    async def _run_one(
        self, command: Command, refs: RefTable | None, deadline: float | None, run: Run
    ) -> Any:
        """One command of a message, then (if it succeeded) its app's acknowledged state."""
        result = await run(command, refs, deadline)
        cid = _current.get()
        app = self._app_of(command)
        if cid is not None and app is not None and app.is_live and app.worker is not None:
            self._state(app, "ack", command=cid)
        return result

    def _settled(self, cid: str, commands: list[Command]) -> None:
        """After an error reply: the state of each touched app that is serving."""
        seen: set[str] = set()
        for command in commands:
            app = self._app_of(command)
            if app is None or app.app_id in seen:
                continue
            seen.add(app.app_id)
            if app.is_live and app.worker is not None:  # not while it restarts
                self._state(app, "ack", command=cid)

    def _decide(
        self, command: Command | None, app: AppRecord | None
    ) -> list[tuple[str, FaultSpec]]:
        """The faults this command fires (with their injection ids), from the seed alone."""
        if command is None or app is None:
            return []
        operation = command.target if command.action is Action.EXECUTE else None
        fired: list[tuple[str, FaultSpec]] = []
        for spec in self.faults:
            if not spec.matches(app.app_id, app.manifest.id, operation, command.view_id):
                continue
            if spec.type in ON_WORKER and not _worker_coming(app, command):
                # Nothing to kill, freeze or fill: firing would only wait for a worker that no
                # one starts (an open of a closed app stalled 5 s, with no fault injected).
                continue
            count = self.matched[spec.fault_id] = self.matched.get(spec.fault_id, 0) + 1
            done = self.injected.get(spec.fault_id, 0)
            if spec.max is not None and done >= spec.max:
                continue
            if spec.fires(self.plan.seed, count):
                self.injected[spec.fault_id] = done + 1
                fired.append((f"{spec.fault_id}.{self.prefix}{done + 1}", spec))
        return fired

    def on_signal(self, reason: str, reasons: tuple[str, ...], apps: Sequence[str] = ()) -> bool:
        """A signal is about to go out: record it (with the apps its changes concern); False
        drops it (a signal_loss fault)."""
        drop = self.signal_drop
        if drop is not None and time.monotonic() < drop[1]:
            self.signal_drop = (drop[0], drop[1], drop[2] + 1)
            return False
        with contextlib.suppress(AotuiError):
            self.writer.append(EventKind.SIGNAL, reasons=list(reasons) or [reason], apps=list(apps))
        return True

    def _changed(self, reason: str) -> None:
        """A change listener: a faulted app that crashed is seen; one serving again recovered."""
        if not self.pending:
            return
        for app_id, (fid, started, _worker) in list(self.pending.items()):
            app = next((a for a in self.desktop.apps if a.app_id == app_id), None)
            if app is None:
                del self.pending[app_id]
                continue
            if reason == "app_crashed" and app.status in (AppStatus.RESTARTING, AppStatus.FAILED):
                self._visible(fid, "signal", f"app_crashed: {app.app_id} ({app.last_exit})")
                if app.status is AppStatus.FAILED:
                    del self.pending[app_id]
                    self._recovery(fid, app, started, ok=False)
            elif (
                reason in ("app_restarted", "app_opened")
                and app.is_live
                and app.worker is not None
                and app.worker is not _worker
            ):
                del self.pending[app_id]
                self._recovery(fid, app, started)


def _worker_coming(app: AppRecord, command: Command) -> bool:
    """Whether ``app`` has a worker, or one is on its way, when ``command`` runs."""
    if command.action is Action.OPEN_APPLICATION:
        return app.is_live  # an open of a closed app starts it itself: the fault has no target
    return app.status in _WORKER_STATES


_WORKER_STATES = frozenset(
    {AppStatus.RUNNING, AppStatus.COLLAPSED, AppStatus.STARTING, AppStatus.RESTARTING}
)


def _parse(params: ExecParams | ExecuteParams) -> list[Command]:
    """The commands of an execute request, or [] when it is malformed (the desktop says why)."""
    with contextlib.suppress(AotuiError, TypeError, ValueError):
        if isinstance(params, ExecuteParams):
            return [Command.from_structured(params.command())]
        return parse_commands(params.text)
    return []


def _session(supervisor: Supervisor, params: ExecParams | ExecuteParams) -> str | None:
    """The session a request speaks for, or None (a bad name is the desktop's to refuse)."""
    try:
        return supervisor._session(params.session, params.token)
    except AotuiError:
        return None


def _interface(params: ExecParams | ExecuteParams, session: str | None) -> str:
    """The face a request came through, told by what it sends."""
    owner = params.owner
    if session is not None and session.startswith("#rpc"):
        return "jsonrpc"
    if isinstance(owner, str) and owner.startswith("mcp-"):
        return "mcp"
    if session is not None and session.startswith("chaos-random"):
        return "random"
    if isinstance(owner, str) or isinstance(params, ExecuteParams):
        return "python"
    return "cli"
