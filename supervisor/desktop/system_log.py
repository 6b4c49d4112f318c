"""System Logs with a fair share per source, so one app cannot evict the others' reports.

A plain bounded deque lets an app that logs at its admitted rate push every other app's crash
report out within seconds. Here each entry has an owner — ``None`` for the desktop's own lines,
an ``app_N`` for the supervisor's reports about that app, ``app_N:said`` for what the app itself
logged — and no app owner keeps more than :attr:`SystemLog.share`; when the log is full, the
oldest entry of the owner holding the most entries goes. A noisy app thus only ever evicts its
own lines, and what it said never evicts what the supervisor reported about it. The report that an
app's lines were dropped (over its rate) has an owner of its own, ``app_N:dropped``, holding one
entry: the newest report replaces the last, so the flood it reports on cannot push it out.

An entry is made safe once, when it is added: cut to :data:`RAW_CHARS` and passed through the
snapshot's log sanitizer, so what a pull renders is bounded whatever a worker sent (a raw log frame
may be megabytes long; sanitized again on every pull, ten of them made each snapshot take a second).

Every entry then starts with its source, written by the desktop after the sanitizer:
:data:`DESKTOP_SOURCE` for the desktop's own lines (its reports about apps included), ``app_N
says:`` for what an app logged. An app's text is one line that follows its own source, so it can
never produce a line that starts as the desktop's: an app named and logging exactly like a
confirmation request ("Bank (app_1) asks the user to confirm transfer as C1: aotui confirm C1 …")
shows as ``app_3 says: Bank (app_1) asks …``, never as the desktop's line.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from aotui.supervisor.desktop.snapshot import log_text

__all__ = ["DESKTOP_SOURCE", "RAW_CHARS", "SystemLog", "dropped_by", "said_by"]

#: Characters of an entry's text that are sanitized and kept (System Logs show at most 500).
RAW_CHARS = 2000
#: What starts each line the desktop itself writes (an app's lines start with ``app_N says:``).
DESKTOP_SOURCE = "desktop:"
_DROPPED = ":dropped"
_SAID = ":said"


def said_by(app_id: str) -> str:
    """The owner of the lines an app logged itself (as opposed to reports about it)."""
    return f"{app_id}{_SAID}"


def dropped_by(app_id: str) -> str:
    """The owner of the report that an app's lines were dropped (one entry, the newest)."""
    return f"{app_id}{_DROPPED}"


def _entry_text(text: str, owner: str | None) -> str:
    """``text`` as System Logs show it, after its source, at a cost bounded by :data:`RAW_CHARS`."""
    if len(text) > RAW_CHARS:
        text = text[:RAW_CHARS] + "…"
    if owner is not None and owner.endswith(_SAID):
        source = f"{owner.removesuffix(_SAID)} says:"  # an app_N: the supervisor's, not the app's
        return log_text(f"{source} {text}")  # the source is plain words: sanitizing keeps it
    # The desktop's own line: its app parts were sanitized as it was composed, its hints stay.
    return log_text(f"{DESKTOP_SOURCE} {text}", hints=True)


class SystemLog:
    """A bounded log of ``(timestamp, text)`` entries, iterated oldest first."""

    def __init__(self, capacity: int, share: int | None = None) -> None:
        self.capacity = max(capacity, 1)
        #: Most entries one owner may hold.
        self.share = share if share is not None else max(self.capacity // 5, 2)
        self._owners: dict[str | None, deque[tuple[int, float, str]]] = {}
        self._seq = itertools.count()
        self._size = 0
        self._rendered: tuple[Callable[..., str], str] | None = None
        #: Times :meth:`rendered` rendered (not reused): what a test asks to see the reuse.
        self.renders = 0

    def add(self, timestamp: float, text: str, owner: str | None = None) -> None:
        """Append an entry for ``owner``, evicting by share and then by size."""
        self._rendered = None
        lines = self._owners.setdefault(owner, deque())
        lines.append((next(self._seq), timestamp, _entry_text(text, owner)))
        self._size += 1
        share = 1 if owner is not None and owner.endswith(_DROPPED) else self.share
        if owner is not None and len(lines) > share:
            lines.popleft()
            self._size -= 1
        while self._size > self.capacity:
            # The owner holding the most entries gives up its oldest (ties: the older entry).
            fullest = max(self._owners.values(), key=lambda d: (len(d), -d[0][0] if d else 0))
            fullest.popleft()
            self._size -= 1

    def append(self, entry: tuple[float, str]) -> None:
        """Add a desktop line (the ``deque`` interface)."""
        self.add(entry[0], entry[1])

    def rendered(self, render: Callable[[Iterable[tuple[float, str]]], str]) -> str:
        """``render(self)``, kept until an entry is added: a pull renders the view once a change."""
        if self._rendered is None or self._rendered[0] is not render:
            self._rendered = (render, render(self))
            self.renders += 1
        return self._rendered[1]

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[tuple[float, str]]:
        entries = sorted(entry for lines in self._owners.values() for entry in lines)
        return iter([(timestamp, text) for _seq, timestamp, text in entries])
