"""The snapshot registry: each pulled snapshot's ref table, by snapshot id (CONTRACT §6).

Entries are reference-counted — :meth:`SnapshotRegistry.add` gives the puller one reference,
:meth:`~SnapshotRegistry.retain` pins the entry and :meth:`~SnapshotRegistry.release` drops a pin
or the puller's reference — and expire after a hard TTL whatever their count. Past
``max_entries`` the oldest entries go first, unreferenced ones before referenced ones; a retained
(pinned) entry is never evicted within its TTL: past ``max_entries // 2`` pinned entries a
retain is refused instead. Releasing an unknown or expired id is ``E_STALE_STATE``, like using
one.

Ids never repeat, also across restarts: with a ``reserve`` function (the store's durable
reservation) ids are handed out only from blocks reserved before use, and a new block is
reserved when one runs out.

Memory follows the desktop's content, not its history (:class:`RefTableSharing`): an entry keeps
of each view only what resolves refs and describes operations (never its Markdown), and what did
not change between pulls — a whole view, its ref dicts, one item's value — is one object shared
by every entry that saw it.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.supervisor.desktop.view_tree import ViewRecord

__all__ = ["Clock", "RefTableSharing", "SnapshotRegistry"]

Clock = Callable[[], float]
RefTable = TypeVar("RefTable")


@dataclass
class _Entry(Generic[RefTable]):
    table: RefTable
    created: float
    #: The puller's reference (1 until released).
    refs: int
    #: Retains; a pinned entry outlives the size bound (not the TTL).
    pins: int = 0


#: (app id, view id) → the view the agent saw (``desktop.snapshot.RefTable``).
ViewRefs = dict[tuple[str, str], ViewRecord]


class RefTableSharing:
    """Makes each pull's ref table compact, sharing with earlier pulls what did not change.

    Called once per pull (:meth:`SnapshotRegistry.add`). A view whose record is the object it
    was at the previous pull costs nothing new; a changed one keeps its ref dicts (and each
    unchanged item's value) from the previous version when they are equal, so 256 pulls of a
    list that gains one item hold that list about once.
    """

    def __init__(self) -> None:
        #: Per view: the record last seen and the compact copy made of it.
        self._latest: dict[tuple[str, str], tuple[ViewRecord, ViewRecord]] = {}
        self._last_table: ViewRefs = {}

    def __call__(self, table: ViewRefs) -> ViewRefs:
        compact: ViewRefs = {}
        for where, view in table.items():
            known = self._latest.get(where)
            if known is not None and known[0] is view:
                compact[where] = known[1]
                continue
            slim = _slim(view, None if known is None else known[1])
            self._latest[where] = (view, slim)
            compact[where] = slim
        if len(self._latest) > 4 * len(table) + 64:  # forget views long gone
            self._latest = {where: self._latest[where] for where in table}
        last = self._last_table
        if len(last) == len(compact) and all(last.get(k) is v for k, v in compact.items()):
            return last  # an unchanged desktop: every entry shares one table
        self._last_table = compact
        return compact


def _slim(view: ViewRecord, previous: ViewRecord | None) -> ViewRecord:
    """``view`` without its Markdown and links, reusing ``previous``'s equal parts."""
    if previous is None:
        return dataclasses.replace(view, markdown="", links=[])
    operations = previous.operations if previous.operations == view.operations else view.operations
    return dataclasses.replace(
        view,
        markdown="",
        links=[],
        refs=_shared(view.refs, previous.refs),
        keys=_shared(view.keys, previous.keys),
        ref_types=_shared(view.ref_types, previous.ref_types),
        operations=operations,
    )


def _shared(new: dict[str, Any], old: dict[str, Any]) -> dict[str, Any]:
    """``new``, or ``old`` when equal; else ``new`` with the values ``old`` has equal shared."""
    if new == old:
        return old
    result = {}
    for key, value in new.items():
        before = old.get(key, _MISSING)
        result[key] = before if before is not _MISSING and before == value else value
    return result


_MISSING: Any = object()


class SnapshotRegistry(Generic[RefTable]):
    """Snapshot id → ref table, with refcounts, a hard TTL and a size bound."""

    def __init__(
        self,
        ttl_s: float = 600.0,
        max_entries: int = 256,
        clock: Clock = time.monotonic,
        first_id: int = 1,
        reserve: Callable[[int], int] | None = None,
        block: int = 100_000,
        compact: Callable[[RefTable], RefTable] | None = None,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.max_pinned = max(1, max_entries // 2)
        self.clock = clock
        self._entries: OrderedDict[str, _Entry[RefTable]] = OrderedDict()
        self._reserve = reserve
        self._block = block
        self._next = first_id
        #: The last id of the reserved block (``None``: no reservation needed).
        self._end: int | None = first_id - 1 if reserve is not None else None
        self.latest: str | None = None
        #: Applied to each table before it is kept (a :class:`RefTableSharing`, for the desktop).
        self._compact = compact

    def __len__(self) -> int:
        self.expire()
        return len(self._entries)

    def reserve_ids(self) -> None:
        """Reserve the next block of ids now (raises what ``reserve`` raises)."""
        if self._reserve is not None:
            self._next = self._reserve(self._block)
            self._end = self._next + self._block - 1

    def _new_id(self) -> str:
        if self._end is not None and self._next > self._end:
            self.reserve_ids()  # durable before any id of the block is handed out
        number, self._next = self._next, self._next + 1
        return f"T{number}"

    def add(self, table: RefTable) -> str:
        """Record a new snapshot's ref table; returns its id (``T17``) with one reference."""
        self.expire()
        snapshot_id = self._new_id()
        if self._compact is not None:
            table = self._compact(table)
        self._entries[snapshot_id] = _Entry(table, self.clock(), 1)
        self.latest = snapshot_id
        while len(self._entries) > self.max_entries:
            unpinned = [k for k, e in self._entries.items() if e.pins <= 0 and k != snapshot_id]
            if not unpinned:
                break
            victim = next((k for k in unpinned if self._entries[k].refs <= 0), unpinned[0])
            del self._entries[victim]
        return snapshot_id

    def get(self, snapshot_id: str) -> RefTable:
        """The ref table of ``snapshot_id``; ``E_STALE_STATE`` when unknown or expired."""
        return self._live(snapshot_id).table

    def retain(self, snapshot_id: str) -> None:
        """Pin the entry (one more reference); refused past ``max_pinned`` pinned entries."""
        entry = self._live(snapshot_id)
        if entry.pins <= 0:
            pinned = sum(1 for e in self._entries.values() if e.pins > 0)
            if pinned >= self.max_pinned:
                raise AotuiError(
                    ErrorCode.E_RATE_LIMITED,
                    f"{pinned} snapshots are retained already (at most {self.max_pinned}); "
                    f"release one before retaining {snapshot_id}",
                    {"snapshot_id": snapshot_id},
                )
        entry.pins += 1

    def release(self, snapshot_id: str) -> None:
        """Drop a pin, else the puller's reference; ``E_STALE_STATE`` for an unknown id."""
        entry = self._live(snapshot_id)
        if entry.pins > 0:
            entry.pins -= 1
        elif entry.refs > 0:
            entry.refs -= 1
        else:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"snapshot {snapshot_id} holds no reference to release",
                {"snapshot_id": snapshot_id},
            )
        if entry.refs <= 0 and entry.pins <= 0 and snapshot_id != self.latest:
            del self._entries[snapshot_id]

    def discard(self, snapshot_id: str) -> None:
        """Release the puller's previous snapshot if it is still known (a pull's ``release``)."""
        entry = self._entries.get(snapshot_id)
        if entry is not None and (entry.pins > 0 or entry.refs > 0):
            self.release(snapshot_id)

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
