"""Ordinary HTML → readable Markdown: the engine under :func:`sandbox.render.render_view`.

One pass over an lxml tree, building :mod:`sandbox.flow` blocks. :class:`MarkdownRenderer` knows
no semantic marks: :mod:`sandbox.render` subclasses it; elements carrying one of ``marks`` go to
:meth:`MarkdownRenderer.mark` and list items to :meth:`MarkdownRenderer.item`, both overridden
there. Form controls read as in :mod:`sandbox.controls`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from lxml.etree import _Element as Element

from aotui.sandbox.controls import input_text, select_text, textarea_text
from aotui.sandbox.flow import (
    BR,
    DROPPED,
    Flow,
    assemble,
    code_span,
    collapse,
    inline_lines,
    item_lines,
    link_label,
    safe_href,
    take_label,
)
from aotui.sandbox.tables import TablesMixin

__all__ = ["MarkdownRenderer"]

# Every character str.split() collapses (so the two agree on what is a space), plus <br>.
_STRIP = "".join(char for char in map(chr, range(0x3001)) if char.isspace()) + BR
_BACKTICKS = re.compile(r"`+")
_LANGUAGE = re.compile(r"\b(?:language|lang)-([A-Za-z0-9_+#.-]+)")
_LABEL_KINDS = frozenset({"para", "heading"})

_BLOCKS = ["p", "div", "address", "center", "details", "dialog", "fieldset", "figcaption"]
_BLOCKS += ["figure", "footer", "form", "header", "hgroup", "main", "search", "legend", "summary"]
_BLOCKS += ["caption", "li", "dt", "dd", "td", "th"]
_SECTIONS = ["section", "article", "aside", "nav"]
_EMPHASIS = {"em": "*", "i": "*", "cite": "*", "dfn": "*", "var": "*", "strong": "**", "b": "**"}
_EMPHASIS |= {"s": "~~", "strike": "~~", "del": "~~"}


#: A tag's handler, unbound: called as ``handler(renderer, el, flow)``.
Handler = Callable[[Any, Element, Flow], None]

_TAGS: dict[str, str] = dict.fromkeys(DROPPED, "_drop")
_TAGS |= dict.fromkeys(_BLOCKS, "block")
_TAGS |= dict.fromkeys(_SECTIONS, "_section")
_TAGS |= dict.fromkeys(("h1", "h2", "h3", "h4", "h5", "h6"), "_heading")
_TAGS |= dict.fromkeys(("ul", "ol", "menu", "dir"), "_list")
_TAGS |= dict.fromkeys(_EMPHASIS, "_emphasis")
_TAGS |= dict.fromkeys(("code", "kbd", "samp", "tt"), "_code")
_TAGS |= {
    "br": "_br",
    "hr": "_hr",
    "a": "_link",
    "img": "_img",
    "pre": "_pre",
    "blockquote": "_blockquote",
    "table": "_table",
    "tr": "_row",
    "dl": "_dl",
    "input": "_input",
    "textarea": "_textarea",
    "select": "_select",
}
# Each renderer class's tag → handler table, built once: building it per render (a bound method
# per tag) was a fifth of rendering a small view.
_TABLES: dict[type, dict[str, Handler]] = {}


class MarkdownRenderer(TablesMixin):
    """Walks an lxml HTML tree once, producing Markdown blocks into a :class:`Flow`."""

    #: Attributes that route an element to :meth:`mark` (none here; the view renderer sets them).
    marks: frozenset[str] = frozenset()

    def __init__(self) -> None:
        #: Level of the last heading in scope; semantic list headings go one deeper.
        self.heading = 0
        cls = type(self)
        table = _TABLES.get(cls)
        if table is None:
            table = _TABLES[cls] = {tag: getattr(cls, name) for tag, name in _TAGS.items()}
        self._handlers = table

    # --- hooks for the view renderer --------------------------------------------------------

    def mark(self, el: Element, flow: Flow) -> None:
        """Render an element that carries one of :attr:`marks`."""
        self.element(el, flow)

    def check_unmarked(self, el: Element, context: str) -> None:
        """Refuse a marked element where marks cannot work (inside ``context``)."""

    def item(self, el: Element, marker: str) -> list[str] | None:
        """The lines of one item of an ordinary list, or ``None`` when it renders to nothing."""
        if len(el) == 0 and el.tag == "li":  # the common item: text only
            lines = inline_lines(el.text or "")
            return item_lines(marker, lines, []) if lines else None
        sub = Flow()
        saved = self.heading
        if el.tag == "li":
            self.children(el, sub)
        else:
            self.node(el, sub)
        self.heading = saved
        sub.flush()
        label, rest = take_label(sub.blocks)
        if label is None and not rest:
            return None
        return item_lines(marker, label or [], rest)

    # --- the walk ----------------------------------------------------------------------------

    def node(self, el: Element, flow: Flow) -> None:
        """Render one node (element, comment or processing instruction; tails are the caller's)."""
        if type(el.tag) is not str:
            return
        marks = self.marks
        if marks:
            keys = el.keys()
            if keys and not marks.isdisjoint(keys):
                self.mark(el, flow)
                return
        self.element(el, flow)

    def element(self, el: Element, flow: Flow) -> None:
        """Render one element by its tag, ignoring any marks it carries."""
        handler = self._handlers.get(el.tag)
        if handler is None:
            self.children(el, flow)
        else:
            handler(self, el, flow)

    def children(self, el: Element, flow: Flow) -> None:
        """Render an element's content into ``flow``."""
        # node() is inlined here: this loop runs once per element and the call would double the
        # Python frames per level of nesting.
        text = el.text
        if text:
            flow.inline.append(text)
        marks = self.marks
        handlers = self._handlers
        for child in el:
            tag = child.tag
            if type(tag) is str:
                keys = child.keys() if marks else None
                if keys and not marks.isdisjoint(keys):
                    self.mark(child, flow)
                else:
                    handler = handlers.get(tag)
                    if handler is None:
                        self.children(child, flow)
                    else:
                        handler(self, child, flow)
            tail = child.tail
            if tail:
                flow.inline.append(tail)

    def raw_text(self, el: Element, context: str, skip: frozenset[str] = DROPPED) -> str:
        """The text of a subtree as written (for ``pre``, labels, form values)."""
        parts: list[str] = []

        def walk(node: Element) -> None:
            if node.text:
                parts.append(node.text)
            for child in node:
                tag = child.tag
                if type(tag) is str and tag not in skip:
                    if tag == "br":
                        parts.append("\n")
                    else:
                        self.check_unmarked(child, context)
                        walk(child)
                if child.tail:
                    parts.append(child.tail)

        walk(el)
        return "".join(parts)

    def list_lines(self, el: Element) -> list[str]:
        """The lines of an ordinary ``ul``/``ol``."""
        ordered = el.tag == "ol"
        number = 1
        if ordered and el.get("start"):
            try:
                number = max(0, min(int(el.get("start", "1")), 10**9))
            except ValueError:
                number = 1
        lines: list[str] = []
        marks = self.marks
        # Text loose in the list (invalid, but browsers show it) becomes an item of its own.
        loose = el.text
        for child in el:
            if loose and not loose.isspace():
                label = inline_lines(loose)
                lines += item_lines(f"{number}. " if ordered else "- ", label, [])
                number += 1
            loose = child.tail
            tag = child.tag
            if type(tag) is not str or tag in DROPPED:
                continue
            if tag in ("ul", "ol") and lines and not child.keys():
                # <ul><li>a</li><ul>…</ul></ul>: browsers show the stray list under "a".
                lines += ["    " + line if line else "" for line in self.list_lines(child)]
                continue
            marker = f"{number}. " if ordered else "- "
            if (
                len(child) == 0
                and tag == "li"
                and not (marks and not marks.isdisjoint(child.keys()))
            ):
                item = (
                    item_lines(marker, label, [])
                    if (label := inline_lines(child.text or ""))
                    else None
                )
            else:
                item = self.item(child, marker)
            if item:
                lines += item
                number += 1
        if loose and not loose.isspace():
            lines += item_lines(f"{number}. " if ordered else "- ", inline_lines(loose), [])
        return lines

    # --- handlers ------------------------------------------------------------------------------

    def _drop(self, el: Element, flow: Flow) -> None:
        pass

    def block(self, el: Element, flow: Flow) -> None:
        """A block with ordinary content: it starts and ends a paragraph."""
        if flow.inline:
            flow.flush()
        self.children(el, flow)
        if flow.inline:
            flow.flush()

    def _section(self, el: Element, flow: Flow) -> None:
        # A heading inside a section does not set the level for what follows the section.
        saved = self.heading
        self.block(el, flow)
        self.heading = saved

    def _br(self, el: Element, flow: Flow) -> None:
        flow.inline.append(BR)

    def _hr(self, el: Element, flow: Flow) -> None:
        flow.add(("hr", 0, ["---"]))

    def _heading(self, el: Element, flow: Flow) -> None:
        sub = Flow(flow.plain)
        self.children(el, sub)
        text = sub.text()
        if text:
            level = int(el.tag[1])
            flow.add(("heading", level, [text]))
            self.heading = level

    def _list(self, el: Element, flow: Flow) -> None:
        lines = self.list_lines(el)
        if lines:
            flow.add(("list", 0, lines))

    def _emphasis(self, el: Element, flow: Flow) -> None:
        if flow.plain:
            self.children(el, flow)
            return
        if len(el) == 0:
            text = el.text or ""
        else:
            sub = Flow()
            self.children(el, sub)
            if sub.blocks:  # blocks inside inline markup: keep the content, drop the markup
                flow.splice(sub)
                return
            text = "".join(sub.inline)
        core = text.strip(_STRIP)
        if not core:
            flow.inline.append(text)
            return
        # "<b> bold </b>" must become " **bold** ": Markdown markers cannot sit next to spaces.
        start = len(text) - len(text.lstrip(_STRIP))
        end = len(text.rstrip(_STRIP))
        marker = _EMPHASIS[el.tag]
        if BR in core:
            parts = core.split(BR)
            core = BR.join(marker + part + marker if part.strip() else part for part in parts)
        else:
            core = marker + core + marker
        flow.inline.append(text[:start] + core + text[end:])

    def _code(self, el: Element, flow: Flow) -> None:
        if flow.plain:
            self.children(el, flow)
            return
        sub = Flow(True)
        self.children(el, sub)
        text = sub.text() if sub.blocks else "".join(sub.inline)
        core = collapse(text.replace(BR, " "))
        if not core:
            flow.inline.append(text)
            return
        lead = " " if text[0] in _STRIP else ""
        trail = " " if text[-1] in _STRIP else ""
        flow.inline.append(lead + code_span(core) + trail)

    def _link(self, el: Element, flow: Flow) -> None:
        target = safe_href(el.get("href"))
        if target is None or flow.plain:
            self.children(el, flow)
            return
        sub = Flow(True)
        self.children(el, sub)
        if not sub.blocks:
            label = " ".join(inline_lines("".join(sub.inline)))
            if label:
                flow.inline.append(f"[{link_label(label)}]({target})")
            return
        sub.flush()
        kind, level, lines = sub.blocks[0]
        if kind in _LABEL_KINDS:
            sub.blocks[0] = (kind, level, [f"[{link_label(' '.join(lines))}]({target})"])
        flow.splice(sub)

    def _img(self, el: Element, flow: Flow) -> None:
        alt = collapse(el.get("alt") or el.get("title"))
        if alt:
            flow.inline.append(f"[image: {link_label(alt)}]")

    def _pre(self, el: Element, flow: Flow) -> None:
        text = self.raw_text(el, "a <pre> block")
        if text.startswith("\n"):
            text = text[1:]
        text = text.rstrip()
        if not text.strip():
            return
        longest = max(map(len, _BACKTICKS.findall(text)), default=0) if "`" in text else 0
        fence = "`" * max(3, longest + 1)
        classes = el.get("class", "")
        if len(el) and el[0].tag == "code":
            classes += " " + el[0].get("class", "")
        found = _LANGUAGE.search(classes)
        language = found.group(1) if found else ""
        flow.add(("pre", 0, [fence + language, *text.split("\n"), fence]))

    def _blockquote(self, el: Element, flow: Flow) -> None:
        sub = Flow()
        saved = self.heading
        self.children(el, sub)
        self.heading = saved
        sub.flush()
        lines = assemble(sub.blocks)
        if lines:
            flow.add(("quote", 0, ["> " + line if line else ">" for line in lines]))

    def _input(self, el: Element, flow: Flow) -> None:
        flow.inline.append(input_text(el))

    def _textarea(self, el: Element, flow: Flow) -> None:
        flow.inline.append(textarea_text(el, self.raw_text(el, "a <textarea>")))

    def _select(self, el: Element, flow: Flow) -> None:
        options = list(el.iter("option"))
        labels = [
            collapse(option.get("label") or self.raw_text(option, "an <option>"))
            for option in options
        ]
        flow.inline.append(select_text(el, options, labels))
