"""One app's views as the supervisor keeps them: cached fragments, ``view_N`` ids, the tree.

Fragments arrive from the worker already rendered; this module never renders. Ids are assigned in
level order of the view tree as views are discovered and never change while the app lives, so the
``(view:@key)`` links of a fragment are resolved to ``(view:view_N)`` once, when it arrives.
Fragment text is escaped again here because a compromised worker can send anything.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import FragmentUpdate, ViewFragment
from aotui.protocol.structure import escape_structural

__all__ = ["TreeNode", "ViewTree", "attribute_text"]

_LINK = re.compile(r"\(view:@([^)\s]+)\)")


def attribute_text(text: str) -> str:
    """Text safe inside a double-quoted attribute of a structural tag."""
    return (
        text.replace("&", "&amp;")
        .replace('"', "&quot;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace("\n", " ")
    )


@dataclass(frozen=True)
class TreeNode:
    """One line of the Application View Tree."""

    depth: int
    view_id: str
    label: str
    mounted: bool


class ViewTree:
    """The fragments of one app incarnation and the ids of every view it has shown."""

    def __init__(self) -> None:
        self.fragments: dict[str, ViewFragment] = {}
        self.markdown: dict[str, str] = {}
        self.ids: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.hidden: set[str] = set()
        self.revision = 0

    def restore_ids(self, ids: dict[str, str]) -> None:
        """Take back the ids handed out before a restore (``key → view_N``)."""
        self.ids = dict(ids)
        self.keys = {view_id: key for key, view_id in ids.items()}

    def apply(self, update: FragmentUpdate) -> None:
        """Take a worker's update: cache fragments, assign new ids, resolve links."""
        for key in update.removed:
            self.fragments.pop(key, None)
            self.markdown.pop(key, None)
        for fragment in update.views:
            self.fragments[fragment.key] = fragment
        self._assign_ids()
        for fragment in update.views:
            self.markdown[fragment.key] = self._resolve(fragment.markdown)
        self.revision = max(self.revision, update.revision)

    def reset_fragments(self) -> None:
        """Forget fragments (the worker is gone) but keep ids: a restart reuses them."""
        self.fragments.clear()
        self.markdown.clear()

    def _resolve(self, markdown: str) -> str:
        def replace(match: re.Match[str]) -> str:
            view_id = self.ids.get(match.group(1))
            return f"(view:{view_id})" if view_id else "(view:unknown)"

        return escape_structural(_LINK.sub(replace, markdown))

    def _assign_ids(self) -> None:
        for node_key, _depth, _label in self._level_order():
            if node_key not in self.ids:
                view_id = f"view_{len(self.ids)}"
                self.ids[node_key] = view_id
                self.keys[view_id] = node_key

    def _roots(self) -> list[ViewFragment]:
        return [f for f in self.fragments.values() if f.parent is None]

    def _level_order(self) -> list[tuple[str, int, str]]:
        """(key, depth, label) of every view reachable from the roots, breadth first."""
        seen: set[str] = set()
        order: list[tuple[str, int, str]] = []
        queue = deque((root.key, 0, root.name) for root in self._roots())
        while queue:
            key, depth, label = queue.popleft()
            if key in seen:
                continue
            seen.add(key)
            order.append((key, depth, label))
            fragment = self.fragments.get(key)
            if fragment is not None and fragment.mounted:
                queue.extend((link.key, depth + 1, link.label) for link in fragment.links)
        return order

    def nodes(self) -> list[TreeNode]:
        """The tree in display order (depth first), each with its id and mounted flag."""
        labels = {key: (depth, label) for key, depth, label in self._level_order()}
        nodes: list[TreeNode] = []
        seen: set[str] = set()

        def visit(key: str, depth: int, label: str) -> None:
            if key in seen or key not in self.ids:
                return
            seen.add(key)
            fragment = self.fragments.get(key)
            mounted = fragment is not None and fragment.mounted
            nodes.append(TreeNode(depth, self.ids[key], label, mounted))
            if fragment is not None and mounted:
                for link in fragment.links:
                    if labels.get(link.key, (0, ""))[0] == depth + 1:
                        visit(link.key, depth + 1, link.label)

        for root in self._roots():
            visit(root.key, 0, root.name)
        return nodes

    def shown(self) -> list[tuple[str, ViewFragment, str]]:
        """(view_id, fragment, markdown) of mounted, not hidden views, in id order."""
        shown = [
            (self.ids[key], fragment, self.markdown[key])
            for key, fragment in self.fragments.items()
            if fragment.mounted and key not in self.hidden and key in self.ids
        ]
        shown.sort(key=lambda item: int(item[0].removeprefix("view_")))
        return shown

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

    def mounted_fragment(self, view_id: str) -> ViewFragment:
        """The current fragment of a mounted view; ``E_NOT_FOUND`` if it is not mounted."""
        key = self.key_for(view_id)
        fragment = self.fragments.get(key)
        if fragment is None or not fragment.mounted:
            raise AotuiError(
                ErrorCode.E_NOT_FOUND,
                f"{view_id} is not mounted; mount it first: mount --view {view_id}",
            )
        return fragment

    def mounted_keys(self) -> list[str]:
        """Keys of the mounted views in id order (what a restarted worker mounts again)."""
        keys = [key for key, f in self.fragments.items() if f.mounted and key in self.ids]
        return sorted(keys, key=lambda key: int(self.ids[key].removeprefix("view_")))
