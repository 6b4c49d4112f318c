"""The supervisor's end of one worker's channel: requests with deadlines, replies, fragments.

Every request to a worker gets a future and a deadline; the reader task resolves it when the
single reply arrives, so a slow or hung app only ever delays the command waiting on it. Fragment
updates and log lines are handed to ``on_message`` in channel order — the worker sends an
operation's fragments before its ack, so by the time the ack resolves the fragment cache already
shows the effect (read-your-writes).

The worker is assumed compromised (as a browser treats its renderers): the socket refuses frames
over :data:`MAX_WORKER_FRAME` before allocating them (``ZMQ_MAXMSGSIZE``; ZeroMQ drops the
connection, which the monitor reports as a violation), every other protocol violation — a reply of
the wrong type included — kills only this worker, and every string it sends back is sanitized
before it can reach the agent.

A fault of the supervisor's own while reading (a bug in dispatch or in what it calls) is not the
worker's doing: it reaches ``on_fault`` with its traceback, which logs it and kills the app as a
crash, rather than ending the reader in silence (the app would later die as a "timeout").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import os
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from aotui.protocol import codec
from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import (
    Ack,
    AppState,
    ErrorReply,
    FragmentUpdate,
    Hello,
    HttpCall,
    LogRecord,
    Message,
    Pong,
)
from aotui.protocol.structure import sanitize, sanitize_data
from aotui.supervisor.workers.exits import ExitReason

__all__ = [
    "FRAMES_PER_TURN",
    "LOG_DROPS_PER_S",
    "MAX_LOG_FRAME",
    "MAX_WORKER_FRAME",
    "WORKER_QUEUE_FRAMES",
    "WorkerHandle",
    "describe_exit",
    "describe_fault",
]

log = logging.getLogger("aotui.supervisor")

#: Largest frame a worker may send (the codec's one frame-size limit); anything bigger is refused
#: by ZeroMQ before it allocates, and is a protocol violation.
MAX_WORKER_FRAME = codec.MAX_FRAME_BYTES
#: Frames ZeroMQ may hold for us before we read them (``ZMQ_RCVHWM``): past that the worker's
#: sends wait, so a burst costs the supervisor at most this many frames of MAX_WORKER_FRAME.
WORKER_QUEUE_FRAMES = 4
#: Error codes a worker may answer with; any other becomes ``E_APP_ERROR`` (a worker cannot
#: say the desktop is locked, stale or broken).
WORKER_ERROR_CODES = frozenset(
    {
        ErrorCode.E_INVALID_CMD,
        ErrorCode.E_NOT_FOUND,
        ErrorCode.E_PERMISSION,
        ErrorCode.E_TIMEOUT,
        ErrorCode.E_APP_ERROR,
    }
)
#: Seconds a worker whose channel dropped has to be reported dead before it counts as a violator.
DISCONNECT_GRACE_S = 0.5
#: Longest error message from a worker that reaches the agent.
MAX_ERROR_TEXT = 1000
#: More frames than this in one second is a flood (fragment updates are coalesced per loop
#: turn, so a well-behaved app sends far fewer).
MAX_FRAMES_PER_S = 5000
#: Frames the reader handles in a row before it lets the loop run others: ``await`` on a frame
#: that is already there does not yield, so a worker keeping its channel full would otherwise be
#: served, frame after frame, while every client and other app waited.
FRAMES_PER_TURN = 16
#: Log lines one worker may put in System Logs per second; more are counted and dropped, so an
#: app cannot push other apps' reports (a permission denial, a crash) out of the bounded log.
LOG_LINES_PER_S = 10
#: Lines past that rate the supervisor reads (and drops) in one second; then the worker's channel
#: is left unread until the second is over, so the rest of a log flood waits in the worker's own
#: ``send`` (its time, not the supervisor's: 4,000 lines a second took 10 % of its CPU). High
#: enough that an app logging a burst of a few hundred lines is not slowed (its replies wait too).
LOG_DROPS_PER_S = 500
#: Seconds in a row a worker may fill that budget: a burst is held back, a flood that goes on
#: is a violation (killed within its command's 5 s deadline, named, rather than left to time out
#: behind its own lines).
LOG_FLOOD_S = 3
#: Seconds a worker that ended is given for its channel to be read to the end (its last log
#: lines: a crash report): past a second of log-budget wait, with room for a loaded machine.
LAST_WORDS_S = 2.0
#: Largest log record frame: the SDK cuts a line at 2,000 characters (8 KB of UTF-8), so a bigger
#: one was built by hand; its bytes would be received and decoded ten times a second, unshown.
MAX_LOG_FRAME = 64 << 10
#: Unsolicited messages a worker may send besides replies, hello and pongs.
WORKER_MAY_SEND = (FragmentUpdate, LogRecord, HttpCall)


def _violation(what: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, f"the worker sent {what}")


class WorkerHandle:
    """One worker incarnation: its channel socket, pid and pending requests."""

    def __init__(
        self,
        app_id: str,
        endpoint: str,
        sock: zmq.asyncio.Socket,
        on_message: Callable[[WorkerHandle, Message], None],
        on_violation: Callable[[WorkerHandle, AotuiError], None],
        http_threads: int = 4,
        on_fault: Callable[[WorkerHandle, Exception], None] | None = None,
    ) -> None:
        self.app_id = app_id
        self.endpoint = endpoint
        self.sock = sock
        self.on_message = on_message
        self.on_violation = on_violation
        #: Told of a bug of ours met while reading this channel (after it is logged).
        self.on_fault = on_fault
        self.pid: int | None = None
        #: The worker's stdout/stderr capture (an ``AppLog``), closed at EOF.
        self.output: Any = None
        #: Brokered HTTP requests being performed for this worker.
        self.http_in_flight = 0
        #: Its share of the broker's threads (``BROKER_THREADS_PER_APP``).
        self.http_slots = asyncio.Semaphore(http_threads)
        #: Monotonic time of the last heartbeat answer.
        self.last_pong = time.monotonic()
        #: Monotonic time it started serving (its first views arrived); ``None`` before.
        self.serving_since: float | None = None
        #: Confinement layers the worker reported in its ``Hello``.
        self.layers: list[str] = []
        loop = asyncio.get_running_loop()
        self.hello: asyncio.Future[Hello] = loop.create_future()
        #: Resolved by the desktop when the worker's first fragment update arrives.
        self.first_update: asyncio.Future[None] = loop.create_future()
        self.pending: dict[int, asyncio.Future[Message]] = {}
        #: Requests this worker answered (an ack or an error), ever.
        self.answered = 0
        self._ids = itertools.count(1)
        self._reader: asyncio.Task[None] | None = None
        self.closed = False
        #: Request ids sent and not yet answered (late answers included).
        self.issued: set[int] = set()
        self._window_start = 0.0
        self._window_frames = 0
        self._log_window = 0.0
        self._log_lines = 0
        self._log_dropped = 0
        self._log_floods = 0  # seconds in a row that ended with the drop budget full
        #: Size of the frame being dispatched (fragments are charged their frame's bytes).
        self.last_frame_bytes = 0
        #: Whether System Logs already said this worker's views could not be shown…
        self.reported_unshowable = False
        #: …or were over the snapshot budget.
        self.reported_over_budget = False
        self._monitor: zmq.asyncio.Socket | None = None
        #: Set when the worker's end of the channel is gone (every frame it sent is ours).
        self._gone = asyncio.Event()
        #: The reader's receive in progress: not done while it waits on an empty channel.
        self._receiving: asyncio.Future[bytes] | None = None
        #: Set once the worker ended: only its log lines are still read.
        self._ending = False
        self._watcher: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start reading the channel (and watching it for a dropped connection).

        The socket must have ``ZMQ_MAXMSGSIZE`` set before it connected (see ``AppLifecycle``).
        """
        loop = asyncio.get_running_loop()
        self._monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._watcher = loop.create_task(self._watch(), name=f"{self.app_id}-monitor")
        self._reader = loop.create_task(self._read(), name=self.app_id)

    async def _watch(self) -> None:
        """A connection that drops while the worker lives on is a frame ZeroMQ refused."""
        assert self._monitor is not None
        while not self.closed:
            try:
                await self._monitor.recv_multipart()
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            self._gone.set()
            # A worker that ended drops its end too: its exit is reported (and this handle
            # closed) well within the grace period, and only a live worker is a violator.
            await asyncio.sleep(DISCONNECT_GRACE_S)
            if not self.closed and self.pid is not None and _alive(self.pid):
                self.on_violation(
                    self,
                    AotuiError(
                        ErrorCode.E_INVALID_CMD,
                        f"a frame ZeroMQ refused (over {MAX_WORKER_FRAME} bytes, or malformed)",
                    ),
                )
                return

    def admit_log(self) -> tuple[bool, int]:
        """Whether a log line may go to System Logs now (at most ``LOG_LINES_PER_S`` a second),
        and how many were dropped in the window that just closed (to report once)."""
        now = time.monotonic()
        dropped = 0
        if now - self._log_window >= 1.0:
            full = self._log_dropped >= LOG_DROPS_PER_S and now - self._log_window < 2.0
            self._log_floods = self._log_floods + 1 if full else 0
            dropped, self._log_window, self._log_lines, self._log_dropped = (
                self._log_dropped,
                now,
                0,
                0,
            )
        self._log_lines += 1
        if self._log_lines > LOG_LINES_PER_S:
            self._log_dropped += 1
            return False, dropped
        return True, dropped

    def next_id(self) -> int:
        """A fresh request id for this channel."""
        return next(self._ids)

    async def send(self, message: Message) -> None:
        """Send one message without waiting for an answer."""
        await self.sock.send(codec.encode(message), copy=False)

    async def request(
        self,
        build: Callable[[int], Message],
        timeout_s: float,
        what: str,
        expect: type[Message] = Ack,
    ) -> Message:
        """Send ``build(request_id)`` and wait for its reply (an ``expect`` or an error reply);
        ``E_TIMEOUT`` past the deadline. A reply of another type is a protocol violation: the
        worker is killed (``on_violation``) and the caller gets ``E_APP_ERROR`` saying so."""
        if self.closed:
            raise AotuiError(ErrorCode.E_APP_ERROR, f"{self.app_id} is not running")
        request_id = self.next_id()
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.issued.add(request_id)
        try:
            # One deadline for sending and answering; a timeout scope costs a third of what two
            # wait_for (each with a task of its own) did on every operation's path.
            async with asyncio.timeout(timeout_s):
                await self.send(build(request_id))
                reply = await future
        except TimeoutError:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"{self.app_id} did not answer {what} within {timeout_s:.1f} s",
                {"app": self.app_id},
            ) from None
        finally:
            self.pending.pop(request_id, None)
        if isinstance(reply, ErrorReply):
            code = ErrorCode.parse(reply.code)
            if code not in WORKER_ERROR_CODES:
                code = ErrorCode.E_APP_ERROR  # a worker cannot speak for the desktop
            message = sanitize(reply.message, limit=MAX_ERROR_TEXT)
            raise AotuiError(code, message or f"{self.app_id} refused {what}", _app_data(reply))
        if not isinstance(reply, expect):
            wrong = f"a {reply.KIND!r} message answering {what}, which expects {expect.KIND!r}"
            self.on_violation(self, _violation(wrong))
            raise AotuiError(
                ErrorCode.E_APP_ERROR,
                f"{self.app_id} broke the channel protocol (it sent {wrong}); it was killed "
                f"(protocol violation) and its restart policy applies",
                {"app": self.app_id, "last_exit": ExitReason.PROTOCOL_VIOLATION.value},
            )
        if isinstance(reply, Ack) and reply.result is not None:
            reply = dataclasses.replace(reply, result=sanitize_data(reply.result))
        return reply

    def fail_pending(self, error: AotuiError) -> None:
        """Answer every waiting request with ``error`` (the worker is gone)."""
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()
        for startup in (self.hello, self.first_update):
            if not startup.done():
                startup.set_exception(error)
                startup.exception()  # mark retrieved: nobody may be waiting any more

    async def _read(self) -> None:
        in_a_row = 0
        while not self.closed:
            if in_a_row == FRAMES_PER_TURN or self._log_dropped >= LOG_DROPS_PER_S:
                in_a_row = 0
                await self._next_turn()
            if self._log_floods >= LOG_FLOOD_S:
                flood = f"flood: over {LOG_DROPS_PER_S} log lines/s for {LOG_FLOOD_S} s"
                self.on_violation(self, AotuiError(ErrorCode.E_INVALID_CMD, flood))
                return
            try:
                self._receiving = asyncio.ensure_future(self.sock.recv(copy=True))
                frame = await self._receiving
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            in_a_row += 1
            if len(frame) > MAX_WORKER_FRAME:  # ZMQ_MAXMSGSIZE refuses these; kept as a backstop
                self.on_violation(self, AotuiError(ErrorCode.E_INVALID_CMD, "oversized frame"))
                return
            self.last_frame_bytes = len(frame)
            now = time.monotonic()
            if now - self._window_start >= 1.0:
                self._window_start, self._window_frames = now, 0
            self._window_frames += 1
            if self._window_frames > MAX_FRAMES_PER_S:
                self.on_violation(
                    self,
                    AotuiError(ErrorCode.E_INVALID_CMD, f"flood: over {MAX_FRAMES_PER_S} frames/s"),
                )
                return
            try:
                message = codec.decode(frame)
                self._dispatch(message)
            except AotuiError as exc:
                if exc.code is ErrorCode.E_INTERNAL:  # the codec's own bug, not the worker's
                    self._fault(exc.__cause__ if isinstance(exc.__cause__, Exception) else exc)
                else:
                    self.on_violation(self, exc)
                return
            except Exception as exc:  # noqa: BLE001 - our bug: logged and reported, not silent
                self._fault(exc)
                return

    async def _next_turn(self) -> None:
        """Let the loop run everyone else; a worker over its log budget waits out its second."""
        if self._log_dropped >= LOG_DROPS_PER_S:
            await asyncio.sleep(max(0.0, self._log_window + 1.0 - time.monotonic()))
        else:
            await asyncio.sleep(0)

    def _fault(self, exc: Exception) -> None:
        """Log a bug met while reading (traceback to supervisor.log) and hand it to ``on_fault``."""
        log.error("%s: reading its channel failed", self.app_id, exc_info=exc)
        if self.on_fault is not None:
            self.on_fault(self, exc)
        else:
            self.fail_pending(AotuiError(ErrorCode.E_INTERNAL, describe_fault(self.app_id, exc)))

    def _dispatch(self, message: Message) -> None:
        """Route one frame; anything a worker may not send is a violation (raises)."""
        if self._ending and not isinstance(message, LogRecord):
            return  # the rest of what a worker that ended said no longer matters
        if isinstance(message, Ack | AppState | ErrorReply):
            if (
                message.request_id == 0
                and isinstance(message, ErrorReply)
                and not self.hello.done()
            ):
                self.fail_pending(AotuiError(ErrorCode.E_APP_ERROR, message.message))
                return
            if message.request_id not in self.issued:
                raise _violation(f"a reply to request {message.request_id}, which was never sent")
            self.issued.discard(message.request_id)
            self.answered += 1  # the watchdog tells a busy worker from a spinning one by it
            future = self.pending.get(message.request_id)
            if future is not None and not future.done():
                future.set_result(message)  # a reply after its deadline is dropped quietly
            return
        if isinstance(message, Hello):
            if self.hello.done():
                raise _violation("a second hello")
            self.layers = [layer.value for layer in message.layers]  # plain data for status
            self.hello.set_result(message)
            return
        if isinstance(message, Pong):
            self.last_pong = time.monotonic()
            return
        if not isinstance(message, WORKER_MAY_SEND):
            raise _violation(f"a {message.KIND!r} message, which workers never send")
        if isinstance(message, LogRecord) and self.last_frame_bytes > MAX_LOG_FRAME:
            raise _violation(
                f"a log record of {self.last_frame_bytes} bytes (at most {MAX_LOG_FRAME})"
            )
        self.on_message(self, message)

    async def read_last_words(self, timeout_s: float = LAST_WORDS_S) -> None:
        """Read, before closing, the log lines a worker that ended sent before it went.

        Its exit can be heard while its last frames are still unread (a crash report behind a
        burst of log lines, or a loaded machine): they are all ours once its end of the
        connection is gone, and the reader takes them (within its budgets) until it waits on an
        empty channel. Only log lines go on from here.
        """
        reader = self._reader
        if self.closed or reader is None or reader.done():
            return
        self._ending = True
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._gone.wait(), timeout_s)
        while not reader.done() and time.monotonic() < deadline:
            receiving = self._receiving
            idle = receiving is not None and not receiving.done()
            if idle and not int(self.sock.get(zmq.EVENTS)) & zmq.POLLIN:
                return
            await asyncio.sleep(0.005)

    async def close(self) -> None:
        """Stop reading and close the socket; pending requests fail."""
        if self.closed:
            return
        self.closed = True
        self.fail_pending(AotuiError(ErrorCode.E_APP_ERROR, f"{self.app_id} stopped"))
        for task in (self._reader, self._watcher):
            if task is None:
                continue
            task.cancel()
            await asyncio.wait([task])
            if not task.cancelled() and task.exception() is not None:
                # on_fault itself failed: still a bug to see, but closing must go on.
                log.error(
                    "%s: %s ended in error", self.app_id, task.get_name(), exc_info=task.exception()
                )
        if self._monitor is not None:
            with contextlib.suppress(zmq.ZMQError):
                self.sock.disable_monitor()
            self._monitor.close(linger=0)
        self.sock.close(linger=0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _app_data(reply: ErrorReply) -> dict[str, Any]:
    """The data of a worker's error reply that may reach the agent: short plain strings and
    numbers under plain keys, sanitized; the rest is the worker's own business."""
    data: dict[str, Any] = {}
    for key, value in list(reply.data.items())[:16]:
        if not isinstance(key, str) or not key.isidentifier() or len(key) > 40:
            continue
        if isinstance(value, bool | int | float) or value is None:
            data[key] = value
        elif isinstance(value, str):
            data[key] = sanitize(value, limit=200)
    return data


def describe_fault(app_id: str, exc: BaseException) -> str:
    """One line naming a supervisor bug and where it happened (the full traceback is logged)."""
    frames = traceback.extract_tb(exc.__traceback__)[::-1][:4]  # innermost first
    where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in frames)
    return (
        f"the supervisor failed reading {app_id}'s channel ({type(exc).__name__}: "
        f"{str(exc)[:200]}{' at ' + where if where else ''}); a bug of the desktop, not the "
        f"app's: the full traceback is in supervisor.log"
    )


def describe_exit(exit_code: int | None, signal: int | None) -> str:
    """``exit 1`` / ``signal 9`` for ``last_exit``."""
    return f"signal {signal}" if signal is not None else f"exit {exit_code}"
