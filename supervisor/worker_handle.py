"""The supervisor's end of one worker's channel: requests with deadlines, replies, fragments.

Every request to a worker gets a future and a deadline; the reader task resolves it when the
single reply arrives, so a slow or hung app only ever delays the command waiting on it. Fragment
updates and log lines are handed to ``on_message`` in channel order — the worker sends an
operation's fragments before its ack, so by the time the ack resolves the fragment cache already
shows the effect (read-your-writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable
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

__all__ = ["WorkerHandle", "describe_exit"]

#: Largest frame a worker may send; anything bigger is a protocol violation.
MAX_WORKER_FRAME = 8 << 20
#: More frames than this in one second is a flood (fragment updates are coalesced per loop
#: turn, so a well-behaved app sends far fewer).
MAX_FRAMES_PER_S = 5000
#: Log lines one worker may put in System Logs per second; more are counted and dropped, so an
#: app cannot push other apps' reports (a permission denial, a crash) out of the bounded log.
LOG_LINES_PER_S = 10
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
    ) -> None:
        self.app_id = app_id
        self.endpoint = endpoint
        self.sock = sock
        self.on_message = on_message
        self.on_violation = on_violation
        self.pid: int | None = None
        #: The worker's stdout/stderr capture (an ``AppLog``), closed at EOF.
        self.output: Any = None
        #: Brokered HTTP requests being performed for this worker.
        self.http_in_flight = 0
        #: Monotonic time of the last heartbeat answer.
        self.last_pong = time.monotonic()
        #: Confinement layers the worker reported in its ``Hello``.
        self.layers: list[str] = []
        loop = asyncio.get_running_loop()
        self.hello: asyncio.Future[Hello] = loop.create_future()
        #: Resolved by the desktop when the worker's first fragment update arrives.
        self.first_update: asyncio.Future[None] = loop.create_future()
        self.pending: dict[int, asyncio.Future[Message]] = {}
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

    def start(self) -> None:
        """Start reading the channel."""
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=self.app_id)

    def admit_log(self) -> tuple[bool, int]:
        """Whether a log line may go to System Logs now (at most ``LOG_LINES_PER_S`` a second),
        and how many were dropped in the window that just closed (to report once)."""
        now = time.monotonic()
        dropped = 0
        if now - self._log_window >= 1.0:
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
        self, build: Callable[[int], Message], timeout_s: float, what: str
    ) -> Message:
        """Send ``build(request_id)`` and wait for its reply; ``E_TIMEOUT`` past the deadline."""
        if self.closed:
            raise AotuiError(ErrorCode.E_APP_ERROR, f"{self.app_id} is not running")
        request_id = self.next_id()
        future: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        self.issued.add(request_id)
        try:
            await asyncio.wait_for(self.send(build(request_id)), timeout_s)
            reply = await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise AotuiError(
                ErrorCode.E_TIMEOUT,
                f"{self.app_id} did not answer {what} within {timeout_s:.1f} s",
                {"app": self.app_id},
            ) from None
        finally:
            self.pending.pop(request_id, None)
        if isinstance(reply, ErrorReply):
            code = ErrorCode.parse(reply.code) or ErrorCode.E_APP_ERROR
            raise AotuiError(code, reply.message, reply.data)
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
        while not self.closed:
            try:
                frame = await self.sock.recv(copy=True)
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            if len(frame) > MAX_WORKER_FRAME:
                self.on_violation(self, AotuiError(ErrorCode.E_INVALID_CMD, "oversized frame"))
                return
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
                self.on_violation(self, exc)
                return

    def _dispatch(self, message: Message) -> None:
        """Route one frame; anything a worker may not send is a violation (raises)."""
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
            future = self.pending.get(message.request_id)
            if future is not None and not future.done():
                future.set_result(message)  # a reply after its deadline is dropped quietly
            return
        if isinstance(message, Hello):
            if self.hello.done():
                raise _violation("a second hello")
            self.layers = list(message.layers)
            self.hello.set_result(message)
            return
        if isinstance(message, Pong):
            self.last_pong = time.monotonic()
            return
        if not isinstance(message, WORKER_MAY_SEND):
            raise _violation(f"a {message.KIND!r} message, which workers never send")
        self.on_message(self, message)

    async def close(self) -> None:
        """Stop reading and close the socket; pending requests fail."""
        if self.closed:
            return
        self.closed = True
        self.fail_pending(AotuiError(ErrorCode.E_APP_ERROR, f"{self.app_id} stopped"))
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader
        self.sock.close(linger=0)


def describe_exit(exit_code: int | None, signal: int | None) -> str:
    """``exit 1`` / ``signal 9`` for ``last_exit``."""
    return f"signal {signal}" if signal is not None else f"exit {exit_code}"
