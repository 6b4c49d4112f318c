"""Restart policies in the style of OTP supervisors and systemd units.

- ``permanent``: always restarted, whatever the exit.
- ``transient``: restarted only after an abnormal exit (non-zero code, a signal, a limit kill).
- ``temporary``: never restarted; a crash leaves it ``not running``.

Restart intensity: at most ``max_restarts`` restarts within ``period_s`` seconds; one more crash in
that window and the app is ``failed`` until the agent opens it again. A crash loop backs off
exponentially (``backoff_s`` doubling up to ``backoff_max_s``), so it costs little: the back-off
grows with each crash inside the window that came soon after its restart (the worker served less
than :data:`STABLE_S`). A worker that served longer was a restart that took: its crash is restarted
at once, so an app killed now and then under load is not made to wait for crashes long past.
Time is injected, so the rules are tested without sleeping.

A policy comes from an untrusted manifest, so its numbers are clamped to :data:`BOUNDS`: at most
100 restarts per period, a period of at least 1 s, a first back-off of at least 0.1 s and a
longest back-off between that and 300 s. ``max_restarts 1e8, period_s 0.001, backoff_s 0`` is
thereby a policy that restarts about once a second at worst, never 37 times a second forever.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.server.registry import Clock

__all__ = [
    "BOUNDS",
    "STABLE_S",
    "RestartDecision",
    "RestartMode",
    "RestartPolicy",
    "RestartTracker",
]

#: A worker that served this long before it ended is not part of a crash loop.
STABLE_S = 1.0

#: (lowest, highest) value of each number of a restart policy; a value outside is clamped.
BOUNDS: dict[str, tuple[float, float]] = {
    "max_restarts": (0, 100),
    "period_s": (1.0, 86_400.0),
    "backoff_s": (0.1, 60.0),
    "backoff_max_s": (0.1, 300.0),
}


class RestartMode(enum.Enum):
    """When a worker that ended is started again."""

    #: Always.
    PERMANENT = "permanent"
    #: Only after an abnormal exit.
    TRANSIENT = "transient"
    #: Never.
    TEMPORARY = "temporary"


@dataclass(frozen=True)
class RestartPolicy:
    """How one app is restarted."""

    mode: RestartMode = RestartMode.PERMANENT
    max_restarts: int = 3
    period_s: float = 60.0
    backoff_s: float = 0.1
    backoff_max_s: float = 5.0

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], where: str = "restart") -> RestartPolicy:
        """Parse ``{"mode": "transient", "max_restarts": 5, …}``; errors name the key."""
        known = {"mode", "max_restarts", "period_s", "backoff_s", "backoff_max_s"}
        for key in raw:
            if key not in known:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"{where}: unknown key {key!r} (known: {', '.join(sorted(known))})",
                    {"field": f"{where}.{key}"},
                )
        values: dict[str, Any] = {}
        if "mode" in raw:
            try:
                values["mode"] = RestartMode(raw["mode"])
            except ValueError:
                raise AotuiError(
                    ErrorCode.E_INVALID_CMD,
                    f"{where}.mode must be permanent, transient or temporary, got {raw['mode']!r}",
                    {"field": f"{where}.mode"},
                ) from None
        for key in ("max_restarts", "period_s", "backoff_s", "backoff_max_s"):
            if key in raw:
                value = raw[key]
                if (
                    isinstance(value, bool)
                    or not isinstance(value, int | float)
                    or not value >= 0  # NaN too
                ):
                    raise AotuiError(
                        ErrorCode.E_INVALID_CMD,
                        f"{where}.{key} must be a non-negative number, got {value!r}",
                        {"field": f"{where}.{key}"},
                    )
                low, high = BOUNDS[key]
                clamped = min(max(float(value), low), high)
                values[key] = int(clamped) if key == "max_restarts" else clamped
        policy = cls(**values)
        if policy.backoff_max_s < policy.backoff_s:
            policy = dataclasses.replace(policy, backoff_max_s=policy.backoff_s)
        return policy


@dataclass(frozen=True)
class RestartDecision:
    """What to do after a worker ended."""

    restart: bool
    #: Seconds to wait before starting the new worker.
    delay_s: float = 0.0
    #: The app crashed too often: mark it ``failed``.
    failed: bool = False
    reason: str = ""


@dataclass
class RestartTracker:
    """Applies a :class:`RestartPolicy` to one app's history of exits."""

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    clock: Clock = time.monotonic
    restarts: deque[float] = field(default_factory=lambda: deque(maxlen=256))
    #: Crashes in a row that each came less than :data:`STABLE_S` after their start.
    quick_crashes: int = 0

    def decide(self, abnormal: bool, served_s: float = 0.0) -> RestartDecision:
        """The decision for an exit that just happened (``abnormal``: crash, signal, limit).

        ``served_s``: how long the worker served before it ended (0 when unknown: a crash loop).
        """
        mode = self.policy.mode
        if mode is RestartMode.TEMPORARY:
            return RestartDecision(False, reason="temporary apps are not restarted")
        if mode is RestartMode.TRANSIENT and not abnormal:
            return RestartDecision(False, reason="transient app exited normally")
        now = self.clock()
        while self.restarts and now - self.restarts[0] > self.policy.period_s:
            self.restarts.popleft()
        if len(self.restarts) >= self.policy.max_restarts:
            return RestartDecision(
                False,
                failed=True,
                reason=f"more than {self.policy.max_restarts} restarts in "
                f"{self.policy.period_s:g} s",
            )
        if served_s >= STABLE_S:
            self.quick_crashes = 0
        # Only quick crashes inside the window back off, and only after the first restart.
        looping = min(self.quick_crashes, len(self.restarts))
        delay = 0.0
        if looping and self.policy.backoff_s > 0:
            delay = min(self.policy.backoff_max_s, self.policy.backoff_s * 2 ** (looping - 1))
        self.quick_crashes += 1
        self.restarts.append(now)
        return RestartDecision(True, delay_s=delay)

    def reset(self) -> None:
        """Forget the history (the agent opened a failed app again)."""
        self.restarts.clear()
        self.quick_crashes = 0
