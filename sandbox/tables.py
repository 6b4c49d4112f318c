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
        marked = False

        def collect(container: Element) -> None:
            nonlocal marked
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
                    collect(child)

        collect(el)
        if marked:  # a row group is a semantic list: render rows as content, not as a grid
            self.block(el, flow)
            return
        for caption in captions:
            self.block(caption, flow)
        grid: list[list[str]] = []
        for row in rows:
            cells: list[str] = []
            for cell in row:
                if cell.tag in ("td", "th"):
                    cells.append(self._cell(cell, False))
                    try:
                        span = min(int(cell.get("colspan", "1")), 64)
                    except ValueError:
                        span = 1
                    cells.extend([""] * (span - 1))
            if cells:
                grid.append(cells)
        if not any(any(row) for row in grid):
            return
        flow.add(("table", 0, table_lines(grid)))

    def _dl(self, el: Element, flow: Flow) -> None:
        lines: list[str] = []
        term: str | None = None
        details: list[list[str]] = []

        def close() -> None:
            if term is None and not details:
                return
            if term is not None and len(details) == 1 and len(details[0]) == 1:
                lines.append(f"- {term}: {details[0][0]}")
                return
            if term is not None:
                lines.append(f"- {term}")
            pad = "    " if term is not None else ""
            for detail in details:
                lines.append(pad + "- " + detail[0])
                lines.extend(pad + "  " + line if line else "" for line in detail[1:])

        def walk(container: Element) -> None:
            nonlocal term, details
            for child in container:
                if child.tag == "dt":
                    close()
                    term, details = self._cell(child, False).replace("\\|", "|"), []
                elif child.tag == "dd":
                    sub = Flow()
                    self.children(child, sub)
                    sub.flush()
                    detail = assemble(sub.blocks)
                    if detail:
                        details.append(detail)
                elif child.tag == "div":
                    walk(child)

        walk(el)
        close()
        if lines:
            flow.add(("list", 0, lines))
