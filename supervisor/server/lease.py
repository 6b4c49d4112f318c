"""The input lease: single-writer input with an expiring owner (CONTRACT §6).

``acquire(owner)`` takes the lease and returns a secret **token**; ``execute``, ``heartbeat`` and
``release`` present it. The owner's name is for people (status, error messages) and proves
nothing: a second client calling itself by the holder's name gets ``E_LOCKED`` like anyone else.
The holder renews with ``heartbeat(token)`` (or ``acquire(owner, token)``); a lease not renewed
for ``lease_s`` expires, so a dead client cannot hold a desktop forever. Nobody holding it means
anyone may execute.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.server.registry import Clock

__all__ = ["InputLease", "LeaseGrant"]


@dataclass(frozen=True)
class LeaseGrant:
    """What ``acquire`` gives the holder."""

    #: The secret to present with ``execute``, ``heartbeat`` and ``release``.
    token: str
    #: Seconds until the lease expires without a heartbeat.
    lease_s: float


class InputLease:
    """Who may execute on the desktop now."""

    def __init__(self, lease_s: float = 30.0, clock: Clock = time.monotonic) -> None:
        self.lease_s = lease_s
        self.clock = clock
        self._owner: str | None = None
        self._token = ""
        self._expires = 0.0

    @property
    def owner(self) -> str | None:
        """The current holder's name, or ``None`` when free or expired."""
        if self._owner is not None and self.clock() >= self._expires:
            self._owner = None
            self._token = ""
        return self._owner

    def _holds(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self._token)

    def _locked(self, holder: str, what: str) -> AotuiError:
        return AotuiError(
            ErrorCode.E_LOCKED,
            f"input is held by {holder!r} for up to {self._expires - self.clock():.0f} s more; "
            f"{what}",
            {"owner": holder},
        )

    def acquire(self, owner: str, token: str | None = None) -> LeaseGrant:
        """Take the lease for ``owner``, or renew it when ``token`` is the holder's."""
        if not owner:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "acquire needs a non-empty owner name")
        holder = self.owner
        if holder is not None and not self._holds(token):
            if holder == owner:
                raise self._locked(
                    holder,
                    "a request using that name without the lease's token does not hold it; "
                    "present the token acquire returned, or wait and retry",
                )
            raise self._locked(holder, "wait and retry")
        if holder is None:
            self._token = secrets.token_urlsafe(24)
        self._owner = owner
        self._expires = self.clock() + self.lease_s
        return LeaseGrant(self._token, self.lease_s)

    def heartbeat(self, token: str | None) -> float:
        """Renew the lease ``token`` holds; ``E_LOCKED`` if it does not (expired or taken)."""
        holder = self.owner
        if holder is None or not self._holds(token):
            raise AotuiError(
                ErrorCode.E_LOCKED,
                "this lease token does not hold the input lease (it expired, was released or "
                "was never issued); acquire it again",
                {"owner": holder},
            )
        self._expires = self.clock() + self.lease_s
        return self.lease_s

    def release(self, token: str | None) -> None:
        """Give the lease up; a token that does not hold it gets ``E_LOCKED``."""
        holder = self.owner
        if holder is None:
            return
        if not self._holds(token):
            raise self._locked(holder, "only the holder's token releases it")
        self._owner = None
        self._token = ""

    def check(self, token: str | None) -> None:
        """Allow an execute presenting ``token``: the holder's, or anything while nobody holds."""
        holder = self.owner
        if holder is not None and not self._holds(token):
            what = "this request presented a wrong lease token" if token else "no lease token"
            raise self._locked(
                holder, f"{what} was presented; acquire the lease (and present its token)"
            )
