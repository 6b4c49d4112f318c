"""Signal throttling: at most N per second per desktop, and the last change always signals.

A leading-and-trailing-edge throttle: the first change in a quiet period is published at once;
changes inside the interval are coalesced into one trailing signal at the interval's end, carrying
the most recent reason. The clock is injected so the rule is tested without sleeping.
"""

from __future__ import annotations

import time

from aotui.supervisor.registry import Clock

__all__ = ["SignalThrottle"]


class SignalThrottle:
    """Decides when a change becomes a published signal."""

    def __init__(self, rate_per_s: float = 10.0, clock: Clock = time.monotonic) -> None:
        self.interval = 1.0 / rate_per_s
        self.clock = clock
        self._last_sent = float("-inf")
        self._pending: str | None = None

    def offer(self, reason: str) -> str | None:
        """A change happened; returns the reason to publish now, or ``None`` (held for later)."""
        now = self.clock()
        if self._pending is None and now - self._last_sent >= self.interval:
            self._last_sent = now
            return reason
        self._pending = reason
        return None

    def due(self) -> str | None:
        """The held trailing signal if its time has come (then it is consumed)."""
        if self._pending is not None and self.clock() - self._last_sent >= self.interval:
            reason, self._pending = self._pending, None
            self._last_sent = self.clock()
            return reason
        return None

    def next_due_in(self) -> float | None:
        """Seconds until :meth:`due` will have something, or ``None`` when nothing is held."""
        if self._pending is None:
            return None
        return max(0.0, self._last_sent + self.interval - self.clock())
