"""The HTML boundary: clean the input, parse it with libxml2, map lxml's failures to ours.

Everything foreign about reading a view document happens here, so the renderer sees one parsed
tree or one :class:`~protocol.errors.AotuiError`.
"""

from __future__ import annotations

from lxml import etree
from lxml.etree import _Element as Element

from aotui.protocol.errors import AotuiError
from aotui.sandbox.marks import fault

__all__ = ["no_root", "parse_document"]

_BYTE_MAP = bytes.maketrans(b"\r\x0c", b"\n ")
_BYTE_DROP = bytes([*range(0x00, 0x09), 0x0B, *range(0x0E, 0x20), 0x7F])
_LINE_BREAKS = ("\x85".encode(), "\u2028".encode(), "\u2029".encode())


def parse_document(html: str | bytes) -> tuple[Element, bool]:
    """The parsed document, and whether character references may have produced control chars."""
    if isinstance(html, bytes):
        html = html.decode("utf-8-sig", "replace")
    elif not isinstance(html, str):
        raise fault(f"a view must be HTML text (str or bytes), not {type(html).__name__}")
    # Clean at the byte level (a C loop, far cheaper than a regex over the text): NUL stands for
    # <br> inside the renderer, libxml2 refuses other C0 controls, and lone surrogates cannot be
    # encoded. U+0085/U+2028/U+2029 would break lines for str.splitlines().
    data = html.encode("utf-8", "replace")
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    data = data.translate(_BYTE_MAP, _BYTE_DROP)
    for char in _LINE_BREAKS:
        if char in data:
            data = data.replace(char, b" ")
    if not data.strip():
        raise no_root()
    # Plain etree.HTMLParser: the same libxml2 parser as lxml.html without its per-element Python
    # class lookup, which made walking the tree five times slower. A fresh parser per call, since
    # lxml parsers must not be shared between threads.
    parser = etree.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True)
    try:
        doc = etree.fromstring(data, parser)
    except (etree.LxmlError, ValueError) as exc:
        raise fault(f"the view's HTML could not be parsed: {exc}") from None
    if doc is None:
        raise no_root()
    # libxml2 stops reading at 256 levels of nesting; say so rather than render half a view.
    for error in parser.error_log:
        if error.level == etree.ErrorLevels.FATAL:
            reason = "elements nest deeper than 255 levels" if "depth" in error.message else ""
            raise fault(f"the view's HTML is cut short: {reason or error.message.strip()}")
    return doc, b"&#" in data


def no_root() -> AotuiError:
    """The error for a document without a view root."""
    return fault(
        'the document has no view root: mark its root element with view="Name", '
        'e.g. <section view="Conversation">'
    )
