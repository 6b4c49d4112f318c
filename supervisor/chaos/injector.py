"""How a chaos run's faults are injected into a live desktop, and recorded as they are.

The nemesis (:mod:`~supervisor.chaos.nemesis`) decides which faults a command fires; the methods
here do it — a signal to a worker, a lowered watchdog limit, a changed view, a filled disk, an HTTP
answer bent — and append each fault, its evidence and the recovery after it to the history.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aotui.protocol.api import SignalReason
from aotui.protocol.commands import Action, Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.broker.http import HttpRequest, HttpResponse
from aotui.supervisor.chaos import disk
from aotui.supervisor.chaos.history import EventKind, FaultType, HistoryWriter
from aotui.supervisor.chaos.plan import FaultSpec, Plan
from aotui.supervisor.chaos.views import Perturbation, drift, lie, state_digest
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.paths import store_path

if TYPE_CHECKING:
    from aotui.supervisor.desktop.desktop import Desktop
    from aotui.supervisor.server.process import Supervisor
    from aotui.supervisor.workers.handle import WorkerHandle

__all__ = ["ON_WORKER", "FaultInjector"]

log = logging.getLogger("aotui.chaos")

#: How long an armed HTTP fault waits for the app's next brokered request.
HTTP_ARMED_S = 10.0
#: Seconds a fault aimed at a worker waits for it (it may be restarting after the last fault).
WORKER_WAIT_S = 5.0
#: The faults aimed at an app's worker process (they need one running).
ON_WORKER = frozenset({FaultType.KILL_WORKER, FaultType.FREEZE, FaultType.MEMORY_PRESSURE})

Fetch = Callable[..., HttpResponse]


class FaultInjector:
    """Injects one command's faults and records them (the nemesis's other half)."""

    supervisor: Supervisor
    desktop: Desktop
    plan: Plan
    writer: HistoryWriter
    faults: list[FaultSpec]
    #: Views a drift or lie replaced, by (app, view key).
    masks: dict[tuple[str, str], Perturbation]
    #: app_id → (fault id, inject time, the worker that was faulted), until it recovers.
    pending: dict[str, tuple[str, float, WorkerHandle | None]]
    #: app_id → (fault id, detail, expiry) of an HTTP fault waiting for a request.
    http_armed: dict[str, tuple[str, dict[str, Any], float]]
    #: (fault id, until, signals dropped so far) of a signal_loss under way.
    signal_drop: tuple[str, float, int] | None
    _tasks: set[asyncio.Task[None]]

    def _spawn(self, work: Any) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _state(self, app: AppRecord, basis: str, **fields: Any) -> None:
        digest = state_digest(app, self.masks)
        self._write(EventKind.STATE, app=app.app_id, digest=digest, basis=basis, **fields)

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
            await self._inject(fid, spec, app, command, dict(spec.detail))

    async def _inject(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord,
        command: Command | None,
        detail: dict[str, Any],
    ) -> None:
        """Cause one fault that fires before the command runs (a failure raises here)."""
        kind = spec.type
        if kind in ON_WORKER:
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
        else:
            self._inject_around(fid, spec, app, command, detail)

    def _inject_around(
        self,
        fid: str,
        spec: FaultSpec,
        app: AppRecord,
        command: Command | None,
        detail: dict[str, Any],
    ) -> None:
        """Faults around the worker: its view, its HTTP, its disk, the desktop's signals."""
        kind = spec.type
        if kind in (FaultType.DRIFT, FaultType.LIE):
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
            sent = sum(
                self.supervisor._publish("dom_mutation", ("dom_mutation",))
                for _ in range(detail["count"])
            )
            lost = (
                f" ({detail['count'] - sent} lost to a signal_loss fault)"
                if sent < detail["count"]
                else ""
            )
            self._visible(fid, "signal", f"{sent} signals in a burst{lost}")

    async def _serving(self, app: AppRecord) -> None:
        """Wait (bounded) for ``app``'s worker: a fault aimed at it needs it running."""
        deadline = time.monotonic() + WORKER_WAIT_S
        while time.monotonic() < deadline:
            pid = app.worker.pid if app.worker is not None else None
            watched = pid is not None and pid in self.desktop.runner.watchdog.workers
            if app.is_live and watched:
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
                started = self.pending.pop(app.app_id)[1]
                self._visible(
                    fid, "reply", f"{app.app_id} answered nothing for {detail['seconds']:g} s"
                )
                self._recovery(fid, app, started)

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
        for view_id, view in views.shown():
            if wanted and spec.view is None and view_id != wanted and spec.type is FaultType.DRIFT:
                continue
            cached = views.rendered[view.key]  # without the line a dialog is shown under
            true_markdown = view.markdown
            mask = self.masks.get((app.app_id, view.key))
            if mask is not None and mask.shown is cached:
                true_markdown = mask.true_markdown
            if spec.type is FaultType.DRIFT:
                changed = drift(cached, detail["change"], rng)
            else:
                changed = lie(cached, rng)
            if changed is None:
                continue
            shown, what = changed
            views.substitute(shown)
            self.masks[(app.app_id, view.key)] = Perturbation(view.key, shown, true_markdown, what)
            self._fault(fid, spec, app, command, {**what, "view": view_id})
            self.supervisor.changed(SignalReason.DOM_MUTATION)
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
        self.supervisor.changed(SignalReason.DOM_MUTATION)
        self._visible(fid, "system_log", f"{dropped} signal(s) not sent")

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

    def _recovery(self, fid: str, app: AppRecord, started: float, ok: bool = True) -> None:
        """Record that ``app`` serves again after fault ``fid`` (its state, if it does)."""
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
        try:
            self.writer.append(kind, **fields)
        except AotuiError as exc:  # a full history disk must not take the desktop down
            log.warning("chaos history: %s", exc.message)


def _failure(fid: str, code: str, app: AppRecord, command: Command | None) -> AotuiError:
    action = command.action.value.split("_")[0] if command else ""
    what = f"{action} {command.target} on {app.app_id} ({app.name})" if command else app.app_id
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
