"""The snapshot registry: each pulled snapshot's ref table, by snapshot id (CONTRACT §6).

Entries are reference-counted — :meth:`SnapshotRegistry.add` gives the puller one reference,
:meth:`~SnapshotRegistry.retain` and :meth:`~SnapshotRegistry.release` move it — and expire after a
hard TTL whatever their count. Past ``max_entries`` the oldest entries go first, unreferenced ones
before referenced ones. An unknown or expired id is ``E_STALE_STATE``.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from aotui.protocol.errors import AotuiError, ErrorCode

__all__ = ["Clock", "SnapshotRegistry"]

Clock = Callable[[], float]
RefTable = TypeVar("RefTable")


@dataclass
class _Entry(Generic[RefTable]):
    table: RefTable
    created: float
    refs: int


class SnapshotRegistry(Generic[RefTable]):
    """Snapshot id → ref table, with refcounts, a hard TTL and a size bound."""

    def __init__(
        self,
        ttl_s: float = 600.0,
        max_entries: int = 256,
        clock: Clock = time.monotonic,
        first_id: int = 1,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: OrderedDict[str, _Entry[RefTable]] = OrderedDict()
        self._ids = itertools.count(first_id)
        self.latest: str | None = None

    def __len__(self) -> int:
        self.expire()
        return len(self._entries)

    def add(self, table: RefTable) -> str:
        """Record a new snapshot's ref table; returns its id (``T17``) with one reference."""
        self.expire()
        snapshot_id = f"T{next(self._ids)}"
        self._entries[snapshot_id] = _Entry(table, self.clock(), 1)
        self.latest = snapshot_id
        while len(self._entries) > self.max_entries:
            victim = next((k for k, e in self._entries.items() if e.refs <= 0), None)
            del self._entries[victim if victim is not None else next(iter(self._entries))]
        return snapshot_id

    def get(self, snapshot_id: str) -> RefTable:
        """The ref table of ``snapshot_id``; ``E_STALE_STATE`` when unknown or expired."""
        return self._live(snapshot_id).table

    def retain(self, snapshot_id: str) -> None:
        """Take one more reference."""
        self._live(snapshot_id).refs += 1

    def release(self, snapshot_id: str) -> None:
        """Drop one reference; at zero the entry may be evicted (it still expires by TTL)."""
        entry = self._entries.get(snapshot_id)
        if entry is not None:
            entry.refs -= 1
            if entry.refs <= 0 and snapshot_id != self.latest:
                del self._entries[snapshot_id]

    def expire(self) -> None:
        """Drop every entry past its TTL."""
        deadline = self.clock() - self.ttl_s
        while self._entries:
            oldest_id, oldest = next(iter(self._entries.items()))
            if oldest.created > deadline:
                break
            del self._entries[oldest_id]

    def _live(self, snapshot_id: str) -> _Entry[RefTable]:
        self.expire()
        entry = self._entries.get(snapshot_id)
        if entry is None:
            raise AotuiError(
                ErrorCode.E_STALE_STATE,
                f"snapshot {snapshot_id} is unknown or expired; pull a new snapshot and retry",
                {"snapshot_id": snapshot_id},
            )
        return entry
