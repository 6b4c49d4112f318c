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
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator

from aotui.supervisor.desktop.snapshot import log_text

__all__ = ["RAW_CHARS", "SystemLog", "dropped_by", "said_by"]

#: Characters of an entry's text that are sanitized and kept (System Logs show at most 500).
RAW_CHARS = 2000
_DROPPED = ":dropped"


def said_by(app_id: str) -> str:
    """The owner of the lines an app logged itself (as opposed to reports about it)."""
    return f"{app_id}:said"


def dropped_by(app_id: str) -> str:
    """The owner of the report that an app's lines were dropped (one entry, the newest)."""
    return f"{app_id}{_DROPPED}"


def _entry_text(text: str) -> str:
    """``text`` as System Logs show it, at a cost bounded by :data:`RAW_CHARS`."""
    if len(text) > RAW_CHARS:
        text = text[:RAW_CHARS] + "…"
    return log_text(text)


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
        lines.append((next(self._seq), timestamp, _entry_text(text)))
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
