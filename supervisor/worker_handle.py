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

from protocol import codec
from protocol.errors import AotuiError, ErrorCode
from protocol.messages import Ack, AppState, ErrorReply, Hello, Message, Pong

__all__ = ["WorkerHandle", "describe_exit"]

#: Largest frame a worker may send; anything bigger is a protocol violation.
MAX_WORKER_FRAME = 8 << 20


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

    def start(self) -> None:
        """Start reading the channel."""
        self._reader = asyncio.get_running_loop().create_task(self._read(), name=self.app_id)

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
            try:
                message = codec.decode(frame)
            except AotuiError as exc:
                self.on_violation(self, exc)
                return
            self._dispatch(message)

    def _dispatch(self, message: Message) -> None:
        if isinstance(message, Ack | AppState | ErrorReply):
            future = self.pending.get(message.request_id)
            if future is not None and not future.done():
                future.set_result(message)
            elif isinstance(message, ErrorReply) and message.request_id == 0:
                self.fail_pending(AotuiError(ErrorCode.E_APP_ERROR, message.message))
            return
        if isinstance(message, Hello):
            self.layers = list(message.layers)
            if not self.hello.done():
                self.hello.set_result(message)
            return
        if isinstance(message, Pong):
            self.last_pong = time.monotonic()
            return
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
