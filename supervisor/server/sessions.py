"""Sessions: which snapshot each reader last pulled, so its refs resolve against that (CONTRACT §6).

A session is a reader's name: the CLI's ``--session``/``AOTUI_SESSION``, else the input lease's
owner; one per MCP session; one per JSON-RPC connection unless the request names one. An
execute that names no snapshot id resolves ``list_id[i]`` against the last snapshot *its session*
pulled, never against a snapshot another reader pulled since (seed 000's bridge).

Each session is charged to the client that pulled it last (a control-socket connection, a
JSON-RPC connection): a client holds at most ``per_client`` sessions, and past that its own
least recently used one is forgotten, never another client's. The table as a whole holds at
most ``max_sessions``; past it, the client holding the most gives up its least recently used
one (many clients of one session each: the least recently used of all).

A forgotten session is remembered as gone (a bit set in :attr:`SessionTable.gone`, a Bloom
filter of a fixed size): its next execute is ``E_STALE_STATE`` (pull a new snapshot), never
resolved against the views as they are now. A name the filter takes for gone without being so
is told the same, which a pull mends; a name never seen resolves against the live views.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections import OrderedDict

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["MAX_SESSIONS", "PER_CLIENT", "SESSION_NAME", "SessionTable", "check_session_name"]

#: What a session name given by a client may be; ``#`` and ``~`` prefix the names the desktop
#: gives itself (a JSON-RPC connection, a lease owner), so a client cannot take one of them.
SESSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,127}")
#: Sessions the desktop keeps at once.
MAX_SESSIONS = 1024
#: Sessions one client (one connection) keeps at once; its own oldest go past it.
PER_CLIENT = 128
#: Bits of the filter that remembers forgotten sessions (128 KiB; two bits per name).
GONE_BITS = 1 << 20


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
    """Session name → the snapshot id it last pulled, each charged to the client that pulled it."""

    def __init__(
        self,
        max_sessions: int = MAX_SESSIONS,
        per_client: int = PER_CLIENT,
        gone_bits: int = GONE_BITS,
    ) -> None:
        self.max_sessions = max(1, max_sessions)
        self.per_client = max(1, per_client)
        #: Session → (snapshot id, client), least recently used first.
        self._last: OrderedDict[str, tuple[str, str]] = OrderedDict()
        #: Client → its sessions, least recently used first.
        self._clients: dict[str, OrderedDict[str, None]] = {}
        #: Sessions forgotten by eviction (a Bloom filter: no false "not gone").
        self.gone = bytearray(max(1, gone_bits // 8))
        self._key = secrets.token_bytes(16)  # a peer cannot aim at another name's bits

    def __len__(self) -> int:
        return len(self._last)

    def held_by(self, client: str) -> int:
        """How many sessions ``client`` holds."""
        return len(self._clients.get(client, ()))

    def pulled(self, session: str, snapshot_id: str, client: str = "") -> list[str]:
        """Record that ``client`` pulled ``snapshot_id`` as ``session``.

        Returns the snapshot ids no session holds any more (the one ``session`` held before,
        those of the sessions this pull pushed out), for the caller to release.
        """
        released: list[str] = []
        before = self._last.pop(session, None)
        if before is not None:
            released.append(before[0])
            self._unlink(session, before[1])
        self._last[session] = (snapshot_id, client)
        mine = self._clients.setdefault(client, OrderedDict())
        mine[session] = None
        while len(mine) > self.per_client:
            released.append(self._evict(next(iter(mine))))
        while len(self._last) > self.max_sessions:
            released.append(self._evict(self._largest_clients_oldest()))
        return released

    def last(self, session: str) -> str | None:
        """The snapshot id ``session`` pulled last, or ``None`` when it has not (or was dropped)."""
        entry = self._last.get(session)
        if entry is None:
            return None
        self._last.move_to_end(session)
        self._clients[entry[1]].move_to_end(session)
        return entry[0]

    def lost(self, session: str) -> bool:
        """Whether ``session`` holds no snapshot because the table forgot it (see the module)."""
        return session not in self._last and all(
            self.gone[bit >> 3] & (1 << (bit & 7)) for bit in self._bits(session)
        )

    def forget(self, session: str) -> str | None:
        """End ``session`` (a closed connection); returns the id it held, to release."""
        entry = self._last.pop(session, None)
        if entry is None:
            return None
        self._unlink(session, entry[1])
        return entry[0]

    def _evict(self, session: str) -> str:
        """Forget ``session``, remembering it as gone; returns the id it held."""
        snapshot_id, client = self._last.pop(session)
        self._unlink(session, client)
        for bit in self._bits(session):
            self.gone[bit >> 3] |= 1 << (bit & 7)
        return snapshot_id

    def _largest_clients_oldest(self) -> str:
        """The least recently used session of the client holding the most."""
        most = max(len(sessions) for sessions in self._clients.values())
        sizes = {client: len(sessions) for client, sessions in self._clients.items()}
        return next(s for s, (_, client) in self._last.items() if sizes[client] == most)

    def _unlink(self, session: str, client: str) -> None:
        sessions = self._clients[client]
        del sessions[session]
        if not sessions:
            del self._clients[client]

    def _bits(self, session: str) -> tuple[int, int]:
        digest = hashlib.blake2b(session.encode("utf-8", "surrogatepass"), key=self._key).digest()
        size = len(self.gone) * 8
        return int.from_bytes(digest[:8], "big") % size, int.from_bytes(digest[8:16], "big") % size
