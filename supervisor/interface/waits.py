"""Wait-for (seed 002): block until something happens on the desktop, or ``E_TIMEOUT``.

One condition a call: a signal ``reason`` (a change with that reason after the call began),
``text`` appearing in (or, with ``gone``, disappearing from) an app's shown views, or the desktop
being quiet (no change at all) for ``quiet_ms``. Conditions are checked on every change the
desktop reports, before the signal throttle, so a wait answers within milliseconds.

Waits are budgeted per client: a process on ``rpc.sock`` (its pid), a connection on the control
socket (its ZeroMQ identity). One client runs at most :data:`WAITS_PER_CLIENT` at once, the
desktop :data:`MAX_WAITS`; when those are all taken, a client holding fewer than the biggest
holder (by two or more) still gets its wait: the biggest holder's oldest wait is ended with
``E_RATE_LIMITED`` to make room, so clients that spread their waits over many connections cannot
keep everyone else waiting.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from aotui.protocol.api import SignalReason, WaitParams
from aotui.protocol.errors import AotuiError, ErrorCode

if TYPE_CHECKING:
    from aotui.supervisor.server.process import Supervisor

__all__ = ["DEFAULT_TIMEOUT_MS", "MAX_TIMEOUT_MS", "MAX_WAITS", "WAITS_PER_CLIENT", "DesktopWaits"]

DEFAULT_TIMEOUT_MS = 10_000
MAX_TIMEOUT_MS = 600_000
#: Waits running at once on one desktop.
MAX_WAITS = 64
#: Waits running at once for one client (a process on rpc.sock, a control socket connection).
WAITS_PER_CLIENT = 8


class DesktopWaits:
    """The ``wait_for`` method of one desktop; at most ``max_waiters`` waits at once, and
    ``per_client`` of one client."""

    def __init__(
        self,
        supervisor: Supervisor,
        max_waiters: int = MAX_WAITS,
        per_client: int = WAITS_PER_CLIENT,
    ) -> None:
        self.supervisor = supervisor
        self.max_waiters = max_waiters
        self.per_client = per_client
        self.last_change = time.monotonic()
        self._waiters: set[_Waiter] = set()
        supervisor.change_listeners.append(self.changed)

    def changed(self, reason: SignalReason) -> None:
        """A change on the desktop: every waiter looks at its condition again."""
        self.last_change = time.monotonic()
        for waiter in self._waiters:
            waiter.reasons.add(reason)
            waiter.wake.set()

    async def wait_for(self, call: WaitParams) -> dict[str, Any]:
        """Wait until the condition of ``call`` holds; ``E_TIMEOUT`` past ``timeout_ms``."""
        timeout_ms = DEFAULT_TIMEOUT_MS if call.timeout_ms is None else call.timeout_ms
        params = call.wire()
        chosen = [name for name in ("reason", "text", "quiet_ms") if params.get(name) is not None]
        if len(chosen) != 1:
            raise _invalid(
                "wait_for needs exactly one of reason, text (with app) or quiet_ms; "
                f"got {', '.join(chosen) or 'none'}"
            )
        check = self._condition(chosen[0], params)
        waiter = _Waiter(call.peer or "")
        self._admit(waiter)
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        try:
            while True:
                waiter.wake.clear()
                if waiter.ended is not None:
                    raise waiter.ended
                found, pause = check(waiter)
                if found is not None:
                    waited = round((time.monotonic() - started) * 1000)
                    return {"until": chosen[0], **found, "waited_ms": waited}
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AotuiError(
                        ErrorCode.E_TIMEOUT,
                        f"waited {timeout_ms} ms for {_describe(chosen[0], params)}; it did not "
                        f"happen. Pull a snapshot to see the desktop, or wait longer.",
                        {"until": chosen[0], "timeout_ms": timeout_ms},
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiter.wake.wait(), min(left, pause))
        finally:
            self._waiters.discard(waiter)

    def _admit(self, waiter: _Waiter) -> None:
        """Count ``waiter`` in, within its client's budget and the desktop's (making room)."""
        held = Counter(running.client for running in self._waiters)
        mine = held[waiter.client]
        who = _client_name(waiter.client)
        if mine >= self.per_client:
            raise AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"{who} already has {mine} waits running (at most {self.per_client} per client, "
                f"{self.max_waiters} on the desktop); wait for one to end and retry",
                {"budget": "waits_per_client", "limit": self.per_client},
            )
        if len(self._waiters) >= self.max_waiters:
            most = max(held.values())
            if mine + 1 >= most:
                raise AotuiError(
                    ErrorCode.E_RATE_LIMITED,
                    f"{len(self._waiters)} waits are running on this desktop (at most "
                    f"{self.max_waiters}; {self.per_client} per client) and {who} holds "
                    f"{mine}; wait for one to end and retry",
                    {"budget": "waits", "limit": self.max_waiters},
                )
            # The biggest holder's oldest wait makes room: its client keeps most - 1.
            victim = min(
                (running for running in self._waiters if held[running.client] == most),
                key=lambda running: running.started,
            )
            victim.ended = AotuiError(
                ErrorCode.E_RATE_LIMITED,
                f"this wait was ended to make room for another client's: {self.max_waiters} "
                f"waits were running on the desktop and {_client_name(victim.client)} held the "
                f"most ({most}, at most {self.per_client}); wait again, or with fewer at once",
                {"budget": "waits", "limit": self.max_waiters},
            )
            self._waiters.discard(victim)
            victim.wake.set()
        self._waiters.add(waiter)

    def _condition(self, kind: str, params: dict[str, Any]) -> Any:
        if kind == "reason":
            reason = _text(params, "reason")

            def signalled(waiter: _Waiter) -> tuple[dict[str, Any] | None, float]:
                return ({"reason": reason} if reason in waiter.reasons else None), 3600.0

            return signalled
        if kind == "quiet_ms":
            quiet_ms = _positive(params, "quiet_ms", 0)

            def quiet(waiter: _Waiter) -> tuple[dict[str, Any] | None, float]:
                still = time.monotonic() - self.last_change
                if still * 1000 >= quiet_ms:
                    return {"quiet_ms": round(still * 1000)}, 0.0
                return None, quiet_ms / 1000 - still

            return quiet
        text = _text(params, "text")
        app = self.supervisor.desktop.app(_text(params, "app"))
        view = params.get("view")
        gone = bool(params.get("gone"))

        def appears(waiter: _Waiter) -> tuple[dict[str, Any] | None, float]:
            shown = any(
                text in shown_view.markdown
                for view_id, shown_view in app.views.shown()
                if view is None or view_id == view
            )
            if shown != gone:
                return {"text": text, "app": app.app_id, "gone": gone}, 0.0
            return None, 3600.0

        return appears


class _Waiter:
    """One running wait: woken on every change, with the reasons seen since it began."""

    def __init__(self, client: str) -> None:
        #: Whose wait this is (the ``peer`` the face says: ``pid:N``, ``control:HEX``).
        self.client = client
        self.started = time.monotonic()
        self.wake = asyncio.Event()
        self.reasons: set[str] = set()
        #: Why the wait was ended before its condition or timeout (to make room).
        self.ended: AotuiError | None = None


def _client_name(client: str) -> str:
    """A client as its error says it."""
    kind, _, name = client.partition(":")
    if kind == "pid":
        return f"this client (process {name} on rpc.sock)"
    if kind == "control":
        return f"this client (control socket connection {name[:16]})"
    return "this client"


def _invalid(message: str) -> AotuiError:
    return AotuiError(ErrorCode.E_INVALID_CMD, message)


def _text(params: dict[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise _invalid(f"wait_for needs {name!r} as a non-empty string")
    return value


def _positive(params: dict[str, Any], name: str, default: int) -> int:
    value = params.get(name)
    if value is None:
        return default
    if type(value) is not int or value < 0:
        raise _invalid(f"{name} must be a non-negative integer of milliseconds, not {value!r}")
    return value


def _describe(kind: str, params: dict[str, Any]) -> str:
    if kind == "reason":
        return f"a {params['reason']} signal"
    if kind == "quiet_ms":
        return f"{params['quiet_ms']} ms without a change"
    verb = "to disappear from" if params.get("gone") else "to appear in"
    return f"{params['text']!r} {verb} {params['app']}"
