"""Signal throttling: at most N per second per desktop, and the last change always signals.

A leading-and-trailing-edge throttle: the first change in a quiet period is published at once;
changes inside the interval are coalesced into one trailing signal at the interval's end, carrying
the most recent reason and every distinct reason held since the previous signal (CONTRACT §6), so
an ``app_crashed`` followed by ``app_restarted`` in one window is not lost. The clock is injected so
the rule is tested without sleeping.
"""

from __future__ import annotations

import time

from aotui.supervisor.server.registry import Clock

__all__ = ["Burst", "SignalThrottle"]

#: What one published signal carries: the latest reason, and every distinct reason it stands for
#: (in the order they first happened; the latest is among them).
Burst = tuple[str, tuple[str, ...]]


class SignalThrottle:
    """Decides when a change becomes a published signal."""

    def __init__(self, rate_per_s: float = 10.0, clock: Clock = time.monotonic) -> None:
        self.interval = 1.0 / rate_per_s
        self.clock = clock
        self._last_sent = float("-inf")
        self._latest: str | None = None
        #: Distinct reasons held for the trailing signal; a dict keeps first-seen order.
        self._held: dict[str, None] = {}

    def offer(self, reason: str) -> Burst | None:
        """A change happened; returns the signal to publish now, or ``None`` (held for later)."""
        now = self.clock()
        if self._latest is None and now - self._last_sent >= self.interval:
            self._last_sent = now
            return reason, (reason,)
        self._latest = reason
        self._held[reason] = None
        return None

    def due(self) -> Burst | None:
        """The held trailing signal if its time has come (then it is consumed)."""
        if self._latest is not None and self.clock() - self._last_sent >= self.interval:
            burst = self._latest, tuple(self._held)
            self._latest = None
            self._held = {}
            self._last_sent = self.clock()
            return burst
        return None

    def next_due_in(self) -> float | None:
        """Seconds until :meth:`due` will have something, or ``None`` when nothing is held."""
        if self._latest is None:
            return None
        return max(0.0, self._last_sent + self.interval - self.clock())
