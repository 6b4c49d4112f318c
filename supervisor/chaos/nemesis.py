"""The nemesis inside a supervisor started for a chaos run: it records and it injects.

Loaded only when ``AOTUI_CHAOS`` names a run's setup file (``aotui chaos run`` sets it); without
it nothing of this package is imported and the supervisor runs as it always does. Attached, it
takes the ``execute`` method's place (every face — CLI, Python client, MCP, JSON-RPC — reaches
the desktop through that method), so it sees each command before it runs and each reply before
it is sent: it appends both to the history, decides from the plan's seed which faults the command
fires, injects them, and records a digest of each touched app's views after the reply. Recoveries
are seen through the supervisor's change listeners (the moment a restarted worker is serving),
signals through the one ``chaos`` check in ``Supervisor._publish``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import json
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from aotui.protocol.commands import Action, Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.grammar import parse_commands
from aotui.supervisor.broker.http import HttpRequest, HttpResponse
from aotui.supervisor.chaos import disk
from aotui.supervisor.chaos.history import EventKind, FaultType, HistoryWriter, Source
from aotui.supervisor.chaos.plan import FROM_RUNNER, FaultSpec, Plan, parse_plan
from aotui.supervisor.chaos.views import Perturbation, drift, lie, state_digest
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.paths import store_path

if TYPE_CHECKING:
    from aotui.supervisor.server.process import Supervisor
    from aotui.supervisor.workers.handle import WorkerHandle

__all__ = ["CHAOS_ENV", "ChaosSetup", "Nemesis", "attach"]

log = logging.getLogger("aotui.chaos")

#: The environment variable naming a chaos run's setup file (JSON of :class:`ChaosSetup`).
CHAOS_ENV = "AOTUI_CHAOS"
#: Seconds between samples of the supervisor's memory, descriptors and processes.
SAMPLE_S = 1.0
#: How long an armed HTTP fault waits for the app's next brokered request.
HTTP_ARMED_S = 10.0

#: Seconds a fault aimed at a worker waits for it (it may be restarting after the last fault).
WORKER_WAIT_S = 5.0
#: The faults aimed at a worker process.
_ON_WORKER = frozenset({FaultType.KILL_WORKER, FaultType.FREEZE, FaultType.MEMORY_PRESSURE})

#: The command a task is serving (the desktop's ref resolution reports to it).
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("chaos_command", default=None)

Fetch = Callable[..., HttpResponse]


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
    nemesis = Nemesis(supervisor, parse_plan(setup.plan), writer)
    if setup.recovering:
        nemesis.recovered_supervisor(setup.recovering, setup.killed_at or time.time())
    return nemesis


class Nemesis:
    """Records every command, reply, signal and state of one desktop; injects the plan."""

    def __init__(self, supervisor: Supervisor, plan: Plan, writer: HistoryWriter) -> None:
        self.supervisor = supervisor
        self.desktop = supervisor.desktop
        self.plan = plan
        self.writer = writer
        self.faults = [spec for spec in plan.faults if spec.type not in FROM_RUNNER]
        self.matched: dict[str, int] = {}
        self.injected: dict[str, int] = {}
        self.ids = itertools.count(1)
        # Fault ids are the plan's (f1…); an injection is f1.3 (its third), unique in a run
        # as long as commands arrive in the same order — a restarted supervisor starts over.
        self.boot = f"{os.getpid():x}"
        self.masks: dict[tuple[str, str], Perturbation] = {}
        #: app_id → (fault id, inject time, the worker that was faulted).
        self.pending: dict[str, tuple[str, float, WorkerHandle | None]] = {}
        self.resolved: dict[str, dict[str, Any]] = {}
        self.http_armed: dict[str, tuple[str, dict[str, Any], float]] = {}
        self.signal_drop: tuple[str, float, int] | None = None
        #: fault id → when it was injected (monotonic), until its recovery is recorded.
        self.inject_times: dict[str, float] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._execute = supervisor.methods["execute"]
        supervisor.methods["execute"] = self.execute
        supervisor.change_listeners.append(self._changed)
        supervisor.services.append(self)
        self.desktop.on_resolved = self._resolved
        self.desktop.runner.http_fault = self._http
        supervisor.chaos = self

    # --- lifecycle (a supervisor Service) -------------------------------------------------------

    async def start(self) -> None:
        """Begin sampling the supervisor's resources."""
        self._spawn(self._sample())

    async def stop(self) -> None:
        """Record each app's final state; stop sampling."""
        for app in self.desktop.apps:
            if app.status is AppStatus.RUNNING and app.worker is not None:
                self._state(app, "final")
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.writer.close()

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

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
            if app.status is AppStatus.RUNNING and app.worker is not None:
                self._state(app, "recovered", fault=fault_id)

    # --- the execute method ---------------------------------------------------------------------

    async def execute(self, params: dict[str, Any]) -> dict[str, Any]:
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
            result: dict[str, Any] = await self._execute(params)
        except AotuiError as exc:
            self._reply(cid, exc)
            self._settled(cid, commands, ok=False)
            raise
        finally:
            _current.reset(token)
        self._reply(cid, None)
        self._settled(cid, commands, ok=True)
        self._after(fired, first, app)
        return result

    def _app_of(self, command: Command | None) -> AppRecord | None:
        if command is None:
            return None
        with contextlib.suppress(AotuiError):
            return self.desktop.app(command.app_id or command.target)
        return None

    def _record_command(
        self, cid: str, params: dict[str, Any], first: Command | None, app: AppRecord | None
    ) -> None:
        session = _session(self.supervisor, params)
        text = params.get("text") if isinstance(params.get("text"), str) else None
        snapshot_id = params.get("snapshot_id") or (first.snapshot_id if first else None)
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
            self.resolved.setdefault(cid, {}).update(args)

    def _reply(self, cid: str, error: AotuiError | None) -> None:
        resolved = self.resolved.pop(cid, {})
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

    def _settled(self, cid: str, commands: list[Command], ok: bool) -> None:
        """After the reply: each touched app's state, where it is serving and not recovering."""
        seen: set[str] = set()
        for command in commands:
            app = self._app_of(command)
            if app is None or app.app_id in seen:
                continue
            seen.add(app.app_id)
            serving = app.status is AppStatus.RUNNING and app.worker is not None
            if serving and (ok or app.app_id not in self.pending):
                self._state(app, "ack", command=cid)

    def _state(self, app: AppRecord, basis: str, **fields: Any) -> None:
        digest = state_digest(app, self.masks)
        self._write(EventKind.STATE, app=app.app_id, digest=digest, basis=basis, **fields)

    # --- deciding and injecting -----------------------------------------------------------------

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
            count = self.matched[spec.fault_id] = self.matched.get(spec.fault_id, 0) + 1
            done = self.injected.get(spec.fault_id, 0)
            if spec.max is not None and done >= spec.max:
                continue
            if spec.fires(self.plan.seed, count):
                self.injected[spec.fault_id] = done + 1
                fired.append((f"{spec.fault_id}.{done + 1}", spec))
        return fired

    def _fault(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord | None,
        command: Command | None,
        detail: dict[str, Any],
        phase: str = "inject",
    ) -> None:
        target = {
            "app": app.app_id if app else None,
            "operation": command.target if command and command.action is Action.EXECUTE else None,
            "view": command.view_id if command else None,
        }
        self._write(
            EventKind.FAULT,
            fault=fid,
            type=spec.type.value,
            phase=phase,
            target=target,
            detail=detail,
        )

    def _visible(self, fid: str, where: str, text: str) -> None:
        self._write(EventKind.VISIBLE, fault=fid, where=where, text=text)

    async def _before(
        self, fired: list[tuple[str, FaultSpec]], command: Command | None, app: AppRecord | None
    ) -> None:
        assert command is not None or not fired
        for fid, spec in fired:
            assert app is not None
            kind, detail = spec.type, dict(spec.detail)
            if kind in _ON_WORKER:
                await self._serving(app)
            if kind is FaultType.KILL_WORKER and detail["when"] == "before_effect":
                self._kill(fid, spec, app, command, signal.SIGKILL, detail)
            elif kind is FaultType.FREEZE:
                self._freeze(fid, spec, app, command, detail)
            elif kind is FaultType.MEMORY_PRESSURE:
                self._pressure(fid, spec, app, command)
            elif kind is FaultType.LATENCY:
                self._fault(fid, spec, app, command, detail)
                await asyncio.sleep(detail["ms"] / 1000)
                self._fault(fid, spec, app, command, detail, "clear")
                self._visible(fid, "reply", f"the reply came {detail['ms']} ms later")
            elif kind is FaultType.FAIL:
                self._fault(fid, spec, app, command, detail)
                raise _failure(fid, detail["code"], app, command)
            elif kind in (FaultType.DRIFT, FaultType.LIE):
                self._perturb(fid, spec, app, command, detail)
            elif kind is FaultType.HTTP_FAULT:
                self.http_armed[app.app_id] = (fid, detail, time.monotonic() + HTTP_ARMED_S)
            elif kind is FaultType.DISK_FULL:
                self._disk_full(fid, spec, app, command, detail)
            elif kind is FaultType.SIGNAL_LOSS:
                self._fault(fid, spec, app, command, detail)
                self.signal_drop = (fid, time.monotonic() + detail["seconds"], 0)
                self._spawn(self._end_signal_loss(fid, spec, app, command, detail))
            elif kind is FaultType.SIGNAL_BURST:
                self._fault(fid, spec, app, command, detail)
                for _ in range(detail["count"]):
                    self.supervisor._publish("dom_mutation", ("dom_mutation",))
                self._visible(fid, "signal", f"{detail['count']} signals in a burst")

    async def _serving(self, app: AppRecord) -> None:
        """Wait (bounded) for ``app``'s worker: a fault aimed at it needs it running."""
        deadline = time.monotonic() + WORKER_WAIT_S
        while time.monotonic() < deadline:
            pid = app.worker.pid if app.worker is not None else None
            watched = pid is not None and pid in self.desktop.runner.watchdog.workers
            if app.status is AppStatus.RUNNING and watched:
                return
            await asyncio.sleep(0.01)

    def _after(
        self, fired: list[tuple[str, FaultSpec]], command: Command | None, app: AppRecord | None
    ) -> None:
        for fid, spec in fired:
            if spec.type is FaultType.KILL_WORKER and spec.detail["when"] == "after_effect":
                assert app is not None
                self._kill(fid, spec, app, command, signal.SIGKILL, dict(spec.detail))

    def _kill(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord,
        command: Command | None,
        signum: int,
        detail: dict[str, Any],
    ) -> None:
        worker = app.worker
        if worker is None or worker.pid is None:
            return
        self._fault(fid, spec, app, command, detail)
        self.pending[app.app_id] = (fid, time.monotonic(), worker)
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signum)

    def _freeze(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord,
        command: Command | None,
        detail: dict[str, Any],
    ) -> None:
        worker = app.worker
        if worker is None or worker.pid is None:
            return
        pid = worker.pid
        self._fault(fid, spec, app, command, detail)
        self.pending[app.app_id] = (fid, time.monotonic(), worker)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)

        def thaw() -> None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            self._fault(fid, spec, app, command, detail, "clear")
            if app.worker is worker and self.pending.get(app.app_id, ("",))[0] == fid:
                # Thawed before anything killed it: it serves again, as it was.
                del self.pending[app.app_id]
                self._visible(
                    fid, "reply", f"{app.app_id} answered nothing for {detail['seconds']:g} s"
                )
                self._recovery(fid, app)

        asyncio.get_running_loop().call_later(detail["seconds"], thaw)

    def _pressure(self, fid: str, spec: FaultSpec, app: AppRecord, command: Command | None) -> None:
        worker = app.worker
        watched = (
            self.desktop.runner.watchdog.workers.get(worker.pid) if worker and worker.pid else None
        )
        if watched is None:
            return
        self._fault(fid, spec, app, command, {"limit_mb": 1})
        self.pending[app.app_id] = (fid, time.monotonic(), worker)
        # The worker's memory is now far over what the watchdog allows it: the watchdog acts on
        # its next tick, exactly as for an app that grew past its limit.
        watched.memory_bytes = 1 << 20

    def _perturb(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord,
        command: Command | None,
        detail: dict[str, Any],
    ) -> None:
        views = app.views
        wanted = command.view_id if command is not None else None
        rng = random.Random(f"{self.plan.seed}:{fid}")
        for view_id, fragment, markdown in views.shown():
            if wanted and spec.view is None and view_id != wanted and spec.type is FaultType.DRIFT:
                continue
            true_markdown = markdown
            mask = self.masks.get((app.app_id, fragment.key))
            if mask is not None and mask.shown is fragment:
                true_markdown = mask.true_markdown
            if spec.type is FaultType.DRIFT:
                changed = drift(fragment, markdown, detail["change"], rng)
            else:
                changed = lie(fragment, markdown, rng)
            if changed is None:
                continue
            shown, new_markdown, what = changed
            views.fragments[fragment.key] = shown
            views.markdown[fragment.key] = new_markdown
            self.masks[(app.app_id, fragment.key)] = Perturbation(
                fragment.key, shown, true_markdown, what
            )
            self._fault(fid, spec, app, command, {**what, "view": view_id})
            self.supervisor.changed("dom_mutation")
            self._visible(fid, "signal", f"dom_mutation: {view_id} of {app.app_id} changed")
            return

    def _disk_full(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord,
        command: Command | None,
        detail: dict[str, Any],
    ) -> None:
        where = store_path(self.supervisor.config.desktop).parent
        if detail["where"] == "grant":
            permissions = app.manifest.permissions
            grants = [p.scope for p in permissions if (p.resource, p.action) == ("fs", "write")]
            if not grants or grants[0] == "*":
                log.warning("chaos %s: %s has no fs:write grant to fill", fid, app.app_id)
                return
            where = Path(grants[0])
        try:
            written = disk.fill(where)
        except (AotuiError, OSError) as exc:
            log.warning("chaos %s: cannot fill %s: %s", fid, where, exc)
            return
        self._fault(fid, spec, app, command, {"where": detail["where"], "bytes": written})

        def clear() -> None:
            disk.unfill(where)
            self._fault(fid, spec, app, command, {"where": detail["where"]}, "clear")

        asyncio.get_running_loop().call_later(detail["seconds"], clear)

    async def _end_signal_loss(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord | None,
        command: Command | None,
        detail: dict[str, Any],
    ) -> None:
        await asyncio.sleep(detail["seconds"])
        dropped = self.signal_drop[2] if self.signal_drop and self.signal_drop[0] == fid else 0
        self.signal_drop = None
        self._fault(fid, spec, app, command, {**detail, "dropped": dropped}, "clear")
        # What a client that missed signals does: pull again. The desktop says it dropped some.
        self.desktop.log(
            f"{dropped} desktop signal(s) were not sent in the last "
            f"{detail['seconds']:g} s; pull a snapshot to catch up."
        )
        self.supervisor.changed("dom_mutation")
        self._visible(fid, "system_log", f"{dropped} signal(s) not sent")

    # --- hooks ----------------------------------------------------------------------------------

    def on_signal(self, reason: str, reasons: tuple[str, ...]) -> bool:
        """A signal is about to go out: record it; False drops it (a signal_loss fault)."""
        drop = self.signal_drop
        if drop is not None and time.monotonic() < drop[1]:
            self.signal_drop = (drop[0], drop[1], drop[2] + 1)
            return False
        with contextlib.suppress(AotuiError):
            self.writer.append(EventKind.SIGNAL, reasons=list(reasons) or [reason], apps=[])
        return True

    def _http(self, app: AppRecord, fetch: Fetch) -> Fetch:
        """The fetch for ``app``'s next brokered request: ``fetch``, or one an armed fault bends."""
        armed = self.http_armed.get(app.app_id)
        if armed is None or time.monotonic() > armed[2]:
            return fetch
        del self.http_armed[app.app_id]
        fid, detail, _ = armed
        spec = next(s for s in self.faults if fid.split(".")[0] == s.fault_id)
        mode = detail["mode"]
        self._fault(fid, spec, app, None, {"mode": mode})

        def bent(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            # The real request runs first, so the app's grants still decide (a refused request
            # stays E_PERMISSION); the fault bends what comes back.
            if mode == "latency":
                time.sleep(detail["ms"] / 1000)
            response = fetch(request, *args, **kwargs)
            if mode == "timeout":
                time.sleep(detail["ms"] / 1000)
                self._visible_threadsafe(fid, f"HTTP {request.method} timed out")
                raise AotuiError(
                    ErrorCode.E_TIMEOUT,
                    f"HTTP {request.method} {request.url} timed out",
                    {"url": request.url},
                )
            if mode == "5xx":
                self._visible_threadsafe(fid, "HTTP 503 Service Unavailable")
                return HttpResponse(503, "Service Unavailable", {}, b"", response.url)
            if mode == "truncate":
                cut = response.body[: len(response.body) // 2]
                self._visible_threadsafe(fid, f"HTTP body cut to {len(cut)} bytes")
                return HttpResponse(
                    response.status, response.reason, response.headers, cut, response.url
                )
            self._visible_threadsafe(fid, f"HTTP answered {detail['ms']} ms late")
            return response

        return bent

    def _visible_threadsafe(self, fid: str, text: str) -> None:
        # The app's reply (or its rendered error) is what shows it; the history writer is
        # thread-safe, so the broker thread records it directly.
        self._visible(fid, "reply", text)

    def _changed(self, reason: str) -> None:
        """A change listener: a faulted app that crashed is seen; one serving again recovered."""
        if not self.pending:
            return
        for app_id, (fid, _at, _worker) in list(self.pending.items()):
            app = next((a for a in self.desktop.apps if a.app_id == app_id), None)
            if app is None:
                del self.pending[app_id]
                continue
            if reason == "app_crashed" and app.status in (AppStatus.RESTARTING, AppStatus.FAILED):
                self._visible(fid, "signal", f"app_crashed: {app.app_id} ({app.last_exit})")
                if app.status is AppStatus.FAILED:
                    del self.pending[app_id]
                    self._recovery(fid, app, ok=False)
            elif (
                reason in ("app_restarted", "app_opened")
                and app.status is AppStatus.RUNNING
                and app.worker is not None
                and app.worker is not _worker
            ):
                del self.pending[app_id]
                self._recovery(fid, app)

    def _recovery(self, fid: str, app: AppRecord, ok: bool = True) -> None:
        """Record that ``app`` serves again after fault ``fid`` (its state, if it does)."""
        started = self.inject_times.pop(fid, time.monotonic())
        self._write(
            EventKind.RECOVERY,
            fault=fid,
            app=app.app_id,
            what="worker",
            seconds=round(time.monotonic() - started, 4),
            ok=ok,
        )
        if ok:
            self._state(app, "recovered", fault=fid)

    def _write(self, kind: EventKind, **fields: Any) -> None:
        if kind is EventKind.FAULT and fields.get("phase") == "inject":
            self.inject_times.setdefault(fields["fault"], time.monotonic())
        try:
            self.writer.append(kind, **fields)
        except AotuiError as exc:  # a full history disk must not take the desktop down
            log.warning("chaos history: %s", exc.message)


def _parse(params: dict[str, Any]) -> list[Command]:
    """The commands of an execute request, or [] when it is malformed (the desktop says why)."""
    with contextlib.suppress(AotuiError, TypeError, ValueError):
        if "command" in params:
            return [Command.from_structured(params["command"])]
        text = params.get("text")
        if isinstance(text, str):
            return parse_commands(text)
    return []


def _session(supervisor: Supervisor, params: dict[str, Any]) -> str | None:
    """The session a request speaks for, or None (a bad name is the desktop's to refuse)."""
    try:
        return supervisor._session(params)
    except AotuiError:
        return None


def _interface(params: dict[str, Any], session: str | None) -> str:
    """The face a request came through, told by what it sends."""
    owner = params.get("owner")
    if session is not None and session.startswith("#rpc"):
        return "jsonrpc"
    if isinstance(owner, str) and owner.startswith("mcp-"):
        return "mcp"
    if session is not None and session.startswith("chaos-random"):
        return "random"
    if isinstance(owner, str) or "command" in params:
        return "python"
    return "cli"


def _failure(fid: str, code: str, app: AppRecord, command: Command | None) -> AotuiError:
    what = f"{command.target} on {app.app_id} ({app.name})" if command else app.app_id
    if code == "E_TIMEOUT":
        return AotuiError(
            ErrorCode.E_TIMEOUT,
            f"{what} did not finish within its deadline and took no effect (chaos fault {fid}); "
            f"pull a snapshot, then retry if you still want it",
            {"app": app.app_id, "outcome": "not applied", "fault": fid},
        )
    return AotuiError(
        ErrorCode.E_APP_ERROR,
        f"{what} failed inside the app and took no effect (chaos fault {fid}); pull a snapshot "
        f"before trying again",
        {"app": app.app_id, "outcome": "not applied", "fault": fid},
    )
