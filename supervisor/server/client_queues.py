"""Fair service of ``control.sock``: one bounded queue per client.

A client that sends requests faster than it reads the replies (10,000 snapshots, say) used to get
a task per request at once: every other client's ping queued behind them, and the memory they
took stayed. Now each client (ZeroMQ identity) has at most :data:`IN_FLIGHT` requests being served
and at most :data:`QUEUED` waiting behind them; a request beyond that is answered at once with
``E_RATE_LIMITED`` and costs nothing more. Other clients' requests never wait for its queue.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

__all__ = ["IN_FLIGHT", "QUEUED", "ClientQueues"]

#: Requests of one client served at the same time.
IN_FLIGHT = 8
#: Requests of one client waiting for a free slot; beyond this they are refused at once.
QUEUED = 256


@dataclass
class _Client:
    running: int = 0
    waiting: deque[bytes] = field(default_factory=deque)


class ClientQueues:
    """Dispatches each client's requests through its own bounded queue."""

    def __init__(
        self,
        serve: Callable[[bytes, bytes], Awaitable[None]],
        refuse: Callable[[bytes, bytes], Awaitable[None]],
        in_flight: int = IN_FLIGHT,
        queued: int = QUEUED,
    ) -> None:
        self.serve = serve
        self.refuse = refuse
        self.in_flight = in_flight
        self.queued = queued
        self._clients: dict[bytes, _Client] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Requests refused because their client's queue was full.
        self.refused = 0

    def __len__(self) -> int:
        """Clients with requests being served or waiting."""
        return len(self._clients)

    async def offer(self, identity: bytes, frame: bytes) -> None:
        """Serve, queue or refuse one request of ``identity``."""
        client = self._clients.setdefault(identity, _Client())
        if client.running < self.in_flight:
            client.running += 1
            task = asyncio.get_running_loop().create_task(self._drain(identity, client, frame))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        elif len(client.waiting) < self.queued:
            client.waiting.append(frame)
        else:
            self.refused += 1
            await self.refuse(identity, frame)

    async def pause(self) -> None:
        """Let the requests being served run before the next is received.

        A receive of a frame ZeroMQ already holds completes without yielding to the event loop,
        so a burst of thousands kept the loop receiving (and refusing) while a ping received
        among them waited for the whole burst: about a second.
        """
        await asyncio.sleep(0)

    async def _drain(self, identity: bytes, client: _Client, frame: bytes | None) -> None:
        try:
            while frame is not None:
                await self.serve(identity, frame)
                frame = client.waiting.popleft() if client.waiting else None
        finally:
            client.running -= 1
            if not client.running and not client.waiting and self._clients.get(identity) is client:
                del self._clients[identity]  # a client's bookkeeping ends with its work
