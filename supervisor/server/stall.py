"""Time the supervisor itself did not run: a SIGSTOP, a VM suspend, a laptop lid, a long stall.

While the supervisor's event loop is stopped, its workers keep answering heartbeats and its
clients keep heartbeating their lease; the answers wait in socket buffers. Measured on
``time.monotonic`` alone, that time would read as the workers' silence (and every healthy worker
would be killed as ``timeout`` on resume) or as a client that stopped heartbeating.

:class:`LoopClock` ticks on the loop every ``tick_s``; a tick that comes far later than scheduled
means the loop did not run in between, and that time is *lost*. ``clock()`` is monotonic time
minus everything lost, so a deadline measured on it counts only time the supervisor was there to
hear an answer. Whoever reads a monotonic stamp (a worker's last pong) calls :meth:`tick` first and
credits what :meth:`lost_since` returns.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aotui.supervisor.server.registry import Clock

__all__ = ["LoopClock"]

#: A tick this much later than scheduled is a stall of the loop, not ordinary jitter.
STALL_TOLERANCE_S = 1.0


class LoopClock:
    """Monotonic time that stands still while this process's event loop does not run."""

    def __init__(
        self,
        tick_s: float = 0.1,
        tolerance_s: float = STALL_TOLERANCE_S,
        clock: Clock = time.monotonic,
        on_stall: Callable[[float], None] | None = None,
    ) -> None:
        self.tick_s = tick_s
        #: Told the seconds lost, once per stall, by whichever reader noticed it first.
        self.on_stall = on_stall
        self.tolerance_s = tolerance_s
        self.clock = clock
        self.lost_s = 0.0
        self._last = clock()
        #: (monotonic time a stall ended, seconds lost), oldest first; a few are enough.
        self.stalls: list[tuple[float, float]] = []

    def __call__(self) -> float:
        """Monotonic seconds, minus the time the loop was stalled."""
        self.tick()
        return self.clock() - self.lost_s

    def tick(self) -> float:
        """Note that the loop runs now; returns the seconds just found lost (0.0 if none)."""
        now = self.clock()
        late = now - self._last - self.tick_s
        self._last = now
        if late <= self.tolerance_s:
            return 0.0
        self.lost_s += late
        self.stalls = [*self.stalls[-15:], (now, late)]
        if self.on_stall is not None:
            self.on_stall(late)
        return late

    def lost_since(self, stamp: float) -> float:
        """Seconds lost to stalls that ended after the monotonic time ``stamp``."""
        self.tick()
        return sum(lost for ended, lost in self.stalls if ended > stamp)

    async def run(self) -> None:
        """Tick forever (a stall is noticed even when nobody reads the clock)."""
        self._last = self.clock()
        while True:
            await asyncio.sleep(self.tick_s)
            self.tick()
