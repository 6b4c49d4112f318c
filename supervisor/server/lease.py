"""The input lease: single-writer input with an expiring owner (CONTRACT §6).

``acquire(owner)`` takes the lease and returns a secret **token**; ``execute``, ``heartbeat`` and
``release`` present it. The owner's name is for people (status, error messages) and proves
nothing: a second client calling itself by the holder's name gets ``E_LOCKED`` like anyone else.
The holder renews with ``heartbeat(token)`` (or ``acquire(owner, token)``); a lease not renewed
for ``lease_s`` expires, so a dead client cannot hold a desktop forever. Nobody holding it means
anyone may execute.

An agent that comes and goes (an MCP session) takes the lease with ``idle_s``: it holds input
only while it works. Such a lease never expires while one of its commands runs, and frees
``idle_s`` after the last one ends (or after ``acquire``, if none follows) without any release or
heartbeat, so a connected but idle session never keeps anyone else out. The holder takes it again
with its next command. ``E_LOCKED`` names the holder, its ``kind`` of client and when input
frees: a true bound (a running command's deadline plus ``idle_s``; the idle time left; or, for a
heartbeat lease, the time left if its holder stops heartbeating).
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.server.registry import Clock

__all__ = ["CLIENT_KINDS", "InputLease", "LeaseGrant"]

#: The kinds of client that take the lease, as ``E_LOCKED`` names them.
CLIENT_KINDS = {
    "mcp": "an MCP session",
    "cli": "an aotui CLI user",
    "json-rpc": "a JSON-RPC connection",
    "python": "a Python client",
}


def _new_token() -> str:
    """A new secret token (144 random bits, URL-safe base64) that never begins with ``-``: a
    holder passes it as ``aotui … --token TOKEN``, and a command line reads a word beginning
    with ``-`` as an option (one token in 64 would otherwise be refused there)."""
    while (token := secrets.token_urlsafe(24)).startswith("-"):
        pass
    return token


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
        self._kind = "python"
        #: Seconds an idle lease outlives its holder's last command (None: a heartbeat lease).
        self._idle_s: float | None = None
        #: When each command running under the lease is answered at the latest.
        self._running: list[float] = []

    @property
    def owner(self) -> str | None:
        """The current holder's name, or ``None`` when free or expired."""
        if self._owner is not None and not self._running and self.clock() >= self._expires:
            self._owner = None
            self._token = ""
        return self._owner

    @property
    def kind(self) -> str | None:
        """The current holder's kind of client (``mcp``, ``cli``, ``json-rpc``, ``python``)."""
        return self._kind if self.owner is not None else None

    def _holds(self, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self._token)

    def frees_in(self) -> float | None:
        """Seconds until input is free at the latest, if the holder does nothing more."""
        if self.owner is None:
            return 0.0
        now = self.clock()
        if self._running:
            return max(self._running) - now + (self._idle_s or self.lease_s)
        return max(self._expires - now, 0.0)

    def _locked(self, holder: str, what: str) -> AotuiError:
        who = f"{holder!r} ({CLIENT_KINDS.get(self._kind, self._kind)})"
        bound = self.frees_in() or 0.0
        if self._idle_s is None:
            when = (
                f" until it releases it; were it to stop heartbeating, input would free within "
                f"{bound:.0f} s"
            )
        elif self._running:
            when = (
                f", running a command now; input frees {self._idle_s:g} s after its commands end, "
                f"within {bound:.0f} s at most"
            )
        else:
            when = f", idle; input frees in {bound:.1f} s unless it sends another command"
        return AotuiError(
            ErrorCode.E_LOCKED,
            f"input is held by {who}{when}; {what}",
            {"owner": holder, "kind": self._kind, "frees_in_s": round(bound, 1)},
        )

    def acquire(
        self,
        owner: str,
        token: str | None = None,
        kind: str = "python",
        idle_s: float | None = None,
    ) -> LeaseGrant:
        """Take the lease for ``owner``, or renew it when ``token`` is the holder's.

        ``kind`` says what client takes it (:data:`CLIENT_KINDS`); with ``idle_s`` the lease is
        held while its holder works and frees ``idle_s`` after its last command (module doc).
        """
        if not owner:
            raise AotuiError(ErrorCode.E_INVALID_CMD, "acquire needs a non-empty owner name")
        if kind not in CLIENT_KINDS:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"acquire: kind {kind!r} is not one of {', '.join(CLIENT_KINDS)}",
            )
        if idle_s is not None and not 0.1 <= idle_s <= self.lease_s:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"acquire: idle_s must be between 0.1 and {self.lease_s:g} (lease_s) seconds",
            )
        holder = self.owner
        if holder is not None and not self._holds(token):
            if holder == owner:
                raise self._locked(
                    holder,
                    "a request using that name without the lease's token does not hold it; "
                    "present the token acquire returned, or retry then",
                )
            raise self._locked(holder, "retry then")
        if holder is None:
            self._token = _new_token()
            self._running = []
        self._owner = owner
        self._kind = kind
        self._idle_s = idle_s
        self._expires = self.clock() + (idle_s if idle_s is not None else self.lease_s)
        return LeaseGrant(self._token, idle_s if idle_s is not None else self.lease_s)

    def begin(self, token: str | None, deadline_s: float) -> float | None:
        """A command presenting ``token`` starts, answered within ``deadline_s``: while it runs
        the lease holds. Returns what to hand :meth:`end` once it is answered (None: not the
        holder's, nothing to end)."""
        if self.owner is None or not self._holds(token):
            return None
        entry = self.clock() + deadline_s
        self._running.append(entry)
        return entry

    def end(self, entry: float | None) -> None:
        """A command :meth:`begin` counted has been answered; an idle lease's wait starts again."""
        if entry is None or entry not in self._running:
            return  # the lease was released and taken again meanwhile
        self._running.remove(entry)
        if self._idle_s is not None and not self._running:
            self._expires = max(self._expires, self.clock() + self._idle_s)

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
        renewal = self._idle_s if self._idle_s is not None else self.lease_s
        self._expires = max(self._expires, self.clock() + renewal)
        return renewal

    def release(self, token: str | None) -> None:
        """Give the lease up; a token that does not hold it gets ``E_LOCKED``."""
        holder = self.owner
        if holder is None:
            return
        if not self._holds(token):
            raise self._locked(holder, "only the holder's token releases it")
        self._owner = None
        self._token = ""
        self._running = []

    def check(self, token: str | None) -> None:
        """Allow an execute presenting ``token``: the holder's, or anything while nobody holds."""
        holder = self.owner
        if holder is not None and not self._holds(token):
            what = "this request presented a wrong lease token" if token else "no lease token"
            raise self._locked(
                holder, f"{what} was presented; retry then, or acquire it and present its token"
            )
