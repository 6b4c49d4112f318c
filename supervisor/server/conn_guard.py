"""A bound on the client connections of ``control.sock``, so a flood cannot exhaust descriptors.

libzmq accepts every connection to a bound socket in its own I/O thread, and an ``accept`` that
fails with ``EMFILE`` aborts the whole process (``src/ipc_listener.cpp``): about a thousand raw
connections that never finish the ZeroMQ handshake used to take the supervisor, and with it every
worker, down. Three measures keep descriptors for the workers and the store:

- :func:`raise_descriptor_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard one at start;
- :class:`ConnectionGuard` watches the socket's monitor and shuts down every connection beyond
  :func:`connection_bound` at once (the peer reads EOF), logging the flood once per minute;
- ``ZMQ_HANDSHAKE_IVL`` (:data:`HANDSHAKE_S`) drops connections that never finish the handshake.

Frames are bounded too, before ZeroMQ allocates them (``ZMQ_MAXMSGSIZE``): up to
:data:`ANSWERED_FRAME_BYTES`, so a request over the 4 MiB frame limit is received and answered
``E_INVALID_CMD`` naming the limit; ZeroMQ drops only a frame past that ceiling, with its
connection.

A connection refused here is shut down, never closed: the descriptor stays libzmq's, which sees
the end of the stream and closes it itself.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import time
from collections.abc import Callable

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from aotui.protocol import codec

__all__ = [
    "ANSWERED_FRAME_BYTES",
    "HANDSHAKE_S",
    "ConnectionGuard",
    "connection_bound",
    "oversized",
    "raise_descriptor_limit",
]

#: Descriptors kept for everything but client connections: workers, the store, logs, ZeroMQ.
DESCRIPTOR_RESERVE = 512
#: The most client connections at once, however high the descriptor limit.
MAX_CONNECTIONS = 1024
#: Seconds a client has to finish the ZeroMQ handshake before its connection is dropped.
HANDSHAKE_S = 5.0
#: At most one System Logs line about refused connections this often.
REPORT_EVERY_S = 10.0
#: The largest frame the control socket receives (``ZMQ_MAXMSGSIZE``): requests past the 4 MiB
#: frame limit and up to this are answered with the limit; past it ZeroMQ drops the connection
#: before allocating, which is what bounds a forged 128 MB frame.
ANSWERED_FRAME_BYTES = 32 << 20


def oversized(size: int) -> str | None:
    """Why a request frame of ``size`` bytes is refused (``None``: within the limit)."""
    if size <= codec.MAX_FRAME_BYTES:
        return None
    return (
        f"this request is {size / 2**20:.1f} MiB; a request frame is at most "
        f"{codec.MAX_FRAME_BYTES >> 20} MiB (MAX_FRAME_BYTES; frames past "
        f"{ANSWERED_FRAME_BYTES >> 20} MiB are dropped unanswered): send less per request, "
        f"e.g. split the commands or the data"
    )


def raise_descriptor_limit() -> int:
    """Lift the soft ``RLIMIT_NOFILE`` to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def connection_bound(descriptor_limit: int) -> int:
    """How many client connections a process with ``descriptor_limit`` descriptors may hold."""
    return max(16, min(MAX_CONNECTIONS, descriptor_limit - DESCRIPTOR_RESERVE))


class ConnectionGuard:
    """Counts the open connections of one listening ZeroMQ socket; refuses those past a bound."""

    def __init__(
        self,
        sock: zmq.asyncio.Socket,
        path: str,
        bound: int,
        log: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.bound = bound
        self.log = log
        self.clock = clock
        #: Descriptors of the connections libzmq holds open now.
        self.open: set[int] = set()
        #: Connections refused since the desktop started, and since the last report.
        self.refused = 0
        self._unreported = 0
        self._reported_at: float | None = None
        events = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
        self.monitor = sock.get_monitor_socket(events)

    async def run(self) -> None:
        """Follow the monitor until cancelled (and report what a flood left unreported)."""
        try:
            while True:
                if await self.monitor.poll(int(REPORT_EVERY_S * 1000)):
                    event = parse_monitor_message(await self.monitor.recv_multipart())
                    self.handle(int(event["event"]), int(event["value"]))
                self._report()
        finally:
            self.monitor.close(linger=0)

    def handle(self, event: int, fd: int) -> None:
        """One monitor event: a connection accepted, or one gone."""
        if event != zmq.EVENT_ACCEPTED:
            self.open.discard(fd)
            return
        if len(self.open) < self.bound:
            self.open.add(fd)
            return
        if self._shut_down(fd):
            self.refused += 1
            self._unreported += 1
            self._report()

    def _shut_down(self, fd: int) -> bool:
        """Shut ``fd`` down if it still is a connection of our socket (it may have been reused)."""
        try:
            # A duplicate: closing ours leaves libzmq's descriptor alone.
            peer = socket.socket(fileno=os.dup(fd))
        except OSError:
            return False
        with peer:
            try:
                if peer.family != socket.AF_UNIX or peer.getsockname() != self.path:
                    return False
                peer.shutdown(socket.SHUT_RDWR)
            except OSError:
                return False
        return True

    def _report(self) -> None:
        now = self.clock()
        if self._reported_at is not None and now - self._reported_at < REPORT_EVERY_S:
            return
        if not self._unreported:
            return
        self.log(
            f"Refused {self._unreported} client connection(s) beyond the bound of {self.bound} "
            f"open connections (a flood?); descriptors are kept for the apps. Connected "
            f"clients are not affected."
        )
        self._reported_at = now
        self._unreported = 0
