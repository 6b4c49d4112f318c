"""The supervisor's side of the zygote: start it, ask it for workers, hear when they end.

The zygote is started with ``subprocess`` (a fresh interpreter, so it holds no ZeroMQ context and no
descriptor of ours but its end of a socketpair) from the supervisor's main thread, because
``PR_SET_PDEATHSIG`` fires when the *thread* that forked it ends.

The zygote is a supervised child: its end of the socketpair reads EOF the moment it dies, and its
workers die with it (their ``PR_SET_PDEATHSIG``). The launcher then reaps it, makes sure those
workers are gone, and tells its :class:`LauncherEvents` which pids died;
:meth:`ZygoteLauncher.start` starts a new one, and a launch asked for meanwhile waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import socket
import subprocess
from collections.abc import Awaitable, Callable, Collection
from typing import IO, Protocol

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import Exited, Launch, Launched, Message, WorkerPolicy
from aotui.protocol.stream import FrameReader, write_frame
from aotui.supervisor.workers.zygote_start import hand_log, spawn, take_prestarted

__all__ = ["LauncherEvents", "ZygoteLauncher"]


class LauncherEvents(Protocol):
    """What the launcher reports: a worker's end, and the zygote's own."""

    def worker_exited(self, exited: Exited) -> None:
        """The zygote reaped a worker (its exit code or signal, or a cgroup limit)."""

    def zygote_died(self, pids: set[int], how: str) -> None:
        """The zygote ended (``how``), and the workers ``pids`` with it."""


class ZygoteLauncher:
    """Owns the zygote process and the launch conversation with it."""

    def __init__(self, log: IO[bytes] | int | None = None) -> None:
        self.log = log
        #: Told of each worker's exit and of the zygote's death (see :meth:`listen`).
        self.events: LauncherEvents | None = None
        self._ready: asyncio.Event | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self.reader = FrameReader()
        self.pending: dict[int, asyncio.Future[Launched]] = {}
        self.tokens = itertools.count(1)
        self.pids: set[int] = set()
        #: Set when a worker leaves ``pids``, then replaced: what :meth:`wait_gone` awaits.
        self._gone = asyncio.Event()

    def listen(self, events: LauncherEvents) -> None:
        """Report exits and the zygote's death to ``events`` from now on."""
        self.events = events

    def start(self) -> None:
        """Start the zygote (call from the main thread, inside the running loop)."""
        prestarted = take_prestarted()
        self.process, ours = prestarted if prestarted is not None else spawn(self.log)
        # A prestarted zygote learns its log only now; a spawned one is told the same again. One
        # gone already is noticed as any dead zygote is: EOF on its socket, below.
        with contextlib.suppress(OSError):
            hand_log(ours, self.log)
        self.reader = FrameReader()
        ours.setblocking(False)
        self.sock = ours
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable)
        self.ready.set()

    @property
    def ready(self) -> asyncio.Event:
        """Set while a zygote is there to ask for workers."""
        if self._ready is None:
            self._ready = asyncio.Event()
        return self._ready

    def _readable(self) -> None:
        assert self.sock is not None
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._zygote_gone()
            return
        try:
            messages = self.reader.feed(data)
        except AotuiError:
            self._zygote_gone()
            return
        for message in messages:
            self._dispatch(message)

    def _dispatch(self, message: Message) -> None:
        if isinstance(message, Launched):
            future = self.pending.pop(message.token, None)
            if future is not None and not future.done():
                future.set_result(message)
        elif isinstance(message, Exited):
            self.pids.discard(message.pid)
            self._wake_gone()
            if self.events is not None:
                self.events.worker_exited(message)

    def _zygote_gone(self) -> None:
        self.ready.clear()
        if self.sock is not None:
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        how = "closed its socket"
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()  # a zygote that hung up on us is no use alive
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=1.0)  # it is dying or dead: a zombie, at once
            how = _describe_status(self.process.returncode)
            self.process = None
        error = AotuiError(
            ErrorCode.E_TIMEOUT,
            f"the worker launcher (zygote) exited ({how}) and is being restarted; retry",
        )
        for future in self.pending.values():
            if not future.done():
                future.set_exception(error)
        self.pending.clear()
        # Its workers die with it (PR_SET_PDEATHSIG); a group that outlived it is killed here.
        dead = set(self.pids)
        self.kill_workers()
        self.pids.clear()
        self._wake_gone()
        if self.events is not None:
            self.events.zygote_died(dead, how)

    def launch(
        self,
        app: str,
        app_dir: str,
        entry: str,
        endpoint: str,
        policy: WorkerPolicy,
        channel_fd: int,
        log_fd: int,
    ) -> Awaitable[int]:
        """Fork a worker on the listening socket ``channel_fd``, its stdout/stderr to ``log_fd``.

        The ``Launch`` is written before this returns when a zygote is there (the caller may send
        the worker its ``Start`` meanwhile); what it returns gives the worker's pid.
        """

        def ask() -> asyncio.Future[Launched]:
            assert self.sock is not None
            token = next(self.tokens)
            future: asyncio.Future[Launched] = asyncio.get_running_loop().create_future()
            self.pending[token] = future
            self.sock.setblocking(True)
            try:
                launch = Launch(token, app, app_dir, entry, endpoint, policy)
                write_frame(self.sock, launch, [channel_fd, log_fd])
            finally:
                self.sock.setblocking(False)
            return future

        return self._launched(ask() if self.sock is not None else None, ask)

    async def _launched(
        self, asked: asyncio.Future[Launched] | None, ask: Callable[[], asyncio.Future[Launched]]
    ) -> int:
        if asked is None:
            # Between a dead zygote and its successor: wait for the new one.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ready.wait(), 10.0)
            if self.sock is None:
                raise AotuiError(
                    ErrorCode.E_TIMEOUT,
                    "the worker launcher (zygote) did not come back within 10 s; retry",
                )
            asked = ask()
        launched = await asyncio.wait_for(asked, 10.0)
        if launched.error:
            raise AotuiError(ErrorCode.E_INTERNAL, f"cannot start a worker: {launched.error}")
        self.pids.add(launched.pid)
        return launched.pid

    def kill_workers(self) -> None:
        """SIGKILL every worker still alive, with every process it started (its group)."""
        for pid in list(self.pids):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    self.pids.discard(pid)
        self._wake_gone()

    async def wait_gone(self, pids: Collection[int]) -> None:
        """Return once none of ``pids`` is a live worker: woken by each exit, never polled."""
        while not self.pids.isdisjoint(pids):
            await self._gone.wait()

    def _wake_gone(self) -> None:
        self._gone.set()
        self._gone = asyncio.Event()

    def stop(self) -> None:
        """Kill the workers and the zygote, and wait for the zygote."""
        self.events = None  # what ends now was asked to
        self.kill_workers()
        if self.sock is not None:
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=5)
            self.process = None


def _describe_status(returncode: int | None) -> str:
    if returncode is None:
        return "still running"
    if returncode < 0:
        return f"signal {-returncode}"
    return f"exit {returncode}"
