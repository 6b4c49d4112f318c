"""The JSON-RPC 2.0 socket (``rpc.sock``), served inside the supervisor on its event loop.

Newline-delimited JSON (usable with ``socat``; see docs/interfaces.md). Each connection is a
session of its own unless a request names one, may hold the input lease (its token is presented
for it), and may subscribe to the desktop's signals, which arrive as ``event`` notifications on
the same connection.

Every peer is assumed hostile, so each one is bounded: a line is at most
:attr:`RpcLimits.line_bytes`; at most :attr:`RpcLimits.in_flight` requests of a connection run at
once (past that, its socket is not read: the sender waits, not our memory); a peer that does not
read its answers for :attr:`RpcLimits.write_timeout_s` is disconnected; its events queue is
bounded (the oldest are dropped and counted).

A peer is the process that connected (``SO_PEERCRED``, rpc_connection.py): one process holds at
most :attr:`RpcLimits.per_process` connections; a connection with no request running for
:attr:`RpcLimits.idle_timeout_s` is closed (one subscribed to events is not); and when the
desktop's :attr:`RpcLimits.connections` are all open, a newcomer is let in by closing the oldest
idle connection of the process that holds the most, so the owner's ``aotui`` always gets in while
any connection is idle. Its ``wait_for`` calls are that process's (waits.py budgets them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zmq
import zmq.asyncio

from aotui.protocol import codec
from aotui.protocol.api import (
    AcquireParams,
    ClientKind,
    Face,
    HeartbeatParams,
    ParamError,
    ReleaseParams,
    SnapshotFormat,
    SubscribeParams,
)
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Signal, SignalReason
from aotui.supervisor.interface.awi import AWI_METHODS, AWI_VERSION
from aotui.supervisor.interface.jsonrpc import (
    INVALID_PARAMS,
    MAX_BATCH,
    METHODS,
    PARSE_ERROR,
    RpcBatch,
    RpcCall,
    RpcFailure,
    batch_line,
    error_line,
    notification_line,
    parse_line,
    result_line,
)
from aotui.supervisor.interface.rpc_connection import (
    ConnectionBook,
    RpcConnection,
    peer_credentials,
)
from aotui.supervisor.interface.waits import MAX_WAITS, WAITS_PER_CLIENT
from aotui.supervisor.paths import unix_address

if TYPE_CHECKING:
    from aotui.supervisor.server.process import Supervisor

__all__ = ["SIGNAL_REASONS", "RpcLimits", "RpcServer"]

log = logging.getLogger("aotui.rpc")

#: The reasons a signal may carry (CONTRACT §6); ``subscribe_events`` may pick some.
SIGNAL_REASONS = tuple(reason.value for reason in SignalReason)
FORMATS = tuple(form.value for form in SnapshotFormat)


@dataclass(frozen=True)
class RpcLimits:
    """What one JSON-RPC peer may make the supervisor hold."""

    #: Longest request line (a longer one closes the connection after a parse error). Not the
    #: frame limit: it is what one of up to 256 peers may make the desktop buffer at once.
    line_bytes: int = 1 << 20
    #: Requests of one connection running at once.
    in_flight: int = 8
    #: Open connections of the desktop; past it, the oldest idle one of the process holding
    #: the most is closed to let a newcomer in.
    connections: int = 256
    #: Open connections of one process (peer pid).
    per_process: int = 64
    #: Seconds a connection with no request running (and not subscribed) stays open; config
    #: key ``rpc_idle_timeout_s``.
    idle_timeout_s: float = 60.0
    #: Seconds a peer may leave an answer unread before it is disconnected.
    write_timeout_s: float = 5.0
    #: Event notifications queued for one connection (the oldest go first).
    events: int = 64
    #: Seconds the answers of a peer that closed its sending side may still take.
    finish_s: float = 60.0


class RpcServer:
    """The JSON-RPC face of one desktop (a :class:`~supervisor.server.process.Service`)."""

    def __init__(self, supervisor: Supervisor, limits: RpcLimits | None = None) -> None:
        self.supervisor = supervisor
        self.limits = limits or RpcLimits()
        self.book = ConnectionBook(
            self.limits.connections, self.limits.per_process, self.limits.idle_timeout_s
        )
        self._server: asyncio.Server | None = None
        self._inode: int | None = None
        self._context: zmq.asyncio.Context | None = None
        self._signals: asyncio.Task[None] | None = None
        self._idle: asyncio.Task[None] | None = None

    @property
    def connections(self) -> set[RpcConnection]:
        """The open connections."""
        return self.book.open

    def __repr__(self) -> str:
        return f"RpcServer({self.supervisor.paths.rpc_file})"

    # --- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind ``rpc.sock`` (replacing one a killed desktop left) and follow the signals."""
        path = self.supervisor.paths.rpc_file
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # the control socket proved no live desktop owns this directory
        self._server = await asyncio.start_unix_server(
            self._serve, unix_address(path), limit=self.limits.line_bytes, backlog=256
        )
        os.chmod(path, 0o600)
        self._inode = path.stat().st_ino
        self._context = zmq.asyncio.Context()
        self._signals = asyncio.get_running_loop().create_task(self._follow_signals())
        self._idle = asyncio.get_running_loop().create_task(self._close_idle())

    async def stop(self) -> None:
        """Close every connection and remove ``rpc.sock`` (if it still is ours)."""
        for task in (self._signals, self._idle):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.abort()
            for task in connection.tasks:
                task.cancel()
        if self._context is not None:
            self._context.destroy(linger=0)
        path = self.supervisor.paths.rpc_file
        with contextlib.suppress(FileNotFoundError):
            if self._inode is not None and path.stat().st_ino == self._inode:
                path.unlink()

    async def _follow_signals(self) -> None:
        assert self._context is not None
        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.MAXMSGSIZE, 1 << 16)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(self.supervisor.paths.signals)
        try:
            while True:
                frame = await sub.recv()
                with contextlib.suppress(AotuiError):
                    message = codec.decode(frame)
                    if isinstance(message, Signal):
                        self._fan_out(dataclasses.asdict(message))
        finally:
            sub.close(linger=0)

    def _fan_out(self, event: dict[str, Any]) -> None:
        for connection in self.connections:
            if connection.reasons is None or connection.events is None:
                continue
            reasons = set(event.get("reasons") or [event["reason"]])
            if connection.reasons and not connection.reasons & reasons:
                continue
            if connection.events.full():
                connection.events.get_nowait()
                connection.dropped += 1
            connection.events.put_nowait(event)

    # --- connections ----------------------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = RpcConnection(
            reader, writer, asyncio.Semaphore(self.limits.in_flight), peer_credentials(writer)
        )
        try:
            evicted = self.book.admit(connection)
        except AotuiError as refused:
            await self._close(connection, refused)
            return
        if evicted is not None:
            await self._close(*evicted)
        try:
            await self._read(connection)
        except Exception:  # noqa: BLE001 - one connection's bug must not stop the server
            log.error("JSON-RPC connection failed: %s", traceback.format_exc())
        finally:
            answers = [t for t in connection.tasks if t is not connection.events_task]
            if answers and not connection.closed:
                # A peer that half-closed (`echo … | socat`) still gets its answers, in bounds.
                await asyncio.wait(answers, timeout=self.limits.finish_s)
            self.book.open.discard(connection)
            for task in connection.tasks:
                task.cancel()
            await asyncio.gather(*connection.tasks, return_exceptions=True)
            self._forget(connection)
            connection.abort()

    async def _read(self, connection: RpcConnection) -> None:
        while not connection.closed:
            # A peer with its requests all in flight is not read: it waits, not our memory.
            await connection.slots.acquire()
            try:
                line = await connection.reader.readline()
            except ValueError:
                too_long = RpcFailure(
                    None, PARSE_ERROR, f"a line is at most {self.limits.line_bytes} bytes"
                )
                await connection.send(error_line(None, too_long), self.limits.write_timeout_s)
                return
            except ConnectionError:
                return
            if not line.endswith(b"\n"):
                return  # end of stream (a last line without a newline is not a request)
            if not line.strip():
                connection.slots.release()
                continue
            self.book.began(connection)
            self._spawn(connection, self._answer(connection, line))

    async def _close(self, connection: RpcConnection, why: AotuiError) -> None:
        """Tell a peer why its connection ends (one line, id null; it ran nothing), and end it."""
        await connection.send(error_line(None, why), 1.0)
        connection.abort()

    async def _close_idle(self) -> None:
        """Close the connections that had no request running for the idle timeout."""
        while True:
            await asyncio.sleep(self.book.next_timeout_in() + 0.01)
            for connection in self.book.idle_past_timeout():
                await self._close(connection, self.book.timed_out())

    def _spawn(self, connection: RpcConnection, work: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        connection.tasks.add(task)
        task.add_done_callback(connection.tasks.discard)
        return task

    def _forget(self, connection: RpcConnection) -> None:
        """A closed connection's session ends, and the lease it held is released."""
        held = self.supervisor.sessions.forget(connection.session)
        if held is not None:
            with contextlib.suppress(AotuiError, AttributeError):
                self.supervisor.desktop.registry.discard(held)
        if connection.token is not None:
            with contextlib.suppress(AotuiError):
                self.supervisor.lease.release(connection.token)

    async def _answer(self, connection: RpcConnection, line: bytes) -> None:
        try:
            parsed = parse_line(line)
            if isinstance(parsed, RpcBatch):  # its calls in order, answered together (one slot)
                replies = [await self._reply(connection, call) for call in parsed.calls]
                answered = [reply for reply in replies if reply is not None]
                reply = batch_line(answered) if answered else None  # all notifications: nothing
            else:
                reply = await self._reply(connection, parsed)
            if reply is not None:
                await connection.send(reply, self.limits.write_timeout_s)
        finally:
            self.book.ended(connection)
            connection.slots.release()

    async def _reply(self, connection: RpcConnection, call: RpcCall | RpcFailure) -> bytes | None:
        """The response line to one call; ``None`` for a notification."""
        if isinstance(call, RpcFailure):
            return None if call.notification else error_line(call.id, call)
        try:
            reply = result_line(call.id, await self._call(connection, call))
        except ParamError as exc:  # a value its declaration could not check alone: -32602
            reply = error_line(call.id, RpcFailure(call.id, INVALID_PARAMS, exc.message))
        except AotuiError as exc:
            raw = call.params.get("as_control") is True  # as the control socket says it
            reply = error_line(call.id, exc, sanitized=not raw)
        except Exception as exc:  # noqa: BLE001 - our bug: logged, answered E_INTERNAL
            log.error("internal error: %s", traceback.format_exc())
            internal = AotuiError(
                ErrorCode.E_INTERNAL, f"internal error: {type(exc).__name__}: {exc}"
            )
            reply = error_line(call.id, internal)
        return None if call.notification else reply

    # --- methods --------------------------------------------------------------------------------

    async def _call(self, connection: RpcConnection, call: RpcCall) -> Any:
        record = call.call  # checked against its declaration (protocol/api.py)
        handler = self.supervisor.methods.get(call.method)
        match call.method:
            case "subscribe_events":
                assert isinstance(record, SubscribeParams)
                return self._subscribe(connection, record.reasons or [])
            case "unsubscribe_events":
                connection.reasons = None
                return {"subscribed": False}
            case "acquire":
                assert isinstance(record, AcquireParams)
                return await self._acquire(connection, record)
            case "release":
                assert isinstance(record, ReleaseParams)
                return await self._release(connection, record.token or connection.token)
            case "heartbeat":
                assert isinstance(record, HeartbeatParams)
                return await self.supervisor.methods["heartbeat"](
                    record.replace(token=record.token or connection.token)
                )
            case "wait_for":  # the process's budget of waits, whatever its connections
                record = record.replace(peer=f"pid:{connection.peer.pid}")
        if "session" in record.FIELDS:
            record = record.replace(**_reader(connection, record))
        if handler is None:
            raise AotuiError(ErrorCode.E_INTERNAL, f"method {call.method} has no handler")
        return await self.supervisor.call(call.method, record)

    async def _acquire(self, connection: RpcConnection, call: AcquireParams) -> Any:
        """Take the desktop's lease for its owner; the connection keeps the token it gets."""
        token = call.token or connection.token
        granted = await self.supervisor.methods["acquire"](
            call.replace(token=token, kind=ClientKind.JSONRPC)
        )
        connection.token = granted["token"]
        return granted

    async def _release(self, connection: RpcConnection, token: str | None) -> None:
        """Give the lease back; the connection forgets the token if it was its own."""
        await self.supervisor.methods["release"](ReleaseParams(token=token))
        if token == connection.token:
            connection.token = None

    def _subscribe(self, connection: RpcConnection, reasons: list[Any]) -> dict[str, Any]:
        unknown = [r for r in reasons if r not in SIGNAL_REASONS]
        if unknown:
            raise ParamError(
                f"unknown reason(s) {', '.join(map(str, unknown))[:200]}; "
                f"known: {', '.join(SIGNAL_REASONS)}"
            )
        connection.reasons = frozenset(reasons)
        if connection.events is None:
            connection.events = asyncio.Queue(self.limits.events)
            connection.events_task = self._spawn(connection, self._deliver_events(connection))
        return {"subscribed": sorted(reasons) or list(SIGNAL_REASONS)}

    async def _deliver_events(self, connection: RpcConnection) -> None:
        assert connection.events is not None
        while not connection.closed:
            event = await connection.events.get()
            if connection.dropped:
                event = {**event, "dropped": connection.dropped}
                connection.dropped = 0
            line = notification_line("event", event)
            await connection.send(line, self.limits.write_timeout_s)

    async def get_capabilities(self, call: Any = None) -> dict[str, Any]:
        """What this desktop offers: version, methods and their params, formats, limits."""
        import importlib.metadata  # here: ~10 ms of CPU that every desktop start paid at import

        try:
            version = importlib.metadata.version("aotui")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        return {
            "desktop": self.supervisor.config.desktop,
            "version": version,
            "protocol": codec.PROTOCOL_VERSION,
            "jsonrpc": "2.0",
            "socket": str(self.supervisor.paths.rpc_file),
            # Each method's summary and its params' JSON Schema (protocol/api.py declares them).
            "methods": {
                name: {
                    "summary": method.summary,
                    "params": method.input_schema(Face.JSONRPC),
                }
                for name, method in METHODS.items()
            },
            "formats": list(FORMATS),
            # seed 002's get_capabilities, for AWI-TTY clients (supervisor/interface/awi.py).
            "awi": {
                "version": AWI_VERSION,
                "features": [*AWI_METHODS, "snapshot:text", "snapshot:markdown"],
                "snapshot_formats": ["text", "markdown"],
                "platform": "unix",
            },
            "signal_reasons": list(SIGNAL_REASONS),
            "limits": {
                **dataclasses.asdict(self.limits),
                "batch": MAX_BATCH,  # requests one batch line may hold
                "operation_timeout_ms": self.supervisor.config.operation_timeout_ms,
                "snapshot_ttl_s": self.supervisor.config.snapshot_ttl_s,
                "lease_s": self.supervisor.config.lease_s,
                "snapshot_max_bytes": self.supervisor.config.snapshot_max_bytes,
                # Agent commands served at once on the whole desktop (seed 004).
                "max_in_flight": self.supervisor.config.max_in_flight,
                # wait_for calls running at once on the desktop, and of one client (waits.py).
                "waits": MAX_WAITS,
                "waits_per_client": WAITS_PER_CLIENT,
            },
        }


def _reader(connection: RpcConnection, call: Any) -> dict[str, Any]:
    """Who is asking: the call's own session and token, else the connection's.

    With ``as_control`` (the CLI) the connection has no session: as on the control socket, the
    lease owner's is used when the token proves it, else none.
    """
    own = None if getattr(call, "as_control", None) is True else connection.session
    reader = {"session": call.session or own, "token": call.token or connection.token}
    if "peer" in call.FIELDS and call.peer is None:
        reader["peer"] = connection.session  # whose budget its pulls are (sessions.py)
    return reader
