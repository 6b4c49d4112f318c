"""Sessions: which snapshot each reader last pulled, so its refs resolve against that (CONTRACT §6).

A session is a reader's name: the CLI's ``--session``/``AOTUI_SESSION``, else the input lease's
owner; one per MCP session; one per JSON-RPC connection unless the request names one. An
execute that names no snapshot id resolves ``list_id[i]`` against the last snapshot *its session*
pulled, never against a snapshot another reader pulled since (seed 000's bridge).

The table is bounded: past ``max_sessions`` the session used least recently is forgotten (its
next execute then resolves against the live views, or a pull starts it again).
"""

from __future__ import annotations

import re
from collections import OrderedDict

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["SESSION_NAME", "SessionTable", "check_session_name"]

#: What a session name given by a client may be; ``#`` and ``~`` prefix the names the desktop
#: gives itself (a JSON-RPC connection, a lease owner), so a client cannot take one of them.
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,127}")


def check_session_name(name: object) -> str:
    """``name`` if it is a valid client-given session name; ``E_INVALID_CMD`` otherwise."""
    if not isinstance(name, str) or not SESSION_NAME.fullmatch(name):
        raise AotuiError(
            ErrorCode.E_INVALID_CMD,
            f"session {str(name)[:80]!r} must be 1-128 letters, digits or '_.:@/-', starting "
            f"with a letter or digit (e.g. AOTUI_SESSION=agent-1)",
            {"session": str(name)[:128]},
        )
    return name


class SessionTable:
    """Session name → the snapshot id it last pulled, least recently used first out."""

    def __init__(self, max_sessions: int = 1024) -> None:
        self.max_sessions = max_sessions
        self._last: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last)

    def pulled(self, session: str, snapshot_id: str) -> str | None:
        """Record that ``session`` pulled ``snapshot_id``; returns the id it held before."""
        previous = self._last.pop(session, None)
        self._last[session] = snapshot_id
        while len(self._last) > self.max_sessions:
            self._last.popitem(last=False)
        return previous

    def last(self, session: str) -> str | None:
        """The snapshot id ``session`` pulled last, or ``None`` when it has not (or was dropped)."""
        snapshot_id = self._last.get(session)
        if snapshot_id is not None:
            self._last.move_to_end(session)
        return snapshot_id

    def forget(self, session: str) -> str | None:
        """End ``session`` (a closed connection); returns the id it held, to release."""
        return self._last.pop(session, None)
