"""Tables and definition lists: the grid-shaped part of ordinary HTML → Markdown.

A mixin of :class:`sandbox.markdown.MarkdownRenderer`: tables become GitHub pipe tables (the
first row is the header), definition lists become ``- Term: definition`` bullets. A table whose
rows or row groups carry semantic marks (``<tbody list=…>``) renders as content, row by row.
"""

from __future__ import annotations

from lxml.etree import _Element as Element

from aotui.sandbox.flow import DROPPED, Flow, assemble, table_lines

__all__ = ["TablesMixin"]

_SKIPPED = DROPPED | {"colgroup", "col"}


class TablesMixin:
    """The ``table``, ``tr`` and ``dl`` handlers of the Markdown renderer."""

    heading: int
    marks: frozenset[str]

    def children(self, el: Element, flow: Flow) -> None:
        """Render an element's content into ``flow`` (provided by the renderer)."""
        raise NotImplementedError

    def block(self, el: Element, flow: Flow) -> None:
        """Render a block element (provided by the renderer)."""
        raise NotImplementedError

    def _cell(self, el: Element, plain: bool) -> str:
        sub = Flow(plain)
        saved = self.heading
        self.children(el, sub)
        self.heading = saved
        return sub.text().replace("|", "\\|")

    def _row(self, el: Element, flow: Flow) -> None:
        # A row outside a table (or in a table that is a semantic list): cells joined by " | ".
        cells = [self._cell(cell, flow.plain) for cell in el if cell.tag in ("td", "th")]
        line = " | ".join(cell for cell in cells if cell)
        if line:
            flow.inline.append(line)
            flow.flush()

    def _table(self, el: Element, flow: Flow) -> None:
        rows: list[Element] = []
        captions: list[Element] = []
        if self._collect_rows(el, rows, captions):
            # A row group is a semantic list: render rows as content, not as a grid.
            self.block(el, flow)
            return
        for caption in captions:
            self.block(caption, flow)
        grid = [cells for cells in map(self._grid_cells, rows) if cells]
        if not any(any(row) for row in grid):
            return
        flow.add(("table", 0, table_lines(grid)))

    def _collect_rows(
        self, container: Element, rows: list[Element], captions: list[Element]
    ) -> bool:
        """Gather the rows and captions of ``container``; whether any part carries a mark."""
        marked = False
        for child in container:
            tag = child.tag
            if type(tag) is not str or tag in _SKIPPED:
                continue
            if self.marks and not self.marks.isdisjoint(child.keys()):
                marked = True
            if tag == "tr":
                rows.append(child)
            elif tag == "caption":
                captions.append(child)
            else:  # thead, tbody, tfoot, and wrappers browsers would move out
                marked = self._collect_rows(child, rows, captions) or marked
        return marked

    def _grid_cells(self, row: Element) -> list[str]:
        """A row's cells as grid text, a spanning cell followed by the empty cells it covers."""
        cells: list[str] = []
        for cell in row:
            if cell.tag in ("td", "th"):
                cells.append(self._cell(cell, False))
                cells.extend([""] * (_colspan(cell) - 1))
        return cells

    def _dl(self, el: Element, flow: Flow) -> None:
        # Each entry is a term and its definitions; definitions before any term have none.
        entries: list[tuple[str | None, list[list[str]]]] = [(None, [])]
        self._definitions(el, entries)
        lines = [line for term, details in entries for line in _entry_lines(term, details)]
        if lines:
            flow.add(("list", 0, lines))

    def _definitions(
        self, container: Element, entries: list[tuple[str | None, list[list[str]]]]
    ) -> None:
        """Append the terms and definitions of ``container`` (and of its ``div`` groups)."""
        for child in container:
            if child.tag == "dt":
                entries.append((self._cell(child, False).replace("\\|", "|"), []))
            elif child.tag == "dd":
                sub = Flow()
                self.children(child, sub)
                sub.flush()
                detail = assemble(sub.blocks)
                if detail:
                    entries[-1][1].append(detail)
            elif child.tag == "div":
                self._definitions(child, entries)


def _colspan(cell: Element) -> int:
    """How many columns a cell spans, capped so a hostile colspan cannot widen a grid unbounded."""
    try:
        return min(int(cell.get("colspan", "1")), 64)
    except ValueError:
        return 1


def _entry_lines(term: str | None, details: list[list[str]]) -> list[str]:
    """The bullets of one term: ``- Term: definition`` when it has one single-line definition."""
    if term is None and not details:
        return []
    if term is not None and len(details) == 1 and len(details[0]) == 1:
        return [f"- {term}: {details[0][0]}"]
    lines = [f"- {term}"] if term is not None else []
    pad = "    " if term is not None else ""
    for detail in details:
        lines.append(pad + "- " + detail[0])
        lines.extend(pad + "  " + line if line else "" for line in detail[1:])
    return lines
