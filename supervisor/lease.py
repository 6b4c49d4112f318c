"""The input lease: single-writer input with an expiring owner (CONTRACT §6).

``acquire(owner)`` takes or renews the lease; a second owner gets ``E_LOCKED`` until the holder
releases it or stops heartbeating for ``lease_s``. Nobody holding it means anyone may execute.
"""

from __future__ import annotations

import time

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.registry import Clock

__all__ = ["InputLease"]


class InputLease:
    """Who may execute on the desktop now."""

    def __init__(self, lease_s: float = 30.0, clock: Clock = time.monotonic) -> None:
        self.lease_s = lease_s
        self.clock = clock
        self._owner: str | None = None
        self._expires = 0.0

    @property
    def owner(self) -> str | None:
        """The current holder, or ``None`` when free or expired."""
        if self._owner is not None and self.clock() >= self._expires:
            self._owner = None
        return self._owner

    def acquire(self, owner: str) -> float:
        """Take (or renew) the lease for ``owner``; returns seconds until it expires."""
        if not owner:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "acquire needs a non-empty owner name")
        holder = self.owner
        if holder is not None and holder != owner:
            raise AotuiError(
                ErrorCode.E_LOCKED,
                f"input is held by {holder!r} for up to {self._expires - self.clock():.0f} s more;"
                " wait and retry",
                {"owner": holder},
            )
        self._owner = owner
        self._expires = self.clock() + self.lease_s
        return self.lease_s

    def heartbeat(self, owner: str) -> float:
        """Renew ``owner``'s lease; ``E_LOCKED`` if it lost it."""
        if self.owner != owner:
            raise AotuiError(
                ErrorCode.E_LOCKED, f"{owner!r} does not hold the input lease; acquire it again"
            )
        return self.acquire(owner)

    def release(self, owner: str) -> None:
        """Give the lease up; releasing a lease one does not hold is ``E_LOCKED``."""
        holder = self.owner
        if holder is None:
            return
        if holder != owner:
            raise AotuiError(ErrorCode.E_LOCKED, f"the input lease is held by {holder!r}")
        self._owner = None

    def check(self, owner: str | None) -> None:
        """Allow an execute by ``owner``: the holder, or anyone while nobody holds the lease."""
        holder = self.owner
        if holder is not None and holder != owner:
            raise AotuiError(
                ErrorCode.E_LOCKED,
                f"input is held by {holder!r}; acquire the lease before executing",
                {"owner": holder},
            )
