"""One peer of ``rpc.sock`` (:class:`RpcConnection`), who it is, and how peers share the socket.

A peer is the process on the other end, as the kernel says it (``SO_PEERCRED``: pid and uid at
``connect``), never as the peer says it. The socket's directory is 0700, so every peer is the
desktop's own uid (or root): what keeps one hostile or buggy process from starving the owner's
``aotui`` is therefore a budget per process (:attr:`ConnectionBook.per_process`), an idle timeout,
and, when the desktop's connections are all taken, closing the oldest idle connection of the
process that holds the most instead of refusing the newcomer (:meth:`ConnectionBook.admit`).
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["ConnectionBook", "PeerCredentials", "RpcConnection", "peer_credentials"]

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class PeerCredentials:
    """The process that connected, as the kernel reports it (pid 0: outside our pid namespace)."""

    #: Its pid (translated into the supervisor's pid namespace; 0 when it is not visible there).
    pid: int
    #: Its uid.
    uid: int


def peer_credentials(writer: asyncio.StreamWriter) -> PeerCredentials:
    """``SO_PEERCRED`` of a Unix stream connection (pid 0, uid -1 when the kernel says nothing)."""
    sock = writer.get_extra_info("socket")
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    except (OSError, AttributeError):
        return PeerCredentials(0, -1)
    pid, uid, _gid = _UCRED.unpack(raw)
    return PeerCredentials(pid, uid)


@dataclass(eq=False)
class RpcConnection:
    """One peer: its stream, credentials, session, lease token, subscription and bounds."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    slots: asyncio.Semaphore
    peer: PeerCredentials
    #: The connection's own session: unguessable, so no other reader can take it.
    session: str = field(default_factory=lambda: f"#rpc-{secrets.token_hex(8)}")
    #: The lease token this connection acquired (presented when a request gives none).
    token: str | None = None
    #: Reasons subscribed to (empty: all), or ``None`` when not subscribed.
    reasons: frozenset[str] | None = None
    events: asyncio.Queue[dict[str, object]] | None = None
    dropped: int = 0
    closed: bool = False
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    events_task: asyncio.Task[None] | None = None
    #: Requests read and not yet answered (a pending ``wait_for`` among them).
    running: int = 0
    #: When the last request was answered (or the connection opened), by the book's clock.
    idle_since: float = 0.0

    @property
    def idle(self) -> bool:
        """No request of this connection is running."""
        return self.running == 0

    async def send(self, data: bytes, timeout_s: float) -> None:
        """Write one line; a peer that does not read it in time is disconnected."""
        async with self.write_lock:
            if self.closed:
                return
            self.writer.write(data)
            try:
                await asyncio.wait_for(self.writer.drain(), timeout_s)
            except (TimeoutError, ConnectionError):
                self.abort()

    def abort(self) -> None:
        """Drop the connection now (unread answers are discarded)."""
        self.closed = True
        self.writer.transport.abort()


class ConnectionBook:
    """The open connections of ``rpc.sock``, with the budgets that decide who may connect."""

    def __init__(
        self,
        total: int,
        per_process: int,
        idle_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        #: Open connections of the whole desktop.
        self.total = total
        #: Open connections of one process (one peer pid).
        self.per_process = per_process
        #: Seconds a connection with no request running (and no subscription) stays open.
        self.idle_timeout_s = idle_timeout_s
        self.clock = clock
        self.open: set[RpcConnection] = set()

    def __len__(self) -> int:
        return len(self.open)

    def held_by(self, pid: int) -> int:
        """Open connections of the process ``pid``."""
        return sum(1 for connection in self.open if connection.peer.pid == pid)

    def admit(self, newcomer: RpcConnection) -> tuple[RpcConnection, AotuiError] | None:
        """Count ``newcomer`` in; returns a connection to close to make room, and its notice.

        Raises ``E_RATE_LIMITED`` when its process is over its budget, or when every open
        connection has a request running (none can be closed without losing work).
        """
        pid = newcomer.peer.pid
        held = self.held_by(pid)
        if held >= self.per_process:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"this process (pid {pid}) already holds {held} connections to rpc.sock (at "
                f"most {self.per_process} per process); send more requests on one connection "
                f"(several run at once) or close one",
                {"budget": "connections_per_process", "limit": self.per_process},
            )
        evicted = None
        if len(self.open) >= self.total:
            evicted = self._make_room()
        newcomer.idle_since = self.clock()
        self.open.add(newcomer)
        return evicted

    def _make_room(self) -> tuple[RpcConnection, AotuiError]:
        """Take the oldest idle connection of the process holding the most out of the book."""
        idle = [connection for connection in self.open if connection.idle]
        if not idle:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"the desktop already serves {len(self.open)} JSON-RPC connections (at most "
                f"{self.total}), each with a request running; close one and connect again",
                {"budget": "connections", "limit": self.total},
            )
        holders = Counter(connection.peer.pid for connection in self.open)
        # The process with the most connections; among its idle ones, an unsubscribed one
        # first (a subscriber is waiting for events), then the one idle the longest.
        victim = max(idle, key=lambda c: (holders[c.peer.pid], c.reasons is None, -c.idle_since))
        self.open.discard(victim)
        notice = AotuiError(
            ErrorCode.E_RATE_LIMITED,
            f"closed to make room: the desktop's {self.total} JSON-RPC connections were all "
            f"open and this process (pid {victim.peer.pid}) held the most "
            f"({holders[victim.peer.pid]}); this connection had no request running. Connect "
            f"again to send one.",
            {"budget": "connections", "limit": self.total},
        )
        return victim, notice

    def began(self, connection: RpcConnection) -> None:
        """A request of ``connection`` was read."""
        connection.running += 1

    def ended(self, connection: RpcConnection) -> None:
        """A request of ``connection`` was answered."""
        connection.running -= 1
        if not connection.running:
            connection.idle_since = self.clock()

    def idle_past_timeout(self) -> list[RpcConnection]:
        """Connections idle for :attr:`idle_timeout_s` or longer (subscribers never are)."""
        now = self.clock()
        return [
            connection
            for connection in self.open
            if self._times_out(connection) and now - connection.idle_since >= self.idle_timeout_s
        ]

    def next_timeout_in(self) -> float:
        """Seconds until the next connection's idle timeout, as things stand."""
        now = self.clock()
        due = [
            connection.idle_since + self.idle_timeout_s - now
            for connection in self.open
            if self._times_out(connection)
        ]
        return max(0.0, min(due, default=self.idle_timeout_s))

    def timed_out(self) -> AotuiError:
        """What a connection closed for being idle is told."""
        return AotuiError(
            ErrorCode.E_TIMEOUT,
            f"closed: no request on this connection for {self.idle_timeout_s:g} s (config key "
            f"rpc_idle_timeout_s); connect again to send one. A connection with a request "
            f"running (a wait_for too) or subscribed to events is not idle.",
            {"budget": "idle_timeout_s", "limit": self.idle_timeout_s},
        )

    @staticmethod
    def _times_out(connection: RpcConnection) -> bool:
        return connection.idle and connection.reasons is None and not connection.closed
