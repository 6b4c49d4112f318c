"""Rendered list items kept between renders of one view, so unchanged items cost a lookup.

An item of a semantic list renders to the same Markdown whenever its markup is the same: only
its position (the ``list_id[i]`` in its ref and an ordered list's number) is filled in per render.
:class:`ItemCache` keys each item's rendered parts by its markup (and the heading level it sits
under) and keeps what the last render used, so the cache holds about one view's worth of items.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # render imports this module
    from aotui.sandbox.render import ViewLink

__all__ = ["MAX_ITEMS", "CachedItem", "ItemCache"]

#: Items one render may keep: a view listing more (which the snapshot would cut anyway) renders
#: the rest afresh rather than hold a second copy of a huge list in the app's memory.
MAX_ITEMS = 2000


@dataclass(frozen=True, slots=True)
class CachedItem:
    """One list item rendered, apart from its position."""

    #: The link label, already escaped for Markdown.
    label: str
    #: The item's lines after its first (which holds the marker and the ref).
    lines: list[str]
    #: The parsed ``data-value`` (``None`` when absent).
    value: Any
    #: The child views the item links to, in document order (claimed again at each reuse).
    links: tuple[ViewLink, ...]
    #: The label's link target when it does not depend on the position (the item is itself a
    #: view link); ``None``: the item's own ``type:list_id[i]`` ref.
    target: str | None


class ItemCache:
    """The items one view rendered last time, keyed by their markup; pass it to every render."""

    __slots__ = ("fresh", "hits", "kept", "misses")

    def __init__(self) -> None:
        self.kept: dict[tuple[int, bytes], CachedItem] = {}
        self.fresh: dict[tuple[int, bytes], CachedItem] = {}
        #: Items reused, and items looked up and rendered (what an operation's cost tracks).
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[int, bytes]) -> CachedItem | None:
        """The item rendered from this markup, if the last render (or this one) had it."""
        found = self.kept.get(key) or self.fresh.get(key)
        if found is None:
            self.misses += 1
        else:
            self.hits += 1
            self.fresh[key] = found
        return found

    def put(self, key: tuple[int, bytes], item: CachedItem) -> None:
        """Remember an item rendered in this render (up to :data:`MAX_ITEMS` of them)."""
        if len(self.fresh) < MAX_ITEMS:
            self.fresh[key] = item

    def finish(self) -> None:
        """End a render: keep what it used, forget the rest (a failed render keeps the old)."""
        self.kept, self.fresh = self.fresh, {}

    def abandon(self) -> None:
        """A render failed: keep what the last good render used."""
        self.fresh = {}

    def __len__(self) -> int:
        return len(self.kept)
