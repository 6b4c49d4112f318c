"""One app's views as the supervisor keeps them: cached view records, ``view_N`` ids, the tree.

Fragments arrive from the worker already rendered; this module never renders. Each wire
:class:`~protocol.messages.ViewFragment` is converted here, once, into a :class:`ViewRecord`: the
one shape of a rendered view on the supervisor's side (what a snapshot shows, a ref resolves
against, a wait reads and a chaos fault perturbs). Ids are assigned in
level order of the view tree as views are discovered and never change while the app lives, so the
``(view:@key)`` links of a fragment are resolved to ``(view:view_N)`` once, when it arrives.
Fragment text passes :func:`~protocol.structure.sanitize` again here because a compromised worker
can send anything; each view's :class:`SanitizedStrings` remembers what it made of the strings of
the view's current record, so an update that changed one item of a page sanitizes that item's
strings and the Markdown, not the whole page again. What a worker may keep cached here is bounded
(:data:`MAX_FRAGMENTS`, :data:`MAX_FRAGMENT_BYTES`, :data:`MAX_VIEW_IDS` views in the tree at
once): an update past a budget is refused, which kills the worker as a protocol violation. The ids
remembered for views that have left the tree are bounded too (:data:`MAX_VIEW_IDS` in all): past it
the longest-known of them are forgotten, so an app that shows 10,000 notes one page at a time runs
on and a worker naming fresh keys cannot grow the supervisor. Every walk of the tree is iterative:
a worker controls its shape, and a 1,200-deep chain must not exhaust Python's recursion limit.
"""

from __future__ import annotations

import dataclasses
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import ChildLink, FragmentUpdate, OperationSpec, ViewFragment
from aotui.protocol.structure import sanitize

__all__ = [
    "MAX_FRAGMENTS",
    "MAX_FRAGMENT_BYTES",
    "MAX_VIEW_IDS",
    "MEMO_LONGEST",
    "SanitizedStrings",
    "TreeNode",
    "ViewRecord",
    "ViewTree",
    "attribute_text",
]

#: Fragments one app incarnation may keep cached in the supervisor…
MAX_FRAGMENTS = 256
#: …holding at most this many bytes together (each charged the frame that carried it)…
MAX_FRAGMENT_BYTES = 8 << 20
#: …views it may have in its tree at once, and view ids the supervisor remembers for it.
MAX_VIEW_IDS = 4096

#: The longest string a view's :class:`SanitizedStrings` keeps (a longer one is sanitized again).
MEMO_LONGEST = 1000

#: The first line of an open dialog's view: the app's other views are not shown meanwhile.
DIALOG_LINE = (
    "[aotui: this dialog is open: the rest of this app is collapsed and only the operations "
    "below run until it is dismounted (dismount --view {})]\n\n"
)

_LINK = re.compile(r"\(view:@([^)\s]+)\)")


def attribute_text(text: str) -> str:
    """App text safe inside a double-quoted attribute of a structural tag (one line, ≤ 200)."""
    return (
        sanitize(text, limit=200)
        .replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


@dataclass(frozen=True, slots=True)
class ViewRecord:
    """One rendered view as the supervisor keeps it: a worker's fragment, sanitized, its links
    resolved, with the bytes it is charged. Replaced whole when the view changes, never edited."""

    #: The app's stable key for this view instance (``conversation:johnny``).
    key: str
    #: The view's name (sanitized, one line).
    name: str
    #: Key of the view that links to this one, or ``None`` for a root view.
    parent: str | None
    #: Whether the view is mounted (shown with its content) or only listed in the tree.
    mounted: bool
    #: The body as the agent reads it: sanitized, ``(view:@key)`` links resolved to ``view_N``.
    markdown: str
    #: ``list_id[i]`` and entity ids → the recorded ``data-value``.
    refs: dict[str, Any]
    #: ``list_id[i]`` and entity ids → the app's stable key of the item.
    keys: dict[str, str]
    #: ``list_id[i]`` and entity ids → the item or entity type (``message``).
    ref_types: dict[str, str]
    #: The operations the view offers (sanitized).
    operations: list[OperationSpec]
    #: The child views it links to, in document order (labels sanitized).
    links: list[ChildLink]
    #: A dialog: while mounted, the rest of its app waits (CONTRACT §3).
    modal: bool = False
    #: Bytes charged to the app's budget: its Markdown, at least its share of the frame.
    size: int = 0


class SanitizedStrings:
    """What the sanitizer made of one view's strings and links, for its next update to reuse.

    A 50-note page is ~320 short strings (refs, keys, types, link labels and descriptions) and 51
    links, nearly all as the view's last update sent them. Converting an update looks each raw
    string up in what the view's previous record was made from and sanitizes only those not found;
    an entry is keyed by the exact raw text (and its limit), so it is what
    :func:`~protocol.structure.sanitize` returns: the record is the same as sanitizing afresh.
    Each view of each app has its own, holding only the strings of its current record (which
    shares them when sanitizing left a string as it was), so one app's strings never reach
    another's output and the memo is bounded by what the supervisor keeps of the view anyway.
    A string over :data:`MEMO_LONGEST` characters is sanitized every time.
    """

    __slots__ = ("links", "previous_links", "previous_strings", "strings")

    def __init__(self, previous: SanitizedStrings | None = None) -> None:
        #: Keyed by the text alone for the usual limit of 200, else by (text, limit).
        self.strings: dict[str | tuple[str, int], str] = {}
        self.links: dict[tuple[str, str, str], ChildLink] = {}
        self.previous_strings = previous.strings if previous is not None else {}
        self.previous_links = previous.links if previous is not None else {}

    def line(self, text: str, limit: int = 200) -> str:
        """``sanitize(text, limit=limit)``, reused when the view's last update sent ``text`` too."""
        if type(text) is not str or len(text) > MEMO_LONGEST:
            return sanitize(text, limit=limit)
        key = text if limit == 200 else (text, limit)
        clean = self.strings.get(key)
        if clean is None:
            clean = self.previous_strings.get(key)
            if clean is None:
                clean = sanitize(text, limit=limit)
                if clean == text:  # the usual case: the record and the memo share one string
                    clean = text
            self.strings[key] = clean
        return clean

    def link(self, link: ChildLink) -> ChildLink:
        """The link with its label and description sanitized (the key is the app's own)."""
        raw = (link.key, link.label, link.description)  # strs: the codec lets nothing else in
        clean = self.previous_links.get(raw)
        if clean is None:
            clean = ChildLink(link.key, self.line(link.label), self.line(link.description, 300))
            if not all(type(text) is str and len(text) <= MEMO_LONGEST for text in raw):
                return clean
        self.links[raw] = clean
        return clean

    def record(self, fragment: ViewFragment, size: int) -> ViewRecord:
        """The fragment as the supervisor keeps it: every string the agent may be shown (names,
        labels, descriptions, operation ids and argument schemas, ref names and types, in a
        snapshot or quoted in an error message) sanitized; the Markdown is filled in by
        ``ViewTree.apply``. Then only what this record was made from is kept."""
        line = self.line
        # A ref name met before in this update (it is in refs, keys and types) costs one lookup.
        seen = self.strings.get
        record = ViewRecord(
            key=fragment.key,
            name=line(fragment.name),
            parent=fragment.parent,
            mounted=fragment.mounted,
            markdown="",
            refs={line(ref): value for ref, value in fragment.refs.items()},
            keys={seen(ref) or line(ref): key for ref, key in fragment.keys.items()},
            ref_types={
                seen(ref) or line(ref): line(kind) for ref, kind in fragment.ref_types.items()
            },
            operations=[
                OperationSpec(
                    line(op.op_id),
                    line(op.label),
                    line(op.description, 300),
                    {line(name, 100): line(kind, 100) for name, kind in op.args.items()},
                    op.confirm is True,
                )
                for op in fragment.operations
            ],
            links=[self.link(link) for link in fragment.links],
            modal=fragment.modal,
            size=size,
        )
        self.previous_strings, self.previous_links = {}, {}
        return record


@dataclass(frozen=True)
class TreeNode:
    """One line of the Application View Tree."""

    depth: int
    view_id: str
    label: str
    mounted: bool


class ViewTree:
    """The views of one app incarnation and the ids of every view it has shown."""

    def __init__(self) -> None:
        #: Each cached view by key; a change replaces the whole dict (see :meth:`apply`).
        self.rendered: dict[str, ViewRecord] = {}
        #: ``key → view_N``, oldest first (the order forgetting follows).
        self.ids: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.hidden: set[str] = set()
        #: The next ``view_N``: a forgotten id is never handed to another view.
        self.next_id = 0
        #: What each cached view's strings were sanitized to, for its next update to reuse.
        self.sanitized: dict[str, SanitizedStrings] = {}

    def restore_ids(self, ids: dict[str, str]) -> None:
        """Take back the ids handed out before a restore (``key → view_N``)."""
        ordered = sorted(ids.items(), key=lambda item: _number(item[1]))
        self.ids = dict(ordered)
        self.keys = {view_id: key for key, view_id in ordered}
        # The newest id is never forgotten (see _forget), so numbering goes on after it.
        self.next_id = max((_number(view_id) + 1 for view_id in self.keys), default=0)

    def apply(self, update: FragmentUpdate, frame_bytes: int = 0) -> None:
        """Take a worker's update: convert its fragments, assign new ids, resolve links.

        ``E_INVALID_CMD`` (a protocol violation) if the update takes the app past a budget; then
        nothing of it is kept.
        """
        share = frame_bytes // max(len(update.views), 1)
        memos = {
            fragment.key: SanitizedStrings(self.sanitized.get(fragment.key))
            for fragment in update.views
        }
        arriving = {
            fragment.key: memos[fragment.key].record(fragment, max(share, len(fragment.markdown)))
            for fragment in update.views
        }
        count = len(self.rendered.keys() | arriving.keys())
        if count > MAX_FRAGMENTS:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the worker keeps {count} view fragments, over the budget of {MAX_FRAGMENTS}",
            )
        total = sum(v.size for key, v in self.rendered.items() if key not in arriving) + sum(
            v.size for v in arriving.values()
        )
        if total > MAX_FRAGMENT_BYTES:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the worker keeps {total >> 20} MB of view fragments, over the budget of "
                f"{MAX_FRAGMENT_BYTES >> 20} MB",
            )
        views = {**self.rendered, **arriving}
        self._assign_ids(views)
        for fragment in update.views:
            markdown = sanitize(self._resolve(fragment.markdown), lines=True, limit=None)
            view = arriving[fragment.key]
            size = max(view.size, len(markdown.encode()))
            views[fragment.key] = dataclasses.replace(view, markdown=markdown, size=size)
        self.rendered = views
        self.sanitized.update(memos)

    def substitute(self, view: ViewRecord) -> None:
        """Show ``view`` in place of the cached view with its key (a chaos run's drift or lie);
        the worker's next update of that view replaces it."""
        self.rendered = {**self.rendered, view.key: view}

    def reset_fragments(self) -> None:
        """Forget the views (the worker is gone) but keep ids: a restart reuses them."""
        self.rendered = {}
        self.sanitized = {}

    def _resolve(self, markdown: str) -> str:
        # Split rather than sub with a callback: a 50-link page costs a third less.
        parts = _LINK.split(markdown)  # text, key, text, key, …, text
        ids = self.ids
        parts[1::2] = [f"(view:{ids.get(key) or 'unknown'})" for key in parts[1::2]]
        return "".join(parts)

    def _assign_ids(self, views: Mapping[str, ViewRecord]) -> None:
        order = self._level_order(views)
        if len(order) > MAX_VIEW_IDS:
            raise AotuiError(
                ErrorCode.E_INVALID_CMD,
                f"the worker shows {len(order)} distinct views at once, over the budget of "
                f"{MAX_VIEW_IDS}; link fewer (a page of them, and a link to the next page)",
            )
        new = [key for key, _depth, _label in order if key not in self.ids]
        if len(self.ids) + len(new) > MAX_VIEW_IDS:
            self._forget(len(self.ids) + len(new) - MAX_VIEW_IDS, {key for key, *_ in order})
        for key in new:
            view_id = f"view_{self.next_id}"
            self.next_id += 1
            self.ids[key] = view_id
            self.keys[view_id] = key

    def _forget(self, count: int, live: set[str]) -> None:
        """Forget the ids of ``count`` views no longer in the tree, those known longest first.

        Forgetting a quarter of the budget at once keeps this walk rare. Cached views, hidden
        views and the newest id are kept (a restore numbers on from the newest).
        """
        count = max(count, MAX_VIEW_IDS // 4)
        newest = next(reversed(self.ids), None)
        kept = live | self.rendered.keys() | self.hidden | {newest}
        for key in [key for key in self.ids if key not in kept][:count]:
            del self.keys[self.ids.pop(key)]

    def _level_order(
        self, views: Mapping[str, ViewRecord] | None = None
    ) -> list[tuple[str, int, str]]:
        """(key, depth, label) of every view reachable from the roots, breadth first."""
        views = self.rendered if views is None else views
        seen: set[str] = set()
        order: list[tuple[str, int, str]] = []
        queue = deque((v.key, 0, v.name) for v in views.values() if v.parent is None)
        while queue:
            key, depth, label = queue.popleft()
            if key in seen:
                continue
            seen.add(key)
            order.append((key, depth, label))
            view = views.get(key)
            if view is not None and view.mounted:
                queue.extend((link.key, depth + 1, link.label) for link in view.links)
        return order

    def nodes(self, max_nodes: int | None = None, max_depth: int | None = None) -> list[TreeNode]:
        """The tree in display order (depth first), each with its id and mounted flag.

        With ``max_nodes``/``max_depth``, stops at that many lines and skips deeper views; see
        :meth:`count_nodes` for how many there are in all.
        """
        labels = {key: (depth, label) for key, depth, label in self._level_order()}
        nodes: list[TreeNode] = []
        seen: set[str] = set()
        roots = [v for v in self.rendered.values() if v.parent is None]
        # An explicit stack, children pushed in reverse so they pop in document order.
        stack = [(root.key, 0, root.name) for root in reversed(roots)]
        while stack and (max_nodes is None or len(nodes) < max_nodes):
            key, depth, label = stack.pop()
            if key in seen or key not in self.ids:
                continue
            seen.add(key)
            view = self.rendered.get(key)
            mounted = view is not None and view.mounted
            nodes.append(TreeNode(depth, self.ids[key], label, mounted))
            if view is None or not mounted:
                continue
            if max_depth is not None and depth + 1 > max_depth:
                continue
            stack.extend(
                (link.key, depth + 1, link.label)
                for link in reversed(view.links)
                if labels.get(link.key, (0, ""))[0] == depth + 1
            )
        return nodes

    def count_nodes(self) -> int:
        """How many lines the whole Application View Tree has."""
        return sum(1 for key, _depth, _label in self._level_order() if key in self.ids)

    def shown(self) -> list[tuple[str, ViewRecord]]:
        """(view_id, view) of mounted, not hidden views, in id order.

        While a dialog is open (:meth:`dialog`) it is the only view shown (hidden or not), its
        Markdown under a line saying the rest of the app is collapsed.
        """
        dialog = self.dialog()
        shown = [
            (self.ids[key], view)
            for key, view in self.rendered.items()
            if view.mounted
            and (key not in self.hidden or dialog is not None)
            and key in self.ids
            and (dialog is None or self.ids[key] == dialog[0])
        ]
        if dialog is not None:
            return [
                (view_id, dataclasses.replace(v, markdown=DIALOG_LINE.format(view_id) + v.markdown))
                for view_id, v in shown
            ]
        shown.sort(key=lambda item: _number(item[0]))
        return shown

    def dialog(self) -> tuple[str, ViewRecord] | None:
        """The open dialog (seed 004): the mounted ``modal`` view with the highest view id."""
        found: tuple[str, ViewRecord] | None = None
        for key, view in self.rendered.items():
            view_id = self.ids.get(key)
            if not (view.modal and view.mounted) or view_id is None:
                continue
            if found is None or _number(view_id) > _number(found[0]):
                found = (view_id, view)
        return found

    def key_for(self, view_id: str) -> str:
        """The view key behind ``view_id``; ``E_NOT_FOUND`` naming the known ids otherwise."""
        key = self.keys.get(view_id)
        if key is None:
            known = ", ".join(node.view_id for node in self.nodes()) or "none"
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"no view {view_id} in this app (its views: {known}); pull a new snapshot",
            )
        return key

    def mounted_view(self, view_id: str) -> ViewRecord:
        """The current record of a mounted view; ``E_NOT_FOUND`` if it is not mounted."""
        key = self.key_for(view_id)
        view = self.rendered.get(key)
        if view is None or not view.mounted:
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"{view_id} is not mounted; mount it first: mount --view {view_id}",
            )
        return view

    def mounted_keys(self) -> list[str]:
        """Keys of the mounted views in id order (what a restarted worker mounts again)."""
        keys = [key for key, v in self.rendered.items() if v.mounted and key in self.ids]
        return sorted(keys, key=lambda key: _number(self.ids[key]))


def _number(view_id: str) -> int:
    """``view_12`` → 12."""
    return int(view_id.removeprefix("view_"))
