"""The pieces the Markdown renderer builds with: blocks, the flow that collects them, text helpers.

A :class:`Flow` gathers inline text in a buffer that becomes a paragraph when a block starts.
Blocks are ``(kind, level, lines)`` tuples; :func:`assemble` joins them, keeping headings and lists
tight against each other (the compact style of CONTRACT §4) and putting one blank line between any
other pair. :func:`finish` enforces the output invariants: one trailing newline, no trailing spaces,
never two blank lines in a row, no line-breaking control characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = [
    "BR",
    "DROPPED",
    "Block",
    "Flow",
    "assemble",
    "code_span",
    "collapse",
    "finish",
    "inline_lines",
    "item_lines",
    "link_label",
    "safe_href",
    "table_lines",
    "take_label",
]

#: Stands for ``<br>`` in the inline buffer; the input is cleaned of NULs, so it cannot collide.
BR = "\x00"

#: Elements whose content never reaches the agent.
DROPPED = frozenset(
    {"script", "style", "template", "noscript", "head", "title", "meta", "link", "base", "svg"}
    | {"canvas", "iframe", "object", "embed", "video", "audio", "source", "track", "map", "area"}
    | {"datalist", "param", "wbr"}
)

#: ``(kind, level, lines)``; kind is para, heading, listhead, list, linkitem, pre, table, quote or
#: hr; ``level`` is the heading level of a heading or listhead (their ``#`` are added on assembly).
Block = tuple[str, int, list[str]]

# Blocks that need no blank line between them (the snapshot's compact style); two ordinary lists
# in a row still get one, or they would read as one list. "linkitem" is a lone view-link bullet.
_TIGHT = frozenset({"heading", "listhead", "list", "linkitem"})
# Blocks whose text can become the label of a list item.
_LABEL_KINDS = frozenset({"para", "heading"})
_BACKTICKS = re.compile(r"`+")
_BAD_SCHEMES = ("javascript:", "vbscript:", "data:")
_URL_ESCAPES = str.maketrans({" ": "%20", "(": "%28", ")": "%29", "<": "%3C", ">": "%3E"})

# Control characters that character references can still produce after parsing.
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")


# Whitespace is collapsed with str.split(), four times faster than a regex. It splits on every
# Unicode space (nbsp and U+3000 too, which a browser would keep) and on the characters that
# str.splitlines() breaks lines at, so none of those can leave a stray line break or trailing space.


def collapse(text: str | None) -> str:
    """Collapse whitespace runs to one space and trim, as a browser shows an attribute's text."""
    return " ".join(text.split()) if text else ""


def inline_lines(text: str) -> list[str]:
    """The lines of a paragraph from its inline buffer: whitespace collapsed, split at ``<br>``."""
    if BR not in text:
        line = " ".join(text.split())
        return [line] if line else []
    lines = [" ".join(part.split()) for part in text.split(BR)]
    while lines and not lines[-1]:
        lines.pop()
    start = 0
    while start < len(lines) and not lines[start]:
        start += 1
    return lines[start:]


def link_label(text: str) -> str:
    """``text`` made safe as a link label: brackets are escaped unless they are balanced."""
    if "[" not in text and "]" not in text and "\\" not in text:
        return text
    depth = 0
    for char in text:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
            if depth < 0:
                break
    if depth == 0 and "\\" not in text:
        return text
    return text.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def code_span(text: str) -> str:
    """Inline code with a fence longer than any backtick run inside."""
    longest = max(map(len, _BACKTICKS.findall(text)), default=0) if "`" in text else 0
    fence = "`" * (longest + 1)
    pad = " " if text[0] == "`" or text[-1] == "`" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def safe_href(href: str | None) -> str | None:
    """A link target fit for Markdown, or ``None`` for none or a script/data URL."""
    if not href:
        return None
    # Browsers ignore tabs and newlines anywhere in a URL, so "java\tscript:" is still a script.
    url = href.strip(" \t\n\r\f\x00\x01\x02\x03\x04\x05\x06\x07\x08\x0b\x0e\x0f")
    url = url.replace("\t", "").replace("\n", "").replace("\r", "")
    if not url or url[:11].lower().startswith(_BAD_SCHEMES):
        return None
    return url.translate(_URL_ESCAPES)


def take_label(
    blocks: list[Block], kinds: frozenset[str] = _LABEL_KINDS
) -> tuple[list[str] | None, list[Block]]:
    """Split a list item's blocks into its label (the first paragraph or heading) and the rest."""
    if blocks and blocks[0][0] in kinds:
        return blocks[0][2], blocks[1:]
    return None, blocks


def assemble(blocks: Iterable[Block]) -> list[str]:
    """The Markdown lines of a sequence of blocks."""
    out: list[str] = []
    previous = ""
    for kind, level, lines in blocks:
        tight = previous in _TIGHT and kind in _TIGHT and not previous == kind == "list"
        if previous and not tight:
            out.append("")
        if level:
            out.append("#" * level + " " + lines[0])
        else:
            out.extend(lines)
        previous = kind
    return out


def _nested(blocks: list[Block]) -> list[str]:
    """An item's content after its label: paragraphs become sub-bullets, other blocks indent."""
    out: list[str] = []
    under_head = False
    for kind, _level, lines in blocks:
        if kind in ("para", "heading", "listhead"):
            out.append("    - " + lines[0])
            if len(lines) > 1:
                out += ["      " + line if line else "" for line in lines[1:]]
        else:
            pad = "        " if under_head and kind == "list" else "    "
            out += [pad + line if line else "" for line in lines]
        under_head = kind == "listhead"
    return out


def item_lines(
    marker: str, label: list[str], rest: list[Block], subs: list[str] | None = None
) -> list[str]:
    """The lines of one list item: marker and label, then sub-bullets ``subs``, then ``rest``."""
    # Runs once per list item, so it avoids generator expressions on the common short paths.
    lines = [marker + label[0] if label else marker.rstrip()]
    if len(label) > 1:
        lines += ["    " + line if line else "" for line in label[1:]]
    if subs:
        lines += ["    - " + sub for sub in subs]
    if rest:
        lines += _nested(rest)
    return lines


class Flow:
    """Rendered content in progress: finished blocks plus the pending inline buffer."""

    __slots__ = ("blocks", "inline", "label_mode")

    def __init__(self, label_mode: bool = False) -> None:
        self.blocks: list[Block] = []
        self.inline: list[str] = []
        #: The flow is a link label until its first block: formatting and links render as text.
        self.label_mode = label_mode

    @property
    def plain(self) -> bool:
        """Whether inline content added now is part of a link label (so no nested markup)."""
        return self.label_mode and not self.blocks

    def flush(self) -> None:
        """Turn the inline buffer into a paragraph block."""
        if self.inline:
            lines = inline_lines("".join(self.inline))
            self.inline.clear()
            if lines:
                self.blocks.append(("para", 0, lines))

    def add(self, block: Block) -> None:
        """Append a block after the pending inline text."""
        if self.inline:
            self.flush()
        self.blocks.append(block)

    def splice(self, other: Flow) -> None:
        """Append the content of ``other`` (blocks, then its pending inline text)."""
        if other.blocks:
            self.flush()
            self.blocks.extend(other.blocks)
        self.inline.extend(other.inline)

    def text(self) -> str:
        """All content flattened to one line (for headings and table cells)."""
        if not self.blocks:
            return " ".join(inline_lines("".join(self.inline)))
        self.flush()
        return " ".join(line.strip() for block in self.blocks for line in block[2] if line.strip())


def table_lines(grid: list[list[str]]) -> list[str]:
    """A GitHub pipe table; the first row is the header, short rows are padded."""
    width = max(map(len, grid))
    lines = []
    for index, row in enumerate(grid):
        cells = row + [""] * (width - len(row))
        lines.append("| " + " | ".join(cells) + " |")
        if index == 0:
            lines.append("|" + " --- |" * width)
    return lines


def _control_replacement(found: re.Match[str]) -> str:
    return " " if found.group().isspace() else ""  # line separators read as a space


def finish(lines: Iterable[str], controls: bool = True) -> str:
    """The final text: no trailing spaces, no blank-line runs, exactly one final newline.

    ``controls=False`` skips the scan for control characters, for input known to have none.
    """
    text = "\n".join(lines)
    if controls and _UNSAFE.search(text):
        text = _UNSAFE.sub(_control_replacement, text)
    out: list[str] = []
    blank = True  # drops leading blank lines too
    for raw in text.split("\n"):
        line = raw.rstrip()
        if line:
            out.append(line)
            blank = False
        elif not blank:
            out.append("")
            blank = True
    while out and not out[-1]:
        out.pop()
    return "\n".join(out) + "\n"
