"""Render one view document (HTML with semantic marks) into the Markdown an agent reads.

:func:`render_view` is the whole public surface. The marks (CONTRACT §3, docs/markup.md):

- ``view="Name"`` on the root; ``description`` beside it.
- ``list="type[]:list_id"`` → ``### [Title](type[]:list_id)`` and one ``[label](type:list_id[i])``
  per child element; each item needs ``key`` and may carry ``data-value`` (JSON).
- ``entity="type:entity_id"`` → ``[text](type:entity_id)`` in place; may carry ``data-value``.
- ``operation="op_id"`` (+ ``args``, ``description``, ``confirm``) → collected under
  ``#### Operations``; ``confirm`` asks the user before it runs.
- ``modal`` on the root marks a dialog: while mounted, the rest of its app waits for it.
- ``view-link="key"`` (+ ``description``) → a bullet ``[label](view:@key)``; the supervisor turns
  ``@key`` into the child view's ``view_N``.

Ordinary HTML goes through :class:`sandbox.markdown.MarkdownRenderer`. Every mistake in the marks
is an :class:`~protocol.errors.AotuiError` with code ``E_APP_ERROR`` whose message names the list,
item, entity, operation or attribute at fault and shows the correct form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from lxml.etree import _Element as Element
from lxml.etree import tostring

from aotui.protocol.errors import AotuiError, ErrorCode
from aotui.protocol.messages import OperationSpec
from aotui.protocol.structure import escape_structural
from aotui.sandbox.flow import (
    DROPPED,
    Block,
    Flow,
    assemble,
    collapse,
    finish,
    inline_lines,
    item_lines,
    link_label,
)
from aotui.sandbox.flow import take_label as _take_label
from aotui.sandbox.item_cache import CachedItem, ItemCache
from aotui.sandbox.markdown import MarkdownRenderer
from aotui.sandbox.marks import (
    entity_spec,
    fault,
    link_key,
    list_spec,
    operation_args,
    operation_id,
    operation_lines,
    parse_value,
)
from aotui.sandbox.parsing import no_root, parse_document

__all__ = ["VALUE_DROPPED", "ItemCache", "RenderedView", "ViewLink", "render_view"]

#: Starts the line shown under an item (or after an entity) whose ``data-value`` broke a rule.
VALUE_DROPPED = "⚠ Value dropped:"

_MARK_ORDER = ("view", "list", "entity", "operation", "view-link")
# Characters that would break out of the name="…" attribute the supervisor writes.
_BAD_NAME = re.compile(r'["<>]')
_LABEL_SKIP = DROPPED | {"textarea", "select"}
_LIST_LABEL = frozenset({"listhead"})
# Checked argument schemas by (args text, op_id): a view declares the same operations at every
# render, and checking a schema again (JSON and all) was a tenth of rendering a small view.
_SCHEMAS: dict[tuple[str, str], dict[str, str]] = {}
_SCHEMAS_MAX = 1024


@dataclass(frozen=True, slots=True)
class ViewLink:
    """A child view the rendered view links to, as ``[label](view:@key)``."""

    #: The app's stable key for the child view instance (``conversation:johnny``).
    key: str
    #: The link's text, plain (not Markdown-escaped).
    label: str
    #: The ``description`` attribute, or ``""``.
    description: str


@dataclass(frozen=True, slots=True)
class RenderedView:
    """One view rendered: its Markdown body and the tables the supervisor keeps for it."""

    #: The ``view="…"`` name of the root element.
    name: str
    #: The root's ``description`` attribute, or ``""``.
    description: str
    #: The view body; child-view links are written ``(view:@key)``.
    markdown: str
    #: ``list_id[i]`` and entity ids → the parsed ``data-value`` (``None`` when absent).
    refs: dict[str, Any]
    #: ``list_id[i]`` → the item's ``key``; entity id → itself.
    keys: dict[str, str]
    #: Every ref → its item or entity type (``message``).
    ref_types: dict[str, str]
    #: ``list_id`` → its item type.
    lists: dict[str, str]
    #: The operations, in document order.
    operations: tuple[OperationSpec, ...]
    #: The child views linked, in document order.
    links: tuple[ViewLink, ...]
    #: The root carries ``modal``: the view is a dialog.
    modal: bool = False


def render_view(html: str | bytes, cache: ItemCache | None = None) -> RenderedView:
    """Render one view document; any fault in it raises ``AotuiError(E_APP_ERROR)``.

    ``cache`` (one per view, kept between its renders) lets an item of a semantic list whose
    markup is unchanged since the last render reuse its rendered Markdown: the output is the same,
    the work is a lookup.
    """
    try:
        doc, controls = parse_document(html)
        rendered = _ViewRenderer(cache).render(doc, controls)
    except AotuiError:
        if cache is not None:
            cache.abandon()
        raise
    except RecursionError:
        if cache is not None:
            cache.abandon()
        raise fault("the view is nested too deeply to render; flatten its markup") from None
    except Exception as exc:  # a bug here must still reach the caller as our error type
        if cache is not None:
            cache.abandon()
        raise AotuiError(ErrorCode.E_INTERNAL, f"the view renderer failed: {exc!r}") from exc
    if cache is not None:
        cache.finish()
    return rendered


class _ViewRenderer(MarkdownRenderer):
    """The Markdown renderer plus the semantic marks and the tables they fill."""

    marks = frozenset(_MARK_ORDER)

    def __init__(self, cache: ItemCache | None = None) -> None:
        super().__init__()
        self.cache = cache
        self.root: Element | None = None
        self.refs: dict[str, Any] = {}
        self.keys: dict[str, str] = {}
        self.ref_types: dict[str, str] = {}
        self.lists: dict[str, str] = {}
        self.entities: set[str] = set()
        #: Names of indexed entities (``page`` of ``control:page[3]``).
        self.indexed: set[str] = set()
        self.operations: dict[str, OperationSpec] = {}
        # Filled in document order: a slot is taken before the link's content is rendered.
        self.links: list[ViewLink | None] = []
        self.link_keys: set[str] = set()

    def render(self, doc: Element, controls: bool) -> RenderedView:
        """Render the document's one view."""
        roots = cast(list[Element], doc.xpath("descendant-or-self::*[@view]"))
        if not roots:
            raise no_root()
        root = self.root = roots[0]
        name = collapse(root.get("view"))
        if len(roots) > 1:
            inner = roots[1]
            where = "inside" if any(up is root for up in inner.iterancestors()) else "beside"
            raise fault(
                f'view="{collapse(inner.get("view"))}" sits {where} view "{name}": one document '
                'holds one view; render it as its own document and link it with view-link="key"'
            )
        if not name or _BAD_NAME.search(name) or len(name) > 200:
            raise fault(f'view="{name}" is not a usable view name: 1-200 characters, no " < >')
        mark = self._which(root)
        if mark is not None:
            raise fault(
                f'the view root cannot also carry {mark}="…"; put it on an element inside the view'
            )
        flow = Flow()
        self.element(root, flow)
        flow.flush()
        if self.operations:
            flow.blocks.append(("heading", 4, ["Operations"]))
            flow.blocks.append(("list", 0, operation_lines(self.operations.values())))
        return RenderedView(
            name=escape_structural(name),
            description=escape_structural(collapse(root.get("description"))),
            markdown=escape_structural(finish(assemble(flow.blocks), controls)),
            refs=self.refs,
            keys=self.keys,
            ref_types=self.ref_types,
            lists=self.lists,
            operations=tuple(self.operations.values()),
            links=tuple(link for link in self.links if link is not None),
            modal=_flag(root, "modal"),
        )

    # --- dispatch ----------------------------------------------------------------------------

    def _which(self, el: Element) -> str | None:
        """The one mark an element carries (``view`` is allowed on the root only)."""
        keys = el.keys()
        found = [mark for mark in _MARK_ORDER if mark in keys]
        if "list" in found and el.tag == "input":
            found.remove("list")  # HTML's own <input list="datalist-id">
        if "view" in found:
            if el is not self.root:
                raise fault(
                    f'view="{collapse(el.get("view"))}" inside a view: one document holds one '
                    'view; render it as its own document and link it with view-link="key"'
                )
            found.remove("view")
        if len(found) > 1:
            attrs = " and ".join(f'{mark}="{el.get(mark)}"' for mark in found)
            raise fault(f"one element carries {attrs}: use one mark per element and nest them")
        return found[0] if found else None

    def mark(self, el: Element, flow: Flow) -> None:
        """Render an element carrying a semantic mark."""
        mark = self._which(el)
        if mark == "operation":
            self._operation(el)
        elif mark == "list":
            self._semantic_list(el, flow)
        elif mark == "entity":
            self._entity(el, flow)
        elif mark == "view-link":
            flow.add(("linkitem", 0, self._link_item(el, "- ", None, "")))
        else:
            self.element(el, flow)

    def check_unmarked(self, el: Element, context: str) -> None:
        """Refuse marks inside text that is taken verbatim (``pre``, operation labels, forms)."""
        if not self.marks.isdisjoint(el.keys()):
            mark = self._which(el)
            if mark is not None:
                raise fault(
                    f'{mark}="{el.get(mark)}" sits inside {context}, where marks do not work'
                )

    def item(self, el: Element, marker: str) -> list[str] | None:
        """An item of an ordinary list, which may itself be a view link, entity or list."""
        keys = el.keys()
        mark = self._which(el) if keys and not self.marks.isdisjoint(keys) else None
        if mark is None:
            return super().item(el, marker)
        if mark == "operation":
            self._operation(el)
            return None
        if mark == "view-link":
            return self._link_item(el, marker, None, "")
        if mark == "entity":
            entity_id, target, note = self._claim_entity(el)
            return self._link_item(el, marker, target, entity_id, note)
        sub = Flow()
        self._semantic_list(el, sub)
        label, rest = _take_label(sub.blocks, _LIST_LABEL)
        return item_lines(marker, label or [], rest)

    # --- marks -------------------------------------------------------------------------------

    def _link_item(
        self, el: Element, marker: str, target: str | None, fallback: str, note: str | None = None
    ) -> list[str]:
        """An item whose label is a link: to ``target``, or to the view link the item carries."""
        label, rest, subs, target = self._link_parts(el, target, fallback, note)
        return item_lines(marker, [f"[{label}]({target})"], rest, subs)

    def _link_parts(
        self, el: Element, target: str | None, fallback: str, note: str | None
    ) -> tuple[str, list[Block], list[str], str]:
        """A link item's escaped label, nested blocks, sub-bullets and target."""
        subs: list[str] = []
        slot = -1
        key = description = ""
        if target is None:
            key, description, slot = self._claim_link(el)
            target, fallback = f"view:@{key}", key
            if description:
                subs.append(f"Description: {description}")
        if note:
            subs.append(note)
        label: list[str] | None
        rest: list[Block] = []
        if len(el) == 0:  # the common item: text only
            label = inline_lines(el.text or "")
        else:
            sub = Flow(True)
            saved = self.heading
            self.children(el, sub)
            self.heading = saved
            sub.flush()
            label, rest = _take_label(sub.blocks)
        text = " ".join(label) if label else fallback
        if slot >= 0:
            self.links[slot] = ViewLink(
                key, escape_structural(text), escape_structural(description)
            )
        return link_label(text), rest, subs, target

    def _claim_id(self, ident: str, what: str) -> None:
        # An indexed entity (page[3]) claims its name against lists, whose items' refs it shares.
        name = ident.split("[", 1)[0]
        if ident in self.lists or ident in self.entities or name in self.lists:
            raise fault(
                f'{what}: the id "{ident}" is already used by a list or entity in this view; '
                "list and entity ids must be unique within a view"
            )

    def _claim_link(self, el: Element) -> tuple[str, str, int]:
        key = link_key((el.get("view-link") or "").strip())
        self._add_link_key(key)
        self.links.append(None)
        return key, collapse(el.get("description")), len(self.links) - 1

    def _add_link_key(self, key: str) -> None:
        if key in self.link_keys:
            raise fault(f'view-link="{key}" appears twice in this view; link each child once')
        self.link_keys.add(key)

    def _value(self, el: Element, ref: str, what: str) -> str | None:
        """Record the ``data-value`` of ``ref``; a faulty one degrades only this item or entity.

        The ref keeps its key and type (so operations on it still work, with ``None`` as its
        value); the returned marker tells the agent why its value is missing.
        """
        try:
            self.refs[ref] = parse_value(el.get("data-value"), what)
        except AotuiError as exc:
            self.refs[ref] = None
            return f"{VALUE_DROPPED} {exc.message}"
        return None

    def _claim_entity(self, el: Element) -> tuple[str, str, str | None]:
        spec = (el.get("entity") or "").strip()
        entity_type, entity_id = entity_spec(spec)
        self._claim_id(entity_id, f'entity="{spec}"')
        self.entities.add(entity_id)
        if entity_id.endswith("]"):
            self.indexed.add(entity_id.split("[", 1)[0])
        note = self._value(el, entity_id, f"entity {entity_id}")
        self.keys[entity_id] = entity_id
        self.ref_types[entity_id] = entity_type
        return entity_id, f"{entity_type}:{entity_id}", note

    def _entity(self, el: Element, flow: Flow) -> None:
        entity_id, target, note = self._claim_entity(el)
        if flow.plain:  # inside another link's label: a link in a link would not read
            self.element(el, flow)
            return
        sub = Flow(True)
        self.element(el, sub)
        if not sub.blocks:
            text = " ".join(inline_lines("".join(sub.inline))) or entity_id
            flow.inline.append(f"[{link_label(text)}]({target})")
            if note:
                flow.inline.append(f" ({note})")
            return
        sub.flush()
        kind, level, lines = sub.blocks[0]
        if kind in ("para", "heading"):
            sub.blocks[0] = (kind, level, [f"[{link_label(' '.join(lines))}]({target})"])
        else:
            sub.blocks.insert(0, ("para", 0, [f"[{link_label(entity_id)}]({target})"]))
        if note:
            sub.blocks.insert(1, ("para", 0, [note]))
        flow.splice(sub)

    def _semantic_list(self, el: Element, flow: Flow) -> None:
        spec = (el.get("list") or "").strip()
        item_type, list_id = list_spec(spec)
        self._claim_id(list_id, f'list="{spec}"')
        if list_id in self.indexed:
            raise fault(
                f'list="{spec}": the id "{list_id}" is already used by an entity {list_id}[…] '
                "in this view; list and entity ids must be unique within a view"
            )
        self.lists[list_id] = item_type
        title = collapse(el.get("title")) or list_id
        level = min(max(self.heading + 1, 3), 6)
        flow.add(("listhead", level, [f"[{link_label(title)}]({item_type}[]:{list_id})"]))
        ordered = el.tag == "ol"
        lines: list[str] = []
        seen: dict[str, int] = {}
        index = 0
        for child in el:
            if type(child.tag) is not str or child.tag in DROPPED:
                continue
            ref = f"{list_id}[{index}]"
            key = (child.get("key") or "").strip()
            if not key:
                raise fault(
                    f'item {ref} of list {list_id} has no key: every item needs key="…", '
                    "the app's stable id for it",
                    list=list_id,
                    index=index,
                )
            if key in seen:
                raise fault(
                    f'duplicate key "{key}" in list {list_id} (items {seen[key]} and {index}); '
                    "keys must be unique within a list",
                    list=list_id,
                    index=index,
                )
            seen[key] = index
            self.keys[ref] = key
            self.ref_types[ref] = item_type
            marker = f"{index + 1}. " if ordered else "- "
            cache_key = None
            if self.cache is not None:
                cache_key = (self.heading, tostring(child, with_tail=False))
                hit = self.cache.get(cache_key)
                if hit is not None:
                    lines.extend(self._replay(hit, marker, f"{item_type}:{ref}", ref))
                    index += 1
                    continue
            note = self._value(child, ref, f"{ref} (key {key})")
            keys = child.keys()
            mark = self._which(child) if not self.marks.isdisjoint(keys) else None
            if mark not in (None, "view-link"):
                raise fault(
                    f'item {ref} of list {list_id} cannot also carry {mark}="{child.get(mark)}"; '
                    "put it on an element inside the item",
                    list=list_id,
                    index=index,
                )
            own = None if mark == "view-link" else f"{item_type}:{ref}"
            before = self._claimed()
            label, rest, subs, target = self._link_parts(child, own, key, note)
            item = item_lines(marker, [f"[{label}]({target})"], rest, subs)
            lines.extend(item)
            after = self._claimed()
            if cache_key is not None and note is None and after[:4] == before[:4]:
                links = tuple(cast(list[ViewLink], self.links[before[4] :]))
                shared = None if own is not None else target
                # Only the first line holds the position: the marker and the item's ref.
                cached = CachedItem(label, item[1:], self.refs[ref], links, shared)
                cast(ItemCache, self.cache).put(cache_key, cached)
            index += 1
        if lines:
            flow.add(("list", 0, lines))

    def _claimed(self) -> tuple[int, int, int, int, int]:
        """How many refs, lists, entities, operations and links the view has claimed so far.

        An item that claims anything but its own ref and view links is not cached: view links
        are all a cached item claims again, which keeps their keys unique within the view.
        """
        return (
            len(self.refs),
            len(self.lists),
            len(self.entities),
            len(self.operations),
            len(self.links),
        )

    def _replay(self, hit: CachedItem, marker: str, own: str, ref: str) -> list[str]:
        """A cached item's lines at this position, claiming its view links again."""
        for link in hit.links:
            self._add_link_key(link.key)
            self.links.append(link)
        self.refs[ref] = hit.value
        target = own if hit.target is None else hit.target
        return [f"{marker}[{hit.label}]({target})", *hit.lines]

    def _operation(self, el: Element) -> None:
        op_id = operation_id((el.get("operation") or "").strip())
        if op_id in self.operations:
            raise fault(
                f"operation {op_id} appears twice in this view; each operation is declared once "
                "(take the item it acts on as an argument)",
                operation=op_id,
            )
        what = f"operation {op_id}"
        for (
            inner
        ) in el.iterdescendants():  # its content is never rendered, so no mark may hide in it
            if type(inner.tag) is str:
                self.check_unmarked(inner, what)
        source = el
        if el.tag == "form":  # a form's label is its submit button, not every field's text
            submits = (
                found
                for found in el.iter("button", "input")
                if found.tag == "button" or (found.get("type") or "").lower() == "submit"
            )
            source = next(submits, el)
        label = (
            collapse(self.raw_text(source, what, skip=_LABEL_SKIP))
            or collapse(source.get("aria-label") or source.get("title"))
            or collapse(source.get("value") if source.tag == "input" else None)
            or op_id
        )
        description = collapse(el.get("description"))
        args = _checked_args(el.get("args"), op_id)
        self.operations[op_id] = OperationSpec(
            op_id,
            escape_structural(label),
            escape_structural(description),
            args,
            confirm=_flag(el, "confirm"),
        )


def _checked_args(raw: str | None, op_id: str) -> dict[str, str]:
    """:func:`operation_args`, remembered for a schema text already checked (a copy each time)."""
    if raw is None:
        return {}
    found = _SCHEMAS.get((raw, op_id))
    if found is None:
        found = operation_args(raw, op_id)  # a bad schema raises, and is not remembered
        if len(_SCHEMAS) >= _SCHEMAS_MAX:
            _SCHEMAS.clear()
        _SCHEMAS[raw, op_id] = found
    return dict(found)


def _flag(el: Element, name: str) -> bool:
    """An HTML boolean attribute: present (``confirm``, ``confirm=""``, ``confirm="confirm"``).

    ``name="false"`` is refused rather than read as true, which is what HTML would do.
    """
    value = el.get(name)
    if value is None:
        return False
    if value.strip().lower() not in ("", name, "true"):
        raise fault(f'{name}="{value}": {name} is a flag; write {name} alone, or leave it out')
    return True
