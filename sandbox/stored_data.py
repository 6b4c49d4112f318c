"""An app's stored data: a mapping that records its own writes (``App.stored``).

An app keeps what must survive a restart in ``self.stored`` — ``self.stored[key] = value``,
``del self.stored[key]`` — and nothing else: the worker sends the desktop the keys written since
the last acknowledged operation, exactly as written, with that operation's acknowledgement, and a
restarted app finds them there again. Nothing to bump, name or serialize by hand, so no forgotten
line can lose an acknowledged effect.

Values are plain data (``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, lists and
``str``-keyed dicts; a tuple is stored as a list). A write stores a copy and a read returns one:
changing what a read returned changes nothing until it is written back, so what a view shows is
always what is stored. ``None`` cannot be a key's value (it is how a deleted key is stored).

Reads are recorded while a view renders: a view that read some of the stored data is rendered
again only when one of the keys it read was written, or (if it iterated or counted the keys) when
a key came or went (:meth:`View.inputs`).
"""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Iterator, MutableMapping
from typing import Any

__all__ = ["StoredData"]

_SCALARS = frozenset({bool, int, float, str, bytes, type(None)})
#: The deepest nesting a stored value may have (the wire carries 32 levels, some of them its own).
MAX_DEPTH = 24


def _plain(value: Any, depth: int, where: str) -> Any:
    """A private copy of ``value`` as plain data; ``TypeError`` naming what cannot be stored."""
    kind = type(value)
    if kind in _SCALARS:
        return value
    if depth > MAX_DEPTH:
        raise TypeError(f"{where} is nested deeper than {MAX_DEPTH} levels: flatten it")
    if kind is dict:
        copied = {}
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"{where} has the key {key!r:.40}: stored dicts have str keys")
            copied[key] = item if type(item) in _SCALARS else _plain(item, depth + 1, where)
        return copied
    if kind is list or kind is tuple:
        return [
            item if type(item) in _SCALARS else _plain(item, depth + 1, where) for item in value
        ]
    raise TypeError(
        f"{where} holds a {kind.__name__}, which cannot be stored: store None, bool, int, float, "
        f"str, bytes, and lists and str-keyed dicts of them"
    )


def _copied(value: Any) -> Any:
    """A copy of stored plain data that its reader may change freely."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _SCALARS else _copied(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _SCALARS else _copied(v) for v in value]
    return value


class StoredData(MutableMapping[str, Any]):
    """``key → plain data``, persisted by the worker as written (see the module docstring)."""

    def __init__(self, written: set[str] | None = None) -> None:
        self._values: dict[str, Any] = {}
        #: Each key's version: a fresh number at every write or delete of it.
        self._versions: dict[str, int] = {}
        self._clock = itertools.count(1)
        #: Changes when a key comes or goes (what iterating or counting the keys depends on).
        self._shape = 0
        #: The keys written or deleted since the worker last sent them (shared with the App).
        self.written: set[str] = set() if written is None else written
        #: Every write and delete counts: the worker compares it around a handler.
        self.writes = 0
        #: Whether the app has written or been restored any stored data.
        self.used = False
        self._reads: set[str] | None = None
        self._shape_read = False

    # --- the mapping ----------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if self._reads is not None:
            self._reads.add(key)
        return _copied(self._values[key])

    def __contains__(self, key: object) -> bool:
        if self._reads is not None and type(key) is str:
            self._reads.add(key)
        return key in self._values

    def __iter__(self) -> Iterator[str]:
        self._shape_read = True
        return iter(self._values)

    def __reversed__(self) -> Iterator[str]:
        self._shape_read = True
        return reversed(self._values)

    def __len__(self) -> int:
        self._shape_read = True
        return len(self._values)

    def __setitem__(self, key: str, value: Any) -> None:
        if type(key) is not str or not key:
            raise TypeError(f"a stored key is a non-empty str, got {key!r:.40}")
        if value is None:
            raise TypeError(f"stored[{key!r}] = None: None marks a deleted key; use del instead")
        copied = _plain(value, 1, f"stored[{key!r:.60}]")
        if key not in self._values:
            self._shape += 1
        self._values[key] = copied
        self._wrote(key)

    def __delitem__(self, key: str) -> None:
        del self._values[key]
        self._shape += 1
        self._wrote(key)

    def __repr__(self) -> str:
        return f"<StoredData: {len(self._values)} keys>"

    def _wrote(self, key: str) -> None:
        self._versions[key] = next(self._clock)
        self.written.add(key)
        self.writes += 1
        self.used = True

    # --- used by the SDK and the worker ---------------------------------------------------------

    def load(self, parts: dict[str, Any]) -> None:
        """Take the data stored before a restart (the desktop's own copy: nothing is written)."""
        self._values = {key: value for key, value in parts.items() if value is not None}
        self._versions = dict.fromkeys(self._values, next(self._clock))
        self._shape += 1
        self.written.clear()
        self.used = True

    def whole(self) -> dict[str, Any]:
        """Every key and its value, as stored (not to be changed: it is the store's own)."""
        return dict(self._values)

    def part(self, key: str) -> Any:
        """One key's value as stored, ``None`` when it is gone (what the desktop stores)."""
        return self._values.get(key)

    def begin_reads(self) -> None:
        """Start recording the keys read (a view begins to render)."""
        self._reads = set()
        self._shape_read = False

    def end_reads(self) -> tuple[frozenset[str], bool]:
        """Stop recording: the keys read, and whether the keys were iterated or counted."""
        reads, shape = frozenset(self._reads or ()), self._shape_read
        self._reads = None
        self._shape_read = False
        return reads, shape

    def versions(self, reads: frozenset[str], shape: bool) -> Hashable:
        """A value that changes when a key in ``reads`` is written, or (``shape``) one comes or
        goes."""
        get = self._versions.get
        return (self._shape if shape else None, tuple(get(key, 0) for key in reads))
