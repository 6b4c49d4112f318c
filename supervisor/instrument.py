"""The points where an observer sees, and may bend, what a desktop does.

Modelled on trio's ``Instrument``: the supervisor, the desktop and the HTTP broker call each hook
where they consult it, and this base class's hooks do nothing but the work itself (run the
command, keep the signal, use the fetch), so a desktop without an observer pays one method call
at each point. A chaos run's nemesis (``supervisor/chaos/nemesis.py``) is a subclass, installed
by the product layer when ``aotui chaos run`` started the desktop; nothing in ``server/``,
``desktop/`` or ``workers/`` imports it.

The points, in the order a command meets them:

- :meth:`client_call` — a client's ``exec``, ``execute``, ``say`` or ``confirm`` (any face);
- :meth:`command` — each command of a message, as the desktop runs it;
- :meth:`resolved` — the arguments an operation's refs resolved to;
- :meth:`fetch` — an app's brokered HTTP request, about to be made;
- :meth:`changed` — every change of the desktop, before the signal throttle;
- :meth:`signal` — a signal about to be published (``False`` drops it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aotui.protocol.api import SignalReason
    from aotui.protocol.commands import Command
    from aotui.supervisor.desktop.app_record import AppRecord
    from aotui.supervisor.desktop.snapshot import RefTable

__all__ = ["INSTRUMENTED", "Fetch", "Instrument", "Run"]

#: The client methods :meth:`Instrument.client_call` sees.
INSTRUMENTED = frozenset({"exec", "execute", "say", "confirm"})

Fetch = Callable[..., Any]
Run = Callable[["Command", "RefTable | None", "float | None"], Awaitable[Any]]


class Instrument:
    """The hooks a desktop calls; each does only the work here. Subclass to observe."""

    async def client_call(
        self, method: str, call: Any, handler: Callable[[Any], Awaitable[Any]]
    ) -> Any:
        """A client's ``method`` (one of :data:`INSTRUMENTED`) with its params ``call``."""
        return await handler(call)

    async def command(
        self, command: Command, refs: RefTable | None, deadline: float | None, run: Run
    ) -> Any:
        """One command of a message; ``run`` does it."""
        return await run(command, refs, deadline)

    def resolved(self, command: Command, values: dict[str, Any]) -> None:
        """``command``'s arguments as its refs resolved, about to reach the app."""

    def fetch(self, app: AppRecord, fetch: Fetch) -> Fetch:
        """The fetch that performs ``app``'s next brokered request."""
        return fetch

    def changed(self, reason: SignalReason) -> None:
        """Something on the desktop changed (before the signal throttle)."""

    def signal(self, reason: str, reasons: Sequence[str], apps: Sequence[str]) -> bool:
        """A signal is about to go out; ``False`` drops it."""
        return True
