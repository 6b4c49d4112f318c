"""Starting and stopping an app's worker: open, close, kill, discard.

An open makes the worker's channel, asks the zygote for the process while it sends the app's
acknowledged state down the channel, and waits for its first views; a start that fails leaves the
app ``failed`` with the reason in ``last_exit`` and System Logs. What the worker then says goes to
the :class:`~supervisor.workers.channel_events.WorkerEvents` the lifecycle was given; how it ends,
to :mod:`~supervisor.workers.recovery`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import time

import zmq

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Shutdown, SignalReason
from aotui.protocol.structure import sanitize
from aotui.sandbox.layer_names import required_layers
from aotui.supervisor.broker.sizes import BROKER_THREADS_PER_APP
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.paths import app_log_dir, unix_address
from aotui.supervisor.workers.app_logs import OUTPUT_BYTES_PER_S, AppLog
from aotui.supervisor.workers.channel_events import WorkerEvents
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.handle import MAX_WORKER_FRAME, WORKER_QUEUE_FRAMES, WorkerHandle
from aotui.supervisor.workers.host import RunnerHost
from aotui.supervisor.workers.kill import kill_group, kill_worker
from aotui.supervisor.workers.launcher import ZygoteLauncher
from aotui.supervisor.workers.leases import WorkerLeases
from aotui.supervisor.workers.restore import restore_messages
from aotui.supervisor.workers.watchdog import Watchdog

__all__ = ["AppLifecycle"]


class AppLifecycle:
    """Opens and closes apps' workers; the one place a worker is made or discarded."""

    def __init__(
        self,
        host: RunnerHost,
        launcher: ZygoteLauncher,
        leases: WorkerLeases,
        watchdog: Watchdog,
        events: WorkerEvents,
    ) -> None:
        self.host = host
        self.config = host.config
        self.launcher = launcher
        self.leases = leases
        self.watchdog = watchdog
        self.events = events

    async def open(self, app: AppRecord, fresh: bool = False) -> None:
        """Start a worker for ``app`` and wait for its first views.

        ``fresh`` starts it without its saved state (which is discarded): the way back for an app
        whose stored state keeps it from starting. A start that fails leaves the app ``failed``
        with the reason in ``last_exit`` and System Logs.
        """
        if app.is_live:
            if app.status is AppStatus.COLLAPSED:
                app.transition(AppStatus.RUNNING)
            return
        if app.status is AppStatus.STARTING or (
            app.status is AppStatus.RESTARTING and app.worker is not None
        ):
            # Someone else is starting it (a restart, another command): wait for that.
            await self._other_start(app)
            if app.is_live:
                return
        restarting = app.status is AppStatus.RESTARTING
        if app.status is AppStatus.FAILED:
            app.restart_tracker.reset()
        if fresh:
            app.forget_state()
            self.host.log(f"{app.name} starts without its saved state (open --fresh).", app.app_id)
        app.transition(AppStatus.STARTING)
        # The channel: a listening socket only this worker holds (ZeroMQ binds on it with
        # ZMQ_USE_FD), at a fresh path in our 0700 directory; we connect to it. Identity is
        # the socket a frame arrives on, never what the frame says.
        path = self.host.paths.workers / f"{app.app_id}-{secrets.token_hex(6)}.sock"
        listener: socket.socket | None = None
        output: AppLog | None = None
        try:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            output = self._output(app)
            address = unix_address(path)  # a long runtime path is reached through a short one
            listener.bind(address)
            listener.listen(4)
            handle = self._connect(app, f"ipc://{address}")
            await self._launch(app, handle, listener, output)
        except (AotuiError, TimeoutError, OSError) as exc:
            if output is not None:
                output.close()
            await self.discard(app)
            raise self._start_failed(app, exc) from None
        finally:
            if listener is not None:
                listener.close()  # the worker holds its own copy
        handle.last_pong = handle.serving_since = time.monotonic()
        app.transition(AppStatus.RUNNING)
        if restarting:
            self.host.changed(SignalReason.APP_RESTARTED, app.app_id)
        what = "restarted" if restarting else "opened"
        # The pid and the layer list are status's (aotui status): here they cost every snapshot
        # ~60 tokens an app. A missing layer strict mode would insist on is still named.
        missing = sorted(required_layers(os.geteuid() == 0) - set(handle.layers))
        how = f"partly sandboxed: without {', '.join(missing)}" if missing else "sandboxed"
        self.host.log(f"{app.name} {what} ({how}).", app.app_id)

    def _output(self, app: AppRecord) -> AppLog:
        """The capture of the worker's stdout and stderr (``aotui logs``)."""
        return AppLog(
            app_log_dir(self.config.desktop) / f"{app.app_id}.log",
            on_over=lambda: self.host.log(
                f"{app.name} prints more than {OUTPUT_BYTES_PER_S // 1024} KB a second; it "
                f"is slowed down and the rest is dropped from its log "
                f"({self.host.paths.command(f'logs {app.app_id}')}).",
                app.app_id,
            ),
        )

    def _connect(self, app: AppRecord, endpoint: str) -> WorkerHandle:
        """Connect to the worker's channel and attach its handle to ``app``."""
        sock = self.host.context.socket(zmq.PAIR)
        sock.setsockopt(zmq.LINGER, 0)
        # Refused by ZeroMQ before it allocates (options apply to connections made after).
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_WORKER_FRAME)
        # What ZeroMQ queues for us before we read is the worker's to wait for, not ours.
        sock.setsockopt(zmq.RCVHWM, WORKER_QUEUE_FRAMES)
        sock.connect(endpoint)
        events = self.events
        handle = WorkerHandle(
            app.app_id,
            endpoint,
            sock,
            events.message,
            events.violation,
            BROKER_THREADS_PER_APP,
            on_fault=events.fault,
        )
        handle.start()
        app.attach(handle)
        return handle

    async def _launch(
        self, app: AppRecord, handle: WorkerHandle, listener: socket.socket, output: AppLog
    ) -> None:
        """Have the zygote fork the worker, send it its state, wait for its first views."""
        timeout = self.config.start_timeout_ms / 1000
        # An operation acknowledged by the worker before us may still be being stored: its data
        # is adopted only once written, and this worker must start from it (soak: 19 acks lost
        # an hour when a kill landed inside that write).
        async with asyncio.timeout(timeout):
            await app.wait_stored()
        # Off the loop: it may walk the app's files, probe its filesystem or copy it.
        policy = await asyncio.to_thread(self.leases.policy, app)
        launch = asyncio.ensure_future(
            self.launcher.launch(
                app.app_id,
                policy.app_dir,
                app.manifest.entry,
                handle.endpoint,
                policy,
                listener.fileno(),
                output.write_fd,
            )
        )
        # The Start, and the state chunks after it (workers/restore.py), wait on the channel
        # while the zygote forks the worker and it confines itself, rather than after the pid
        # comes back. A worker forked even so is the handle's: a failed start discards it too.
        try:
            async with asyncio.timeout(timeout):
                for message in restore_messages(
                    app.app_id, app.saved_state, app.restore_views, self.config.trusted_origins
                ):
                    await handle.send(message)
        finally:
            handle.pid = await launch
        output.handed_over()
        handle.output = output
        limits = self.config.app_limits(app.manifest)
        self.watchdog.watch(app.app_id, handle.pid, limits["memory_mb"], limits["cpu_percent"])
        await asyncio.wait_for(asyncio.shield(handle.hello), timeout)
        await asyncio.wait_for(asyncio.shield(handle.first_update), timeout)

    async def _other_start(self, app: AppRecord) -> None:
        """Wait, up to the start timeout, for the start someone else began to end either way."""
        try:
            async with asyncio.timeout(self.config.start_timeout_ms / 1000):
                await app.wait_while(AppStatus.STARTING, AppStatus.RESTARTING)
        except TimeoutError:
            raise AotuiError(ErrorCode.E_TIMEOUT, f"{app.app_id} is still starting") from None

    def _start_failed(self, app: AppRecord, exc: Exception) -> AotuiError:
        """Leave ``app`` ``failed`` (why: ``last_exit``, System Logs); the error to raise."""
        if isinstance(exc, AotuiError):
            first_line = exc.message.splitlines()[0][:200] if exc.message else exc.code.value
            reason = f"start failed: {first_line.removeprefix('the app failed to start: ')}"
            if isinstance(exc.data.get("last_exit"), str):
                reason = exc.data["last_exit"]  # the worker died while starting: how it ended
            code, message = exc.code, exc.message
        elif isinstance(exc, TimeoutError):  # an OSError too: must not read as "cannot start: "
            ms = self.config.start_timeout_ms
            reason = f"start timeout ({ms} ms)"
            code, message = (
                ErrorCode.E_TIMEOUT,
                f"{app.app_id} did not show its views within {ms} ms",
            )
        else:
            reason = f"start failed: {exc}"
            code, message = ErrorCode.E_IO, f"cannot start {app.app_id}: {exc}"
        # What the app or its worker said is sanitized here: the desktop's hints below are not.
        reason, message = sanitize(reason, limit=1000), sanitize(message, limit=2000)
        # The status may have moved while we waited (a close, an uninstall): then it stays.
        if app.status is not AppStatus.STARTING:
            return AotuiError(code, message, {"app": app.app_id})
        app.start_failed(reason)
        way_back = f"open it to retry: <context>open --application {app.app_id}</context>"
        if app.saved_state is not None:
            way_back += (
                f", or start it without its saved state (which discards it): "
                f"<context>open --application {app.app_id} --fresh</context>"
            )
        self.host.log(
            f"{app.name} could not start ({reason}); it is failed. To get it back, {way_back}.",
            app.app_id,
        )
        return AotuiError(
            code,
            f"{message}. {app.app_id} ({app.name}) is failed; {way_back}",
            {"app": app.app_id, "last_exit": reason},
        )

    async def close(self, app: AppRecord) -> None:
        """Ask the worker to exit, kill it after a grace period, forget its views.

        Works in every state: a start in progress is waited for and then closed, a restart
        waiting out its back-off is called off, a close in progress is waited for.
        """
        try:
            async with asyncio.timeout(self.config.start_timeout_ms / 1000 + 2.0):
                await app.wait_while(AppStatus.STARTING, AppStatus.STOPPING)
        except TimeoutError:
            raise AotuiError(
                ErrorCode.E_TIMEOUT, f"{app.app_id} is still {app.status.value}; try again"
            ) from None
        if app.status is AppStatus.RESTARTING:
            # Between a crash and its restart: the restart sees the new status and gives up.
            await self.discard(app)
            app.closed()
            self.host.log(f"{app.name} closed (its restart was called off).")
            return
        if not app.is_live:
            return
        app.transition(AppStatus.STOPPING)
        worker = app.worker
        if worker is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(worker.send(Shutdown("closed by the agent")), 0.5)
            if worker.pid is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.launcher.wait_gone({worker.pid}), 1.0)
        await self.discard(app)
        # The app's data outlives its worker: opening it again restores the last acknowledged
        # state; only its views start afresh.
        app.closed()
        self.host.log(f"{app.name} closed.")

    def kill(self, app: AppRecord, reason: ExitReason) -> None:
        """SIGKILL ``app``'s worker, recording why (the exit report picks the reason up)."""
        kill_worker(app, reason)

    async def stop_all(self) -> None:
        """Ask every live worker to exit, give them a second, then discard them all."""
        live = [app for app in self.host.apps() if app.worker is not None]
        for app in live:
            assert app.worker is not None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(app.worker.send(Shutdown("desktop stopping")), 0.2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.launcher.wait_gone(set(self.launcher.pids)), 1.0)
        for app in live:
            await self.discard(app)

    async def discard(self, app: AppRecord) -> None:
        """Detach and close ``app``'s worker (killed if still alive) and release its leases."""
        ended = app.worker
        if ended is not None and ended.pid is not None and ended.pid not in self.launcher.pids:
            await ended.read_last_words()  # its exit may be heard before its crash report
        worker = app.detach()
        if worker is None:
            self.leases.release(app)
            return
        if worker.pid is not None:
            self.watchdog.forget(worker.pid)
            if worker.pid in self.launcher.pids:
                kill_group(worker.pid)
        self.leases.release(app)
        await worker.close()
        if worker.output is not None:
            worker.output.close()
        with contextlib.suppress(OSError):
            os.unlink(worker.endpoint.removeprefix("ipc://"))
