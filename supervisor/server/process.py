"""The supervisor process: one desktop, its client and signal endpoints, its event loop.

Clients talk to a ROUTER socket (``control.sock``) with :class:`~protocol.messages.Request`
frames; each request runs in its own task, so a command waiting on a slow app never delays a
snapshot, a status query or a command for another app. Commands on the same app run one at a
time, in arrival order. Signals go out on a PUB socket (``signals.sock``), throttled.

The methods and their parameters are declared once, in :mod:`protocol.api`; a request's params
become the method's typed record there (checked once, before its handler runs), and each method
with the control face has a handler here of the same name (``exec_text`` for ``exec``) or one
the product layer adds (``serve.py``). ``docs/reference.md`` lists them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import psutil
import zmq
import zmq.asyncio

from aotui.protocol import api, codec
from aotui.protocol.api import ClientKind, Face
from aotui.protocol.commands import Action, Command
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.errors import Outcome as ReplyOutcome
from aotui.protocol.grammar import parse_commands
from aotui.protocol.messages import ErrorReply, Operation, Reply, Request, Signal, SignalReason
from aotui.supervisor.config import DesktopConfig
from aotui.supervisor.desktop.app_record import AppRecord
from aotui.supervisor.desktop.command_ids import RUNNING, answer
from aotui.supervisor.desktop.confirmations import AwaitingUser, Outcome, Verdict
from aotui.supervisor.desktop.desktop import Desktop, uninstalled
from aotui.supervisor.desktop.snapshot import RefTable
from aotui.supervisor.desktop.snapshot_pull import PullOptions
from aotui.supervisor.instrument import INSTRUMENTED, Instrument
from aotui.supervisor.paths import DesktopPaths, is_listening, unix_address
from aotui.supervisor.server.client_queues import IN_FLIGHT, QUEUED, ClientQueues
from aotui.supervisor.server.conn_guard import (
    ANSWERED_FRAME_BYTES,
    HANDSHAKE_S,
    ConnectionGuard,
    connection_bound,
    oversized,
    raise_descriptor_limit,
)
from aotui.supervisor.server.lease import InputLease
from aotui.supervisor.server.memory import configure_allocator, trim_when_idle
from aotui.supervisor.server.sessions import SessionTable, check_session_name
from aotui.supervisor.server.throttle import SignalThrottle

__all__ = ["HANDLERS", "Supervisor"]

#: A declared method whose handler has another name (``exec`` would shadow the builtin).
HANDLERS = {"exec": "exec_text", "export": "export_state", "import": "import_state"}

log = logging.getLogger("aotui.supervisor")

Method = Callable[[Any], Awaitable[Any]]  # takes its declared api.Params record


class Service(Protocol):
    """Something served beside the control socket (the product layer's JSON-RPC socket)."""

    async def start(self) -> None:
        """Begin serving; called once the desktop has started."""

    async def stop(self) -> None:
        """Stop serving and remove what ``start`` created; called before the desktop stops."""


class Supervisor:
    """Owns one desktop and serves its clients until ``shutdown``."""

    def __init__(self, config: DesktopConfig, paths: DesktopPaths) -> None:
        self.config = config
        self.paths = paths
        self.lease = InputLease(config.lease_s)
        self.throttle = SignalThrottle(config.signal_rate_per_s)
        #: The app ids of the changes the throttle holds (first-seen order), for their signal.
        self._held_apps: dict[str, None] = {}
        self.stopping = asyncio.Event()
        # Uptime is this process's, not the stored desktop's age (which survives down/up).
        self.started = time.monotonic()
        self.signal_wake = asyncio.Event()
        self.app_locks: dict[str, asyncio.Lock] = {}
        #: Operations queued or running by (app_id, view_id), for a manifest's view_in_flight.
        self.view_in_flight: dict[tuple[str, str], int] = {}
        self.processes: dict[int, psutil.Process] = {}
        #: Which snapshot each reader last pulled (refs resolve against it; CONTRACT §6).
        self.sessions = SessionTable()
        #: Called with the reason of every change, before the throttle (wait-for's quiet time).
        self.change_listeners: list[Callable[[SignalReason], None]] = []
        #: Served beside the control socket while the desktop runs (added before ``serve``).
        self.services: list[Service] = []
        #: What observes the desktop (supervisor/instrument.py): by default it only runs the work.
        self.instrument = Instrument()
        #: Makes the instrument once the desktop has started (the product layer's: a chaos run's
        #: nemesis when ``aotui chaos run`` started this desktop), or None.
        self.instrument_with: Callable[[Supervisor], Instrument | None] | None = None
        #: The handler of each declared control method (protocol/api.py) this class serves; the
        #: product layer adds the rest (serve.py) before :meth:`serve`, which checks none lacks.
        self.methods: dict[str, Method] = {
            name: getattr(self, HANDLERS.get(name, name))
            for name, method in api.METHODS.items()
            if Face.CONTROL in method.faces and hasattr(self, HANDLERS.get(name, name))
        }
        #: Execute requests being served now (at most ``config.max_in_flight``; seed 004).
        self.in_flight = 0

    # --- running --------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Bind, start the desktop, serve until shutdown, then stop every process we started."""
        configure_allocator()  # before ZeroMQ's and the executor's threads (server/memory.py)
        missing = [
            name
            for name, method in api.METHODS.items()
            if Face.CONTROL in method.faces and name not in self.methods
        ]
        if missing:
            raise RuntimeError(f"declared control methods without a handler: {missing}")
        self.paths.create()
        sockets = (self.paths.control_file, self.paths.signals_file)
        for path in sockets:
            if is_listening(path):
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"desktop {self.config.desktop!r} is already running at {self.paths.root}",
                )
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # left by a desktop that was killed
        for stale in self.paths.workers.glob("*.sock"):  # channels of a killed desktop's workers
            with contextlib.suppress(FileNotFoundError):
                stale.unlink()
        # A flood of connections must never take the workers' descriptors (conn_guard.py).
        self.connection_bound = connection_bound(raise_descriptor_limit())
        context = zmq.asyncio.Context()
        self.control = context.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.LINGER, 0)
        self.control.setsockopt(zmq.HANDSHAKE_IVL, int(HANDSHAKE_S * 1000))
        # Replies a client does not read are dropped past this many, not kept (ROUTER semantics).
        self.control.setsockopt(zmq.SNDHWM, QUEUED)
        self.control.setsockopt(zmq.MAXMSGSIZE, ANSWERED_FRAME_BYTES)  # answered past 4 MiB
        self.pub = context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        bound: dict[Path, int] = {}
        try:
            for path, sock in zip(sockets, (self.control, self.pub), strict=True):
                sock.bind(f"ipc://{unix_address(path)}")
                bound[path] = path.stat().st_ino
            await self._run(context)
        finally:
            self.control.close(linger=0)
            self.pub.close(linger=0)
            context.term()
            _remove_sockets(bound)

    async def _run(self, context: zmq.asyncio.Context) -> None:
        self.desktop = Desktop(self.config, self.paths, context, self.changed)
        # A lease is not lost to time the supervisor itself was stopped (server/stall.py).
        self.lease.clock = self.desktop.runner.loop_clock
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stopping.set)
        tasks: list[asyncio.Task[None]] = []
        try:
            await self.desktop.start()
            made = self.instrument_with(self) if self.instrument_with is not None else None
            if made is not None:
                self.instrument = made
                self.desktop.instrument_with(made)
            self.paths.pidfile.write_text(f"{os.getpid()}\n")
            guard = ConnectionGuard(
                self.control,
                unix_address(self.paths.control_file),
                self.connection_bound,
                self.desktop.log,
            )
            tasks = [
                loop.create_task(guard.run()),
                loop.create_task(self._serve_control()),
                loop.create_task(self._publish_trailing()),
                loop.create_task(trim_when_idle(lambda: self.in_flight > 0)),
            ]
            for service in self.services:
                await service.start()
            await self.stopping.wait()
        finally:
            for service in reversed(self.services):
                try:
                    await service.stop()
                except Exception:  # noqa: BLE001 - a service's bug must not stop the shutdown
                    log.error("stopping %r failed: %s", service, traceback.format_exc())
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.desktop.stop()
            with contextlib.suppress(FileNotFoundError):
                self.paths.pidfile.unlink()

    async def _serve_control(self) -> None:
        # One bounded queue per client: a client that never reads cannot starve the others.
        queues = ClientQueues(self._answer, self._refuse)
        while True:
            frames = await self.control.recv_multipart(copy=True)
            if len(frames) != 2:
                # One frame per request (after the identity ROUTER adds): say so, never go quiet.
                await self._reply(
                    frames[0],
                    ErrorReply(
                        0,
                        ErrorCode.E_INVALID_CMD.value,
                        f"a request is one frame; this message had {len(frames) - 1}",
                    ),
                )
                continue
            identity, frame = frames
            refusal = oversized(len(frame))
            if refusal is not None:  # answered at once, and never queued
                await self._reply(identity, ErrorReply(0, ErrorCode.E_INVALID_CMD.value, refusal))
                continue
            await queues.offer(identity, frame)
            await queues.pause()

    async def _refuse(self, identity: bytes, frame: bytes) -> None:
        """Answer a request whose client already has its queue full: ``E_RATE_LIMITED``."""
        request_id = 0
        with contextlib.suppress(AotuiError):
            request = codec.decode(frame)
            request_id = request.request_id if isinstance(request, Request) else 0
        message = (
            f"this client has {IN_FLIGHT} requests being served and {QUEUED} waiting; read the "
            f"replies before sending more (this request did not run)"
        )
        await self._reply(identity, ErrorReply(request_id, ErrorCode.E_RATE_LIMITED.value, message))

    async def _reply(self, identity: bytes, reply: Reply | ErrorReply) -> None:
        with contextlib.suppress(zmq.ZMQError):
            await self.control.send_multipart([identity, codec.encode(reply)], copy=False)

    async def _answer(self, identity: bytes, frame: bytes) -> None:
        request_id = 0
        try:
            request = codec.decode(frame)
            if not isinstance(request, Request):
                raise AotuiError(ErrorCode.E_INVALID_CMD, f"expected a request, got {request.KIND}")
            request_id = request.request_id
            declared = api.METHODS.get(request.method)
            handler = self.methods.get(request.method)
            if declared is None or handler is None:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"unknown method {request.method!r:.80}; known: "
                    f"{', '.join(sorted(self.methods))}",
                )
            params = dict(request.params)
            if "peer" in declared.params.FIELDS:
                # The connection asking, which no request can name for itself (budgets).
                params["peer"] = f"control:{identity.hex()}"
            call = declared.parse(params, Face.CONTROL)
            reply: Reply | ErrorReply = Reply(request_id, await self.call(request.method, call))
        except AotuiError as exc:
            reply = ErrorReply(request_id, exc.code.value, exc.message, exc.data)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: logged, answered E_INTERNAL
            log.error("internal error: %s", traceback.format_exc())
            reply = ErrorReply(
                request_id,
                ErrorCode.E_INTERNAL.value,
                f"internal error: {type(exc).__name__}: {exc}",
            )
        try:
            encoded = codec.encode(reply)
        except AotuiError as exc:
            encoded = codec.encode(ErrorReply(request_id, ErrorCode.E_INTERNAL.value, exc.message))
        with contextlib.suppress(zmq.ZMQError):
            await self.control.send_multipart([identity, encoded], copy=False)

    async def call(self, method: str, call: Any) -> Any:
        """Run ``method``'s handler with its checked params (every face comes through here)."""
        handler = self.methods[method]
        if method in INSTRUMENTED:
            return await self.instrument.client_call(method, call, handler)
        return await handler(call)

    # --- signals --------------------------------------------------------------------------------

    def changed(self, reason: SignalReason, app: str | None = None) -> None:
        """Something on the desktop changed (of ``app``, when one app's): publish now or hold
        for the trailing edge."""
        for listener in self.change_listeners:
            listener(reason)
        self.instrument.changed(reason)
        burst = self.throttle.offer(reason)
        if burst is not None:  # nothing was held: this change is the signal's only one
            self._publish(*burst, apps=[app] if app is not None else [])
        else:
            if app is not None:
                self._held_apps[app] = None
            self.signal_wake.set()

    def _publish(self, reason: str, reasons: tuple[str, ...], apps: Sequence[str] = ()) -> bool:
        """Send one signal now; False when the instrument dropped it (a chaos signal_loss)."""
        if not self.instrument.signal(reason, reasons, apps):
            return False
        signal_message = Signal(
            self.config.desktop,
            time.time(),
            SignalReason(reason),
            list(map(SignalReason, reasons)),
            list(apps),
        )
        with contextlib.suppress(zmq.ZMQError):
            self.pub.send(codec.encode(signal_message), zmq.NOBLOCK)
        return True

    async def _publish_trailing(self) -> None:
        while True:
            delay = self.throttle.next_due_in()
            if delay is None:
                self.signal_wake.clear()
                await self.signal_wake.wait()
                continue
            await asyncio.sleep(delay)
            burst = self.throttle.due()
            if burst is not None:
                apps, self._held_apps = list(self._held_apps), {}
                self._publish(*burst, apps=apps)

    # --- methods --------------------------------------------------------------------------------

    async def ping(self, call: api.PingParams) -> dict[str, Any]:
        """Liveness: the supervisor's pid and desktop name."""
        return {"pid": os.getpid(), "desktop": self.config.desktop}

    async def snapshot(self, call: api.SnapshotParams) -> dict[str, Any]:
        """Assemble the desktop; optionally release the caller's previous snapshot id.

        With a ``session`` (or the lease's ``token``) the new id becomes that session's last
        pull, which its executes resolve refs against; ``include_meta`` adds ``meta``;
        ``since``, ``app``, ``view``, ``max_tokens`` and ``include_instructions`` choose the
        text (:class:`~supervisor.desktop.snapshot_pull.PullOptions`). ``format`` json is the
        product layer's (serve.py wraps this handler).
        """
        previous = call.release
        if previous is not None:
            self.desktop.registry.discard(previous)
        session = self._session(call.session, call.token)
        snapshot_id, snap = self.desktop.snapshot(PullOptions.of(call))
        if session is not None:
            # Charged to the client that pulled (its connection): past its budget its own
            # oldest sessions go, never another client's (server/sessions.py).
            for held in self.sessions.pulled(session, snapshot_id, call.peer or ""):
                if held != previous:
                    self.desktop.registry.discard(held)
        result: dict[str, Any] = {"snapshot_id": snapshot_id, "markdown": snap.markdown}
        if call.include_meta:
            result["meta"] = self._meta(snapshot_id, session)
        return result

    def _session(self, named: str | None, token: str | None) -> str | None:
        """The reader a request speaks for: its ``session``, else the lease owner its token proves.

        Names the desktop gives itself start with ``#`` (a JSON-RPC connection's, unguessable) or
        ``~`` (a lease owner's, which only the lease's token selects).
        """
        if named is not None:
            if named.startswith("#") and len(named) <= 64:
                return named
            return check_session_name(named)
        owner = self.lease.owner
        if token and owner is not None:
            with contextlib.suppress(AotuiError):
                self.lease.check(token)
                return f"~{owner}"
        return None

    def _meta(self, snapshot_id: str, session: str | None) -> dict[str, Any]:
        """What a snapshot was taken from: id, time, session, lease holder, per-app state."""
        return {
            "snapshot_id": snapshot_id,
            "time": time.time(),
            "session": session,
            "lease_owner": self.lease.owner,
            "apps": [
                {
                    "app": app.app_id,
                    "id": app.manifest.id,
                    "name": app.name,
                    "state": app.status.value,
                }
                for app in self.desktop.apps
            ],
        }

    async def retain_snapshot(self, call: api.RetainSnapshotParams) -> None:
        """Take one more reference on a snapshot id."""
        self.desktop.registry.retain(call.snapshot_id)

    async def release_snapshot(self, call: api.ReleaseSnapshotParams) -> None:
        """Drop one reference on a snapshot id."""
        self.desktop.registry.release(call.snapshot_id)

    async def acquire(self, call: api.AcquireParams) -> dict[str, Any]:
        """Take the input lease (or renew it, presenting its ``token``); returns the token.

        ``kind`` names the client (``mcp``, ``cli``, ``json-rpc``, ``python``); ``idle_s`` makes
        it a lease held only while its holder works (server/lease.py).
        """
        kind = call.kind or ClientKind.PYTHON
        grant = self.lease.acquire(call.owner, call.token, kind.value, call.idle_s)
        return {"lease_s": grant.lease_s, "token": grant.token, "owner": call.owner}

    async def heartbeat(self, call: api.HeartbeatParams) -> dict[str, Any]:
        """Renew the input lease whose ``token`` is presented."""
        return {"lease_s": self.lease.heartbeat(call.token)}

    async def release(self, call: api.ReleaseParams) -> None:
        """Give the input lease up (presenting its ``token``)."""
        self.lease.release(call.token)

    async def exec_text(self, call: api.ExecParams) -> dict[str, Any]:
        """Run an agent message (``text``): its commands, in order."""
        self.lease.check(call.token)
        commands = parse_commands(call.text)
        reply: dict[str, Any] = await self.desktop.command_ids.run(
            call.command_id,
            len(commands),
            lambda: self._execute(commands, call.snapshot_id, call.session, call.token),
        )
        return reply

    async def execute(self, call: api.ExecuteParams) -> dict[str, Any]:
        """Run one command given by its fields."""
        self.lease.check(call.token)
        command = Command.from_structured(call.command())
        reply: dict[str, Any] = await self.desktop.command_ids.run(
            call.command_id,
            1,
            lambda: self._execute([command], call.snapshot_id, call.session, call.token),
        )
        return reply

    async def _execute(
        self,
        commands: list[Command],
        requested_id: str | None,
        named: str | None,
        token: str | None,
    ) -> dict[str, Any]:
        """Resolve refs against the right pull, then run ``commands`` in order."""
        snapshot_id = requested_id or commands[0].snapshot_id
        session = self._session(named, token)
        from_session = snapshot_id is None and session is not None
        if from_session and session is not None:
            # Never another reader's pull (CONTRACT §6); a session that pulled nothing yet
            # resolves against the views as they are now, one whose pull is gone nowhere.
            snapshot_id = self.sessions.last(session)
            if snapshot_id is None and self.sessions.lost(session):
                raise _session_expired(session, None)
        refs: RefTable | None = None
        if isinstance(snapshot_id, str):
            try:
                refs = self.desktop.registry.get(snapshot_id)
            except AotuiError as exc:
                if from_session and session is not None and exc.code is ErrorCode.E_STALE_STATE:
                    raise _session_expired(session, snapshot_id) from None
                raise
        elif session is None and self.desktop.registry.latest is not None:
            with contextlib.suppress(AotuiError):
                refs = self.desktop.registry.get(self.desktop.registry.latest)
        if self.in_flight >= self.config.max_in_flight:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"{self.in_flight} commands are already in flight on this desktop (at most "
                f"{self.config.max_in_flight}, config max_in_flight); this one did not run. Wait "
                f"for their replies, then send it again.",
                {"outcome": ReplyOutcome.NOT_APPLIED, "in_flight": self.in_flight},
            )
        self.in_flight += 1
        # While its commands run the lease holds, whatever its idle time (server/lease.py).
        longest = max(self.config.start_timeout_ms, self.config.operation_timeout_ms)
        working = self.lease.begin(token, len(commands) * longest / 1000)
        try:
            return await self._run_all(commands, refs)
        finally:
            self.lease.end(working)
            self.in_flight -= 1

    async def _run_all(self, commands: list[Command], refs: RefTable | None) -> dict[str, Any]:
        """Run ``commands`` in order; the first failure, or one waiting for the user, stops."""
        results: list[Any] = []
        run = RUNNING.get()
        if run is not None:  # a command id's record of what it has done so far reads these
            run.results = results
        for index, command in enumerate(commands):
            try:
                result = await self._run_locked(command, refs)
                if isinstance(result, AwaitingUser):
                    waiting = result.reply()
                    if index + 1 < len(commands):
                        waiting["message"] += (
                            f" The {len(commands) - index - 1} command(s) after it did not run."
                        )
                    return {"ran": index, "results": results, "waiting": waiting}
                results.append(result)
                if run is not None:
                    run.result = None
            except AotuiError as exc:
                ran = ", ".join(str(i + 1) for i in range(index)) or "none"
                raise AotuiError(
                    exc.code,
                    f"command {index + 1} of {len(commands)} ({_describe(command)}) failed: "
                    f"{exc.message} [commands that ran: {ran}]",
                    {**exc.data, "ran": index, "total": len(commands), "results": results},
                ) from None
        return {"ran": len(commands), "results": results}

    async def _run_locked(self, command: Command, refs: RefTable | None) -> Any:
        """Run ``command`` after the commands queued before it on its app, within its deadline.

        The deadline starts when the command is queued, not when its turn comes: a command
        behind slow ones is answered ``E_TIMEOUT`` (not run) instead of seconds late.
        """
        app_ref = command.app_id or command.target
        app = self.desktop.app(app_ref)
        starts = command.action in (Action.OPEN_APPLICATION, Action.CLOSE_APPLICATION)
        budget_ms = self.config.start_timeout_ms if starts else self.config.operation_timeout_ms
        bound, view = app.manifest.view_in_flight, command.view_id
        if not bound or command.action is not Action.EXECUTE or view is None:
            return await self._locked(
                app, budget_ms, lambda deadline: self.desktop.run(command, refs, deadline)
            )
        where = (app.app_id, view)
        running = self.view_in_flight.get(where, 0)
        if running >= bound:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"{running} operations of {view} of {app.app_id} ({app.name}) are already queued "
                f"or running (its manifest allows {bound} per view); this one did not run. Wait "
                f"for their replies, then send it again.",
                {"outcome": ReplyOutcome.NOT_APPLIED, "in_flight": running},
            )
        self.view_in_flight[where] = running + 1
        try:
            return await self._locked(
                app, budget_ms, lambda deadline: self.desktop.run(command, refs, deadline)
            )
        finally:
            left = self.view_in_flight.pop(where) - 1
            if left:
                self.view_in_flight[where] = left

    async def _locked(
        self, app: AppRecord, budget_ms: int, work: Callable[[float], Awaitable[Any]]
    ) -> Any:
        """Run ``work(deadline)`` once the commands queued before it on ``app`` are done."""
        queued = time.monotonic()
        deadline = queued + budget_ms / 1000
        lock = self.app_locks.setdefault(app.app_id, asyncio.Lock())
        try:
            await asyncio.wait_for(lock.acquire(), deadline - queued)
        except TimeoutError:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"{app.app_id} ({app.name}) was busy with earlier commands for this command's "
                f"whole deadline ({budget_ms} ms); it did not run. Retry, or send fewer commands "
                f"to one app at once.",
                {"app": app.app_id, "outcome": ReplyOutcome.NOT_APPLIED},
            ) from None
        try:
            return await work(deadline)
        finally:
            lock.release()

    async def confirm(self, call: api.ConfirmParams) -> Any:
        """The user's answer to a pending ``confirmation``: run it (once), or ``deny`` it."""
        pending = self.desktop.confirmations.take(call.confirmation)
        if call.deny:
            return self.desktop.refuse(pending, call.reason)
        book = self.desktop.confirmations
        try:
            result = await self._locked(
                self.desktop.app(pending.app),
                self.config.operation_timeout_ms,
                lambda deadline: self.desktop.run_confirmed(pending, deadline),
            )
        except AotuiError as exc:
            if pending.ident not in book.decided:  # it never got its turn: say so to waiters
                book.decide(pending.ident, Outcome(Verdict.FAILED, error=exc))
            raise
        return {"confirmation": pending.ident, "verdict": "ran", "result": result}

    async def confirmations(self, call: api.ConfirmationsParams) -> dict[str, Any]:
        """The operations waiting for the user, oldest first."""
        book = self.desktop.confirmations
        return {"pending": [pending.describe() for pending in book.pending.values()]}

    async def confirmation(self, call: api.ConfirmationParams) -> dict[str, Any]:
        """What became of a confirmation, waiting up to ``timeout_ms`` while it is pending."""
        timeout_s = (call.timeout_ms or 0) / 1000
        return await self.desktop.confirmations.wait(call.confirmation, timeout_s)

    async def status(self, call: api.StatusParams) -> dict[str, Any]:
        """The supervisor and every app: state, pid, memory, CPU, restarts, last exit."""
        me = psutil.Process()
        return {
            "pid": os.getpid(),
            "desktop": self.config.desktop,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "created": self.desktop.created,
            "rss_bytes": me.memory_info().rss,
            "open_fds": me.num_fds(),
            "snapshots": len(self.desktop.registry),
            "lease_owner": self.lease.owner,
            "in_flight": self.in_flight,
            "confirmations": [p.describe() for p in self.desktop.confirmations.pending.values()],
            "store": self.desktop.store_status(),
            "apps": [self._app_status(app) for app in self.desktop.apps],
        }

    def _app_status(self, app: AppRecord) -> dict[str, Any]:
        pid = app.worker.pid if app.worker is not None else None
        rss = cpu = processes = None
        # The whole process group (a double-forked orphan too), as the watchdog last measured it.
        usage = self.desktop.runner.watchdog.usage(pid)
        if usage is not None:
            processes, rss, cpu = usage.processes, usage.rss_bytes, usage.cpu_percent
        elif pid is not None:
            try:
                process = self.processes.get(pid) or self.processes.setdefault(
                    pid, psutil.Process(pid)
                )
                rss = process.memory_info().rss
                cpu = process.cpu_percent(None)
                processes = 1
            except psutil.Error:
                self.processes.pop(pid, None)
        return {
            "app": app.app_id,
            "id": app.manifest.id,
            "name": app.name,
            "state": app.status.value,
            "system": app.manifest.system,
            "web": app.manifest.is_web,
            "pid": pid,
            "processes": processes,
            "rss_bytes": rss,
            "cpu_percent": cpu,
            # How a busy worker over its CPU share is held to it (it is not killed), or None.
            "cpu_throttled": self.desktop.runner.watchdog.throttled(pid) or None,
            "restarts": app.restarts,
            "last_exit": app.last_exit or None,
            "layers": app.worker.layers if app.worker is not None else [],
        }

    async def install(self, call: api.InstallParams) -> dict[str, Any]:
        """Install the app directory at ``path`` (at most once per ``command_id``)."""

        async def install() -> dict[str, Any]:
            app = self.desktop.install(call.path)
            reply = {"app": app.app_id, "id": app.manifest.id, "name": app.name}
            answer(reply)  # stored with the app's row: a retry is answered from it
            await self.desktop.persist(app)
            self.changed(SignalReason.DOM_MUTATION, app.app_id)
            return reply

        reply: dict[str, Any] = await self.desktop.command_ids.run(
            call.command_id, 1, install, message=False
        )
        return reply

    async def uninstall(self, call: api.UninstallParams) -> dict[str, Any]:
        """Stop and remove an app (at most once per ``command_id``)."""

        async def uninstall() -> dict[str, Any]:
            app = await self.desktop.uninstall(call.app)
            self.changed(SignalReason.APP_CLOSED, app.app_id)
            return uninstalled(app)

        reply: dict[str, Any] = await self.desktop.command_ids.run(
            call.command_id, 1, uninstall, message=False
        )
        return reply

    async def say(self, call: api.SayParams) -> Any:
        """The user's side of the chat: post ``text`` into ``system.chat`` (at most once per
        ``command_id``: the chat's answer is stored with its data)."""
        text = call.text

        async def say() -> Any:
            self.desktop.require_writable()
            app = self.desktop.app(call.app or "system.chat")
            app.require_live()
            # Stored before the reply, and no effect on an error (as an execute).
            return await self.desktop.deliver(
                app,
                lambda rid: Operation(rid, "", "user_message", {"text": text}, {}, 5000),
                "user_message",
            )

        return await self.desktop.command_ids.run(call.command_id, 1, say, message=False)

    async def shutdown(self, call: api.ShutdownParams) -> dict[str, Any]:
        """Stop the desktop after answering."""
        asyncio.get_running_loop().call_soon(self.stopping.set)
        return {"pid": os.getpid()}


def _remove_sockets(bound: dict[Path, int]) -> None:
    """Remove our socket files, so a client of a stopped desktop is told at once, not in 30 s."""
    for path, inode in bound.items():
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_ino == inode:  # never a newer desktop's socket
                path.unlink()


def _session_expired(session: str, snapshot_id: str | None) -> AotuiError:
    """``E_STALE_STATE`` for a session whose snapshot is gone: nothing ran, nothing resolved."""
    which = f"snapshot {snapshot_id}" if snapshot_id else "snapshot"
    why = (
        "was forgotten: the desktop keeps a bounded number of sessions"
        if snapshot_id is None
        else "is unknown or expired"
    )
    name = "this connection's session" if session.startswith("#") else session
    return AotuiError(
        ErrorCode.E_STALE_STATE,
        f"session {name!r}'s {which} expired ({which} {why}); its refs were not resolved and "
        f"nothing ran. Pull a new snapshot (aotui snapshot --session NAME) and send the "
        f"command again with refs from it.",
        {"session": session[:128], "snapshot_id": snapshot_id, "outcome": ReplyOutcome.NOT_APPLIED},
    )


def _describe(command: Command) -> str:
    action = command.action.value.split("_")[0]
    if command.action.value == "execute":
        return f"execute {command.target} on {command.app_id}/{command.view_id}"
    return f"{action} {command.target}"
