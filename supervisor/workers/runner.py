"""Starting, watching, restarting and stopping the workers of a desktop's apps.

The runner owns the zygote launcher, the watchdog and the heartbeats. A worker that ends without
being asked to is handled by its app's :class:`~supervisor.workers.restart.RestartPolicy`; the
reason it ended (``exit 1``, ``signal 9``, ``memory limit``, ``cpu limit``, ``timeout``, ``protocol
violation``) becomes the app's ``last_exit``. An operation in flight when a worker dies is answered
``E_APP_ERROR``, never left without a reply.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import socket
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import (
    Exited,
    FragmentUpdate,
    HttpCall,
    HttpResult,
    LogRecord,
    Message,
    Ping,
    Shutdown,
    SignalReason,
    WorkerPolicy,
)
from aotui.sandbox.cgroups import throttle_cpu
from aotui.sandbox.confine import required_layers
from aotui.supervisor.broker.http import (
    BROKER_THREADS_PER_APP,
    broker_pool,
    fetch,
    policy_from_permissions,
)
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord, AppStatus
from aotui.supervisor.desktop.system_log import said_by
from aotui.supervisor.paths import DesktopPaths, app_log_dir, unix_address
from aotui.supervisor.server.stall import LoopClock
from aotui.supervisor.workers.app_logs import OUTPUT_BYTES_PER_S, AppLog
from aotui.supervisor.workers.app_tmp import forget_base, make_base
from aotui.supervisor.workers.exits import ExitReason
from aotui.supervisor.workers.handle import (
    LOG_LINES_PER_S,
    MAX_WORKER_FRAME,
    WORKER_QUEUE_FRAMES,
    WorkerHandle,
    describe_exit,
    describe_fault,
)
from aotui.supervisor.workers.launcher import ZygoteLauncher
from aotui.supervisor.workers.restart import RestartDecision, RestartPolicy, RestartTracker
from aotui.supervisor.workers.restore import restore_messages
from aotui.supervisor.workers.uids import UidAllocator
from aotui.supervisor.workers.watchdog import Limit, Violation, Watchdog

__all__ = ["AppRunner"]

#: Entries of an app directory :func:`_unreadable_inside` looks at before trusting the rest.
_READABLE_CHECK_LIMIT = 2000
#: The largest app copied for a per-app uid that cannot read the app's own files.
_COPY_LIMIT_BYTES = 64 * 2**20
#: Brokered HTTP requests one worker may have in flight; more is a flood.
_MAX_HTTP_IN_FLIGHT = 8
#: The zygote's own restarts: at once, then backing off to 5 s while it keeps dying.
_ZYGOTE_POLICY = RestartPolicy(max_restarts=100, period_s=60.0, backoff_s=0.1, backoff_max_s=5.0)


class AppRunner:
    """The worker side of a desktop: launch, heartbeat, watchdog, restart, stop."""

    def __init__(
        self,
        config: DesktopConfig,
        paths: DesktopPaths,
        context: zmq.asyncio.Context,
        apps: Callable[[], Sequence[AppRecord]],
        log: Callable[..., None],
        on_change: Callable[[SignalReason], None],
    ) -> None:
        self.config = config
        self.paths = paths
        self.context = context
        self.apps = apps
        self.log = log
        self.on_change = on_change
        self.launcher = ZygoteLauncher(self._exited, self._log_fd(), self._zygote_died)
        self._zygote_restarts = RestartTracker(_ZYGOTE_POLICY)
        self.watchdog = Watchdog(
            config.watchdog_interval_s, config.cpu_window_s, config.cpu_strikes
        )
        self.closing = False
        #: Time the supervisor's own loop did not run is nobody's silence (server/stall.py).
        self.loop_clock = LoopClock(on_stall=self._stalled)
        # As root each worker leases a uid of its own on this machine (see workers/uids.py).
        self.uids = UidAllocator() if os.geteuid() == 0 else None
        #: Per running app: its leased uid (root) and its private temporary directory.
        self._leased: dict[str, int] = {}
        self._tmp_dirs: dict[str, Path] = {}
        #: Per running app whose files its uid cannot read: the copy it runs from.
        self._copies: dict[str, Path] = {}
        #: Where the apps' private temporary directories go (set by :meth:`start`).
        self.app_tmp_root = self.tmp_root
        self._tasks: list[asyncio.Task[None]] = []
        self._http_tasks: set[asyncio.Task[None]] = set()
        # Brokered HTTP has threads of its own: slow servers cannot starve the store's writes.
        self.http_pool = broker_pool()
        #: Bends an app's brokered fetch (a chaos run's http_fault), or None.
        self.http_fault: Callable[[AppRecord, Callable[..., Any]], Callable[..., Any]] | None = None

    def _log_fd(self) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        return os.open(self.paths.log, flags, 0o600)

    # --- lifecycle ------------------------------------------------------------------------------

    @property
    def tmp_root(self) -> Path:
        """The desktop's private scratch space (app copies): ``<runtime>/tmp/``."""
        return self.paths.root / "tmp"

    def start(self) -> None:
        """Start the zygote and the background loops."""
        # What a desktop killed before it could clean up left behind.
        if self.tmp_root.is_dir():
            forget_base(self.tmp_root)
        _remove_tree(self.tmp_root)
        self.tmp_root.mkdir(mode=0o700)
        # Per-app uids reach their temp dirs by name there (workers/app_tmp.py: SQLite needs it).
        self.app_tmp_root = make_base(self.tmp_root) if self.uids is not None else self.tmp_root
        self.launcher.start()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._watch(), name="watchdog"),
            loop.create_task(self._heartbeat(), name="heartbeat"),
            loop.create_task(self.loop_clock.run(), name="loop clock"),
        ]

    async def stop(self) -> None:
        """Stop every worker and the zygote; leaves no process behind."""
        self.closing = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        live = [app for app in self.apps() if app.worker is not None]
        for app in live:
            assert app.worker is not None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(app.worker.send(Shutdown("desktop stopping")), 0.2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.launcher.wait_gone(set(self.launcher.pids)), 1.0)
        for app in live:
            await self._discard(app)
        self.launcher.stop()
        self.http_pool.shutdown(wait=False, cancel_futures=True)
        forget_base(self.tmp_root)
        _remove_tree(self.tmp_root)

    def readable_app_dir(self, app: AppRecord, uid: int) -> Path:
        """As root, the directory the per-app ``uid`` runs ``app`` from: its own, or a copy.

        The directories above the app do not matter: the worker reaches the app's directory
        through a descriptor opened before its uid drop (``sandbox/handles.py``). Files of the app
        that ``uid`` may not read (a checkout made with umask 077) are copied for it instead, into
        the app's private area, owned by ``uid``; an app over :data:`_COPY_LIMIT_BYTES` is
        refused, naming the file and the ``chmod`` that would let it run in place.
        """
        source = app.manifest.app_dir
        blocked = _unreadable_inside(source, uid)
        if blocked is None:
            return source
        size = _tree_size(source)
        if size > _COPY_LIMIT_BYTES:
            raise AotuiError(
                ErrorCode.E_PERMISSION,
                f"{app.app_id} ({app.name}) runs as uid {uid}, which cannot read {blocked} (mode "
                f"{_mode(blocked)}), and at {size // 2**20} MiB the app is too big to copy for it "
                f"(limit {_COPY_LIMIT_BYTES // 2**20} MiB): make its files readable by other "
                f"users with chmod -R o+rX {source}",
                {"path": str(blocked)},
            )
        copy = self.tmp_root / f"{app.app_id}-{secrets.token_hex(4)}-app"
        shutil.copytree(source, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
        _hand_over(copy, uid)
        self._copies[app.app_id] = copy
        self.log(
            f"{app.name}: uid {uid} cannot read {blocked} (mode {_mode(blocked)}); it runs from "
            "a private copy of the app (chmod -R o+rX the app to run it in place)."
        )
        return copy

    def policy(self, app: AppRecord) -> WorkerPolicy:
        """The confinement policy of ``app``'s worker; leases its uid and temp dir when new."""
        grants = app.manifest.permissions
        uid = self._leased.get(app.app_id)
        if self.uids is not None and uid is None:
            # Keyed by the runtime directory: two live desktops never share one.
            uid = self.uids.allocate(f"{self.paths.root} {app.app_id}")
            self._leased[app.app_id] = uid
        app_dir = app.manifest.app_dir
        if uid is not None:
            app_dir = self._copies.get(app.app_id) or self.readable_app_dir(app, uid)
        tmp_dir = self._tmp_dirs.get(app.app_id)
        if tmp_dir is None:
            tmp_dir = self.app_tmp_root / f"{app.app_id}-{secrets.token_hex(4)}"
            tmp_dir.mkdir(mode=0o700)
            self._tmp_dirs[app.app_id] = tmp_dir
            if uid is not None:
                os.chown(tmp_dir, uid, uid)
        return WorkerPolicy(
            app=app.app_id,
            app_dir=str(app_dir),
            fs_read=[p.scope for p in grants if p.resource == "fs" and p.action == "read"],
            fs_write=[p.scope for p in grants if p.resource == "fs" and p.action == "write"],
            limits={**vars(self.config.limits), **app.manifest.limits},
            uid=uid,
            strict=self.config.strict_sandbox,
            tmp_dir=str(tmp_dir),
        )

    def _release(self, app: AppRecord) -> None:
        """Give back what the app's last worker leased: its temp dir, its copy, its uid."""
        for made in (self._tmp_dirs.pop(app.app_id, None), self._copies.pop(app.app_id, None)):
            if made is not None:
                _remove_tree(made)
        uid = self._leased.pop(app.app_id, None)
        if uid is not None and self.uids is not None:
            self.uids.release(uid)

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
            self.log(f"{app.name} starts without its saved state (open --fresh).", app.app_id)
        app.transition(AppStatus.STARTING)
        # The channel: a listening socket only this worker holds (ZeroMQ binds on it with
        # ZMQ_USE_FD), at a fresh path in our 0700 directory; we connect to it. Identity is
        # the socket a frame arrives on, never what the frame says.
        path = self.paths.workers / f"{app.app_id}-{secrets.token_hex(6)}.sock"
        listener: socket.socket | None = None
        output: AppLog | None = None
        try:
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            output = AppLog(
                app_log_dir(self.config.desktop) / f"{app.app_id}.log",
                on_over=lambda: self.log(
                    f"{app.name} prints more than {OUTPUT_BYTES_PER_S // 1024} KB a second; it "
                    f"is slowed down and the rest is dropped from its log (aotui logs "
                    f"{app.app_id}).",
                    app.app_id,
                ),
            )
            address = unix_address(path)  # a long runtime path is reached through a short one
            endpoint = f"ipc://{address}"
            listener.bind(address)
            listener.listen(4)
            sock = self.context.socket(zmq.PAIR)
            sock.setsockopt(zmq.LINGER, 0)
            # Refused by ZeroMQ before it allocates (options apply to connections made after).
            sock.setsockopt(zmq.MAXMSGSIZE, MAX_WORKER_FRAME)
            # What ZeroMQ queues for us before we read is the worker's to wait for, not ours.
            sock.setsockopt(zmq.RCVHWM, WORKER_QUEUE_FRAMES)
            sock.connect(endpoint)
            handle = WorkerHandle(
                app.app_id,
                endpoint,
                sock,
                self._message,
                self._violation,
                BROKER_THREADS_PER_APP,
                on_fault=self._fault,
            )
            handle.start()
            app.attach(handle)
            timeout = self.config.start_timeout_ms / 1000
            policy = self.policy(app)  # its app_dir may be a copy the per-app uid can read
            handle.pid = await self.launcher.launch(
                app.app_id,
                policy.app_dir,
                app.manifest.entry,
                endpoint,
                policy,
                listener.fileno(),
                output.write_fd,
            )
            output.handed_over()
            handle.output = output
            limits = {**vars(self.config.limits), **app.manifest.limits}
            self.watchdog.watch(app.app_id, handle.pid, limits["memory_mb"], limits["cpu_percent"])
            # Keyed data larger than a frame follows its Start in chunks (workers/restore.py).
            for message in restore_messages(app.app_id, app.saved_state, app.restore_views):
                await asyncio.wait_for(handle.send(message), timeout)
            await asyncio.wait_for(asyncio.shield(handle.hello), timeout)
            await asyncio.wait_for(asyncio.shield(handle.first_update), timeout)
        except (AotuiError, TimeoutError, OSError) as exc:
            if output is not None:
                output.close()
            await self._discard(app)
            raise self._start_failed(app, exc) from None
        finally:
            if listener is not None:
                listener.close()  # the worker holds its own copy
        handle.last_pong = handle.serving_since = time.monotonic()
        app.transition(AppStatus.RUNNING)
        if restarting:
            self.on_change(SignalReason.APP_RESTARTED)
        what = "restarted" if restarting else "opened"
        # The pid and the layer list are status's (aotui status): here they cost every snapshot
        # ~60 tokens an app. A missing layer strict mode would insist on is still named.
        missing = sorted(required_layers(os.geteuid() == 0) - set(handle.layers))
        how = f"partly sandboxed: without {', '.join(missing)}" if missing else "sandboxed"
        self.log(f"{app.name} {what} ({how}).", app.app_id)

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
        self.log(
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
            # Between a crash and its restart: _ended sees the new status and gives up.
            await self._discard(app)
            app.closed()
            self.log(f"{app.name} closed (its restart was called off).")
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
        await self._discard(app)
        # The app's data outlives its worker: opening it again restores the last acknowledged
        # state; only its views start afresh.
        app.closed()
        self.log(f"{app.name} closed.")

    def kill(self, app: AppRecord, reason: ExitReason) -> None:
        """SIGKILL ``app``'s worker, recording why (the exit report picks the reason up)."""
        worker = app.worker
        if worker is None or worker.pid is None:
            return
        app.blame(reason)
        _kill_group(worker.pid)

    async def _discard(self, app: AppRecord) -> None:
        worker = app.detach()
        if worker is None:
            self._release(app)
            return
        if worker.pid is not None:
            self.watchdog.forget(worker.pid)
            if worker.pid in self.launcher.pids:
                _kill_group(worker.pid)
        self._release(app)
        await worker.close()
        if worker.output is not None:
            worker.output.close()
        with contextlib.suppress(OSError):
            os.unlink(worker.endpoint.removeprefix("ipc://"))

    # --- what workers say -----------------------------------------------------------------------

    def _app_of(self, worker: WorkerHandle) -> AppRecord | None:
        return next((a for a in self.apps() if a.worker is worker), None)

    def _message(self, worker: WorkerHandle, message: Message) -> None:
        app = self._app_of(worker)
        if app is None:
            return
        if isinstance(message, FragmentUpdate):
            app.views.apply(message, worker.last_frame_bytes)
            if not worker.first_update.done():
                worker.first_update.set_result(None)
            elif app.status is AppStatus.RUNNING:
                self.on_change(SignalReason.DOM_MUTATION)
        elif isinstance(message, LogRecord):
            admitted, dropped = worker.admit_log()
            if dropped:
                self.log(
                    f"{app.name}: {dropped} log line(s) dropped (over {LOG_LINES_PER_S}/s)",
                    said_by(app.app_id),
                )
            if admitted:
                text = message.message
                if _TRACEBACK in text:  # the exception line first: a long trace is cut at the end
                    self._keep_traceback(app, text)
                    text = _brief_traceback(text, app.app_id, str(app.manifest.app_dir))
                self.log(f"{app.name}: {text}", said_by(app.app_id))
        elif isinstance(message, HttpCall):
            if worker.http_in_flight >= _MAX_HTTP_IN_FLIGHT:
                self.log(f"{app.name} flooded the HTTP broker; killing it.")
                self.kill(app, ExitReason.PROTOCOL_VIOLATION)
                return
            worker.http_in_flight += 1
            task = asyncio.get_running_loop().create_task(self._http(app, worker, message))
            self._http_tasks.add(task)
            task.add_done_callback(self._http_tasks.discard)

    async def _http(self, app: AppRecord, worker: WorkerHandle, call: HttpCall) -> None:
        """Perform one brokered HTTP request off the loop and answer the worker."""
        policy = policy_from_permissions(app.manifest.permissions, self.config.allow_private_http)
        try:
            request = call.request  # its fields' types checked by the codec on receipt
            async with worker.http_slots:  # one app never holds the whole pool
                loop = asyncio.get_running_loop()
                fetcher = fetch if self.http_fault is None else self.http_fault(app, fetch)
                response = await loop.run_in_executor(self.http_pool, fetcher, request, policy)
            result = HttpResult(call.call_id, response=response)
        except AotuiError as exc:
            if exc.code is ErrorCode.E_PERMISSION:
                self.log(f"{app.name}: HTTP request refused: {exc.message}")
            result = HttpResult(call.call_id, error=exc.to_dict())
        finally:
            worker.http_in_flight -= 1
        if app.worker is worker:
            with contextlib.suppress(zmq.ZMQError, AotuiError):
                await worker.send(result)

    def _keep_traceback(self, app: AppRecord, text: str) -> None:
        """Append a traceback the worker reported to the app's log (``aotui logs``)."""
        stamp = time.strftime("%Y-%m-%d %H:%M:%S ")
        lines = "".join(f"{stamp}{line}\n" for line in text.splitlines())
        with (
            contextlib.suppress(OSError),
            open(app_log_dir(self.config.desktop) / f"{app.app_id}.log", "a") as log,
        ):
            log.write(lines)

    def _violation(self, worker: WorkerHandle, error: AotuiError) -> None:
        app = self._app_of(worker)
        if app is None:
            return
        what = f"{app.name} broke the channel protocol ({error.message}); killing it."
        self.log(what, app.app_id)
        self.kill(app, ExitReason.PROTOCOL_VIOLATION)

    def _fault(self, worker: WorkerHandle, exc: Exception) -> None:
        """A bug of ours reading ``worker``'s channel: say so and restart the app from its
        acknowledged state, rather than leave it unread until a request times out."""
        app = self._app_of(worker)
        if app is None:
            return
        self.log(f"{app.name}: {describe_fault(app.app_id, exc)}; killing it.", app.app_id)
        self.kill(app, ExitReason.SUPERVISOR_ERROR)

    def _exited(self, exited: Exited) -> None:
        app = next((a for a in self.apps() if a.worker and a.worker.pid == exited.pid), None)
        self.watchdog.forget(exited.pid)
        if app is None:
            return
        app.ended(
            app.kill_reason or exited.reason or describe_exit(exited.exit_code, exited.signal)
        )
        if exited.reason and not app.kill_reason:
            self.log(f"{app.name} over its {exited.reason} (stopped by the kernel's cgroup limit).")
        worker = app.worker
        if worker is not None:
            worker.fail_pending(
                AotuiError(
                    ErrorCode.E_APP_ERROR,
                    f"{app.app_id} ({app.name}) crashed mid-operation ({app.last_exit})",
                    {"last_exit": app.last_exit},
                )
            )
        if app.status in (AppStatus.STOPPING, AppStatus.STARTING) or self.closing:
            return
        # At once, not after the discard: a command queued behind the one that just failed must
        # not find a "running" app without a worker.
        if app.is_live:
            app.transition(AppStatus.RESTARTING)
        abnormal = bool(app.kill_reason or exited.reason) or exited.exit_code != 0
        since = worker.serving_since if worker is not None else None
        served_s = time.monotonic() - since if since is not None else 0.0
        asyncio.get_running_loop().create_task(self._ended(app, abnormal, served_s))

    async def _ended(self, app: AppRecord, abnormal: bool, served_s: float = 0.0) -> None:
        """Apply the restart policy to a worker that ended on its own (after ``served_s``)."""
        # Not the app's doing: the zygote died, or the desktop discarded an effect.
        if app.last_exit in (ExitReason.LAUNCHER_EXITED, ExitReason.UNACKNOWLEDGED_EFFECT):
            decision = RestartDecision(True)  # the zygote died, or an effect was undone
        else:
            decision = app.restart_tracker.decide(abnormal, served_s)
        mounted = app.views.mounted_keys()
        await self._discard(app)
        if app.status in (AppStatus.STOPPING, AppStatus.NOT_RUNNING):
            return  # closed while the worker was being discarded
        if app.status is AppStatus.STARTING or app.is_live:
            return  # an open brought it back while the worker was being discarded: its start
        if decision.failed:
            app.transition(AppStatus.FAILED)
            self.log(f"{app.name} failed ({app.last_exit}): {decision.reason}; open it to retry.")
            return
        if not decision.restart:
            app.transition(AppStatus.RESTARTING)
            app.transition(AppStatus.NOT_RUNNING)
            self.log(f"{app.name} ended ({app.last_exit}); {decision.reason}.")
            return
        app.restarting(mounted)
        self.log(f"{app.name} crashed ({app.last_exit}); restarting.", app.app_id)
        if decision.delay_s:
            await asyncio.sleep(decision.delay_s)
        if app.status is not AppStatus.RESTARTING:
            return  # closed or uninstalled while we waited
        with contextlib.suppress(AotuiError):
            await self.open(app)  # a start that fails says so itself (the app is failed)

    # --- the zygote -----------------------------------------------------------------------------

    def _zygote_died(self, pids: set[int], how: str) -> None:
        """The zygote died and its workers with it: restart it, reopen its apps with their state."""
        if self.closing:
            return
        decision = self._zygote_restarts.decide(abnormal=True)
        delay = decision.delay_s if decision.restart else _ZYGOTE_POLICY.backoff_max_s
        when = f"in {delay:.1f} s" if delay else "now"
        self.log(
            f"The worker launcher (zygote) exited ({how}); its {len(pids)} worker(s) died with "
            f"it. It is restarted {when}, and its apps are reopened with their state."
        )
        for app in list(self.apps()):
            worker = app.worker
            if worker is not None and worker.pid is not None and worker.pid in pids:
                app.blame(ExitReason.LAUNCHER_EXITED, overrule=True)
                self._exited(Exited(worker.pid, None, signal.SIGKILL))
        task = asyncio.get_running_loop().create_task(self._revive_zygote(delay))
        self._tasks = [*(t for t in self._tasks if not t.done()), task]

    async def _revive_zygote(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        while not self.closing:
            try:
                self.launcher.start()
                return
            except OSError as exc:
                self.log(f"The worker launcher could not be restarted ({exc}); retrying in 5 s.")
                await asyncio.sleep(_ZYGOTE_POLICY.backoff_max_s)

    # --- background loops -----------------------------------------------------------------------

    async def _watch(self) -> None:
        answered: dict[int, int] = {}  # pid → requests answered at its last CPU window

        def serving(pid: int) -> bool:
            """Whether the worker answered a request since its last CPU window."""
            worker = next((a.worker for a in self.apps() if a.worker and a.worker.pid == pid), None)
            if worker is None:
                return False
            before, answered[pid] = answered.get(pid, 0), worker.answered
            return worker.answered > before

        while True:
            await asyncio.sleep(self.watchdog.interval_s)
            for violation in self.watchdog.sample(serving):
                app = next((a for a in self.apps() if a.app_id == violation.app_id), None)
                if app is None or app.worker is None or app.worker.pid != violation.pid:
                    continue
                if violation.reason is Limit.CPU_THROTTLED:
                    self._throttle(app, violation)
                    continue
                answered.pop(violation.pid, None)
                self.log(f"{app.name} over its {violation.reason} ({violation.detail}).")
                self.kill(app, ExitReason(violation.reason.value))

    def _throttle(self, app: AppRecord, violation: Violation) -> None:
        """A busy worker over its CPU share keeps serving, held to its share by the kernel."""
        watched = self.watchdog.workers.get(violation.pid)
        if watched is None or watched.throttled:
            return
        watched.throttled = throttle_cpu(self.watchdog.family(violation.pid), watched.cpu_percent)
        how = watched.throttled or "nothing could lower its share"
        self.log(
            f"{app.name} is busy serving requests over its CPU share ({violation.detail}): "
            f"throttled ({how}), not killed."
        )

    def _stalled(self, lost_s: float) -> None:
        if lost_s >= 2.0:  # shorter stalls are load; longer ones deserve a line
            self.log(
                f"The supervisor itself did not run for {lost_s:.1f} s (paused, suspended or "
                f"starved); heartbeats and leases do not count that time."
            )

    async def _heartbeat(self) -> None:
        seq = 0
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            seq += 1
            for app in self.apps():
                worker = app.worker
                if worker is None or not app.is_live:
                    continue
                # Answers that waited in the socket while we were stopped are not silence.
                lost = self.loop_clock.lost_since(worker.last_pong)
                silent = time.monotonic() - worker.last_pong - lost
                if silent > self.config.heartbeat_timeout_s:
                    self.log(
                        f"{app.name} stopped answering heartbeats for {silent:.0f} s; killing it."
                    )
                    self.kill(app, ExitReason.TIMEOUT)
                    continue
                with contextlib.suppress(zmq.ZMQError, AotuiError):
                    await worker.send(Ping(seq))


_TRACEBACK = "Traceback (most recent call last)"


def _brief_traceback(text: str, app_id: str, app_dir: str) -> str:
    """A traceback as one System Logs line: the exception, where the app raised it, where the
    rest is (the deepest frame in the app's own files, else the deepest)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    exception = lines[-1] if lines else text
    frames = [line for line in lines if line.startswith('File "')]
    own = [line for line in frames if line.startswith(f'File "{app_dir}')]
    where = (own or frames or [""])[-1]
    at = f" ({where})" if where else ""
    return f"{exception}{at}; the whole traceback: aotui logs {app_id}"


def _unreadable_inside(app_dir: Path, uid: int) -> Path | None:
    """The first file or directory of ``app_dir`` that ``uid`` (its own gid, no groups) cannot
    read or search, or ``None``; looks at :data:`_READABLE_CHECK_LIMIT` entries at most."""
    seen = 0
    for directory, dirs, files in os.walk(app_dir):
        entries = [(directory, True)] + [(os.path.join(directory, f), False) for f in files]
        for name, is_dir in entries:
            seen += 1
            if seen > _READABLE_CHECK_LIMIT:
                return None
            try:
                info = os.stat(name)
            except OSError:
                return Path(name)
            if info.st_uid == uid:
                needed = stat.S_IRUSR | (stat.S_IXUSR if is_dir else 0)
            elif info.st_gid == uid:
                needed = stat.S_IRGRP | (stat.S_IXGRP if is_dir else 0)
            else:
                needed = stat.S_IROTH | (stat.S_IXOTH if is_dir else 0)
            if info.st_mode & needed != needed:
                return Path(name)
        dirs.sort()
    return None


def _tree_size(root: Path) -> int:
    """The bytes of the files below ``root`` (what a copy would take), symlinks not followed."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


def _hand_over(copy: Path, uid: int) -> None:
    """Make ``copy`` readable by ``uid`` alone: owned by it, read-only, searchable."""
    for directory, _dirs, files in os.walk(copy):
        for name in files:
            path = os.path.join(directory, name)
            os.lchown(path, uid, uid)
            if not os.path.islink(path):
                os.chmod(path, 0o400)
        os.chown(directory, uid, uid)
        os.chmod(directory, 0o500)


def _mode(path: Path) -> str:
    with contextlib.suppress(OSError):
        return stat.filemode(path.stat().st_mode)
    return "unknown"


def _remove_tree(path: Path) -> None:
    """Remove ``path`` and everything in it, even directories the app made unwritable."""

    def retry(function: Any, name: str, error: Any) -> None:
        # An unprivileged supervisor shares the app's uid: mkdir(mode=0o500) inside its temp
        # dir would otherwise keep the tree; root removes anything anyway.
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(name), 0o700)
            function(name)

    if path.exists():
        shutil.rmtree(path, onerror=retry)


def _kill_group(pid: int) -> None:
    """SIGKILL a worker and every process it started (they cannot leave its process group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
